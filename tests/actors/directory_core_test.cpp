// The directory core over a store that is not etcd (memory_store.hpp): what
// a rank's manager sees of it (the handshake, its reply, the pushes, a
// rank gone for good), and the core's rules about ids held on a live lease,
// forged entries and a lease the store lost. Two cores over one store are
// two processes of one deployment.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/scoped_actor.hpp"

#include "kvroom/actors/control/directory/directory_core.hpp"
#include "kvroom/actors/control/directory/signed_entry.hpp"
#include "kvroom/messages/registration.hpp"
#include "memory_store.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

constexpr auto patience = std::chrono::seconds(20);

rank_entry entry_of(role side, rank_id id, uint64_t incarnation) {
  rank_entry e;
  e.rank = test::make_rank(side, 0, 0, id);
  e.incarnation = incarnation;
  e.control_host = "127.0.0.1";
  e.control_port = static_cast<uint16_t>(41000 + id % 1000);
  e.layout.kv.push_back(paged_buffer{mem_desc{0x1000, 64 * 4096, -1}, 4096});
  e.endpoints.push_back(endpoint_desc{"tcp", "127.0.0.1:5000", {}});
  return e;
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<test::memory_store> store = std::make_shared<test::memory_store>();
  std::shared_ptr<const membership> members =
    std::make_shared<const membership>(deployment_secret{"0123456789abcdef0123"});

  fixture() {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  ~fixture() {
    caf::scoped_actor self{*sys};
    for (auto& d : cores)
      self->send_exit(d, caf::exit_reason::user_shutdown);
  }

  /// One process's directory over the shared store.
  caf::actor core(uint32_t lease_ttl_ms = 2000) {
    directory_core_options opts;
    opts.name = "memory directory";
    opts.prefix = "/kvroom/t";
    opts.lease_ttl_ms = lease_ttl_ms;
    opts.registration_timeout_ms = 2000;
    auto d = spawn_directory(*sys, opts, store->connector(), members, 5000);
    REQUIRE(d);
    cores.push_back(*d);
    return *d;
  }

  /// What a rank's manager does: the handshake, then its registration.
  caf::expected<directory_update> enroll(caf::scoped_actor& self, const caf::actor& dir,
                                         const rank_entry& e) {
    auto mine = make_nonce();
    caf::expected<directory_update> out{make_error(errc::timeout)};
    registry_challenge c;
    bool challenged = false;
    self->request(dir, patience, registry_hello{mine})
      .receive([&](registry_challenge& x) { c = x, challenged = true; },
               [&](caf::error& err) { out = err; });
    if (!challenged)
      return out;
    if (!membership::matches(c.proof, members->registry_proof(mine, c.nonce)))
      return make_error(errc::unauthorized, "the directory's proof");
    register_rank msg{e, mine, members->rank_proof(c.nonce, mine, e.rank.id, e.incarnation)};
    self->request(dir, patience, std::move(msg))
      .receive([&](directory_update& x) { out = std::move(x); },
               [&](caf::error& err) { out = err; });
    return out;
  }

  std::vector<caf::actor> cores;
};

bool lists(const directory_update& u, rank_id id) {
  return std::any_of(u.ranks.begin(), u.ranks.end(), [&](auto& e) { return e.rank.id == id; });
}

/// The next push that lists (or stops listing) `id`, skipping the others.
bool pushed(caf::scoped_actor& self, rank_id id, bool listed) {
  auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until) {
    bool hit = false, any = false;
    self->receive([&](directory_update& u) { any = true, hit = lists(u, id) == listed; },
                  [&](rank_down&) { any = true; },
                  caf::after(std::chrono::milliseconds(100)) >> [] {});
    if (hit)
      return true;
    (void) any;
  }
  return false;
}

} // namespace

TEST_CASE("directory core over another store: enrol, push, and a rank gone for good") {
  fixture f;
  auto p1 = f.core();
  auto p2 = f.core();
  caf::scoped_actor a{*f.sys}, b{*f.sys};
  auto first = f.enroll(a, p1, entry_of(role::prefill, 0, 11));
  REQUIRE(first);
  CHECK(lists(*first, 0));
  // The second process's rank: its reply lists the first, and the first
  // hears of it through the store's watch.
  auto second = f.enroll(b, p2, entry_of(role::decode, 65536, 22));
  REQUIRE(second);
  CHECK(lists(*second, 0));
  CHECK(lists(*second, 65536));
  CHECK(pushed(a, 65536, true));
  // The first process dies: its lease expires, its entry goes, and the
  // other process's rank hears it is gone for good.
  auto leases = f.store->leases();
  REQUIRE(leases.size() == 2);
  f.store->expire(leases.front());
  bool down = false;
  auto until = std::chrono::steady_clock::now() + patience;
  while (!down && std::chrono::steady_clock::now() < until)
    b->receive([&](rank_down& d) { down = d.rank.id == 0 && d.final; },
               [&](directory_update&) {}, caf::after(std::chrono::milliseconds(100)) >> [] {});
  CHECK(down);
}

TEST_CASE("directory core over another store: an id held on a live lease, a forged entry") {
  fixture f;
  auto p1 = f.core();
  auto p2 = f.core();
  caf::scoped_actor a{*f.sys}, b{*f.sys}, c{*f.sys};
  REQUIRE(f.enroll(a, p1, entry_of(role::prefill, 0, 11)));
  // Another process with the same id, while the holder's lease lives: held
  // until the holder's TTL has passed, then refused (one live process per id).
  auto twin = f.enroll(b, p2, entry_of(role::prefill, 0, 99));
  REQUIRE_FALSE(twin);
  CHECK(describe(twin.error()).find("registration refused") != std::string::npos);
  // A key written by a client without the deployment's secret routes
  // nothing: the next rank's reply does not list it.
  signed_entry_codec stranger{*f.sys, "/kvroom/t",
                              std::make_shared<const membership>(deployment_secret{"another-one-entirely"})};
  f.store->put(stranger.key_of(7), stranger.encode(entry_of(role::decode, 7, 5), 0));
  auto third = f.enroll(c, p2, entry_of(role::decode, 65536, 33));
  REQUIRE(third);
  CHECK(lists(*third, 0));
  CHECK_FALSE(lists(*third, 7));
}

TEST_CASE("directory core over another store: a replacement waits for the dead holder's lease") {
  fixture f;
  // A TTL far beyond the few steps below: the holder's lease lives until
  // the test expires it, and the replacement's wait (TTL + 1 s) cannot run
  // out first on any machine.
  auto p1 = f.core(30'000);
  auto p2 = f.core(30'000);
  caf::scoped_actor a{*f.sys}, b{*f.sys}, c{*f.sys};
  REQUIRE(f.enroll(a, p1, entry_of(role::prefill, 0, 11)));
  auto leases = f.store->leases();
  REQUIRE(leases.size() == 2);
  // The replacement asks while the holder's lease lives (its admission
  // read the prefix, found the id held, and waits); then the holder's
  // process dies. The registration lands once the lease is gone.
  auto before = f.store->reads();
  caf::expected<directory_update> replaced{make_error(errc::timeout)};
  std::thread replacement{[&] { replaced = f.enroll(b, p2, entry_of(role::prefill, 0, 12)); }};
  while (f.store->reads() == before)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  f.store->expire(leases.front());
  replacement.join();
  REQUIRE(replaced);
  auto held = std::find_if(replaced->ranks.begin(), replaced->ranks.end(),
                           [](auto& e) { return e.rank.id == 0; });
  REQUIRE(held != replaced->ranks.end());
  CHECK(held->incarnation == 12);
}
