// The directory's plain parts: admission rules shared by both directories,
// the etcd URL and encoding helpers, signed entries (what a reader accepts
// from etcd), and what lazy links ask of the manager's tables.
#include <catch2/catch.hpp>

#include <algorithm>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"

#include "kvroom/actors/control/directory_rules.hpp"
#include "kvroom/actors/control/directory_stores.hpp"
#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/actors/control/directory/base64.hpp"
#include "kvroom/actors/control/directory/signed_entry.hpp"
#include "kvroom/actors/control/registration_door.hpp"
#include "kvroom/actors/control/side_shape.hpp"
#include "kvroom/actors/manager/parking.hpp"
#include "kvroom/actors/manager/peer_directory.hpp"
#include "kvroom/messages/registration.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

using test::make_rank;

rank_entry entry_of(role side, int32_t dp, int32_t tp, rank_id id, uint64_t incarnation = 1) {
  rank_entry e;
  e.rank = make_rank(side, dp, tp, id);
  e.incarnation = incarnation;
  e.control_host = "127.0.0.1";
  e.control_port = static_cast<uint16_t>(40000 + id % 1000);
  for (uint64_t i = 0; i < 2; ++i)
    e.layout.kv.push_back(paged_buffer{mem_desc{0x1000 * (i + 1), 64 * 4096, -1}, 4096});
  e.endpoints.push_back(endpoint_desc{"tcp", "127.0.0.1:5000", {}});
  return e;
}

struct codec_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  codec_fixture() {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  signed_entry_codec codec(const std::string& secret, const std::string& prefix = "/kvroom/t") {
    return signed_entry_codec{*sys, prefix,
                              std::make_shared<const membership>(deployment_secret{secret})};
  }
};

store_kv stored(const signed_entry_codec& c, const rank_entry& e, int64_t lease) {
  return store_kv{c.key_of(e.rank.id), c.encode(e, lease), 1, 1, lease};
}

} // namespace

TEST_CASE("admission: id, place, layout and size, in that order, each with its reason") {
  std::vector<rank_entry> live{entry_of(role::prefill, 0, 0, 0), entry_of(role::decode, 0, 0, 100)};
  CHECK_FALSE(admission_refusal(live, entry_of(role::prefill, 0, 1, 1), 8));
  // The same incarnation registers again; another one waits for the first.
  CHECK_FALSE(admission_refusal(live, entry_of(role::prefill, 0, 0, 0), 8));
  auto held = admission_refusal(live, entry_of(role::prefill, 1, 0, 0, 2), 8);
  REQUIRE(held);
  CHECK(held->code == errc::invalid_config);
  CHECK(held->why.find("is held by the live") != std::string::npos);
  CHECK(held->held);
  CHECK(held->holder == 0);
  auto place = admission_refusal(live, entry_of(role::prefill, 0, 0, 7), 8);
  REQUIRE(place);
  CHECK(place->why.find("takes the place of the live") != std::string::npos);
  CHECK(place->held);
  CHECK(place->holder == 0);
  auto misfit = entry_of(role::decode, 1, 0, 101);
  misfit.layout.kv.front().page_size_bytes = 8192;
  misfit.layout.kv.back().page_size_bytes = 8192;
  auto no = admission_refusal(live, misfit, 8);
  REQUIRE(no);
  CHECK(no->code == errc::incompatible);
  CHECK_FALSE(no->held);
  auto full = admission_refusal(live, entry_of(role::decode, 1, 0, 101), 2);
  REQUIRE(full);
  CHECK(full->code == errc::limit_reached);
  // A rank registering again does not count against the limit.
  CHECK_FALSE(admission_refusal(live, entry_of(role::decode, 0, 0, 100), 2));
}

TEST_CASE("admission: one DP size per side, where ranks say it") {
  auto said = [](role side, int32_t dp, rank_id id, int32_t dp_size) {
    auto e = entry_of(side, dp, 0, id);
    e.rank.dp_size = dp_size;
    return e;
  };
  std::vector<rank_entry> live{said(role::prefill, 0, 0, 2), said(role::decode, 0, 100, 4)};
  CHECK_FALSE(admission_refusal(live, said(role::prefill, 1, 1, 2), 8));
  CHECK_FALSE(admission_refusal(live, said(role::prefill, 1, 1, 0), 8)); // says nothing
  CHECK_FALSE(admission_refusal(live, said(role::decode, 1, 101, 4), 8)); // the other side's
  auto no = admission_refusal(live, said(role::prefill, 1, 1, 3), 8);
  REQUIRE(no);
  CHECK(no->code == errc::incompatible);
  CHECK(no->why.find("says its side has 3 DP groups") != std::string::npos);
}

TEST_CASE("side shape: said DP sizes count before every group is listed") {
  auto entry = [](role side, int32_t dp, int32_t tp, int32_t tp_size, int32_t dp_size) {
    auto e = std::make_shared<rank_entry>(entry_of(side, dp, tp, dp * 10 + tp));
    e->rank.tp_size = tp_size;
    e->rank.dp_size = dp_size;
    return std::shared_ptr<const rank_entry>(e);
  };
  // Group 0 of two listed: the side is not complete (it would read as one
  // group of one if the size were inferred).
  auto part = shape_of({entry(role::prefill, 0, 0, 1, 2), entry(role::decode, 0, 0, 1, 1)},
                       role::prefill);
  CHECK(part.ranks == 1);
  CHECK(part.dp_size == 2);
  CHECK_FALSE(part.complete);
  auto whole = shape_of({entry(role::prefill, 0, 0, 2, 2), entry(role::prefill, 0, 1, 2, 2),
                         entry(role::prefill, 1, 0, 2, 2), entry(role::prefill, 1, 1, 2, 2)},
                        role::prefill);
  CHECK(whole.dp_size == 2);
  CHECK(whole.tp_size == 2);
  CHECK(whole.complete);
  // Unsaid: inferred from the highest DP rank listed.
  auto inferred = shape_of({entry(role::prefill, 1, 0, 1, 0)}, role::prefill);
  CHECK(inferred.dp_size == 2);
  CHECK_FALSE(inferred.complete);
  CHECK(shape_of({entry(role::decode, 0, 0, 1, 0)}, role::prefill).ranks == 0);
}

TEST_CASE("registration door: a proof over this door's challenge, once") {
  auto members = std::make_shared<const membership>(deployment_secret{"0123456789abcdef"});
  registration_door door{members, 2};
  caf::actor_addr nobody;
  CHECK_FALSE(door.hello(nobody, make_nonce(), 0)); // anonymous
  // Challenges are bounded; an address is a key, so a real one is needed:
  // the check of a missing challenge and a wrong proof need none.
  register_rank msg{entry_of(role::prefill, 0, 0, 0), make_nonce(), "proof"};
  CHECK(door.check(nobody, msg, 0));
}

TEST_CASE("registration door: a registration lists the manager its process names") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto idle = [](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; };
  auto control = sys.spawn(idle); // registers
  auto manager = sys.spawn(idle); // what peers are to reach
  auto registrant = caf::actor_cast<caf::strong_actor_ptr>(control);
  auto e = entry_of(role::prefill, 0, 0, 0);
  // A rank's control actor registers for its manager: the manager is listed.
  e.manager = manager;
  CHECK(registration_door::listed_actor(registrant, e) == manager);
  // Naming nothing: the registrant itself. (Naming another process's actor
  // is the same: two actor systems in one process share a node id in CAF
  // 0.17, so that case needs two processes; every process scenario
  // registers through a control actor.)
  e.manager = nullptr;
  CHECK(registration_door::listed_actor(registrant, e) == control);
  // Anonymous: nobody.
  e.manager = manager;
  CHECK_FALSE(registration_door::listed_actor(nullptr, e));
  caf::anon_send_exit(control, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(manager, caf::exit_reason::user_shutdown);
}

TEST_CASE("etcd URLs: members, TLS, and what is refused") {
  auto one = parse_etcd_url("etcd://127.0.0.1:2379");
  REQUIRE(one);
  CHECK(one->endpoints == std::vector<std::string>{"127.0.0.1:2379"});
  CHECK_FALSE(one->tls);
  auto three = parse_etcd_url("etcds://a:1,b:2,c:3");
  REQUIRE(three);
  CHECK(three->tls);
  CHECK(three->endpoints.size() == 3);
  for (auto bad : {"http://a:1", "etcd://", "etcd://a", "etcd://a:", "etcd://a:0", "etcd://a:70000",
                   "etcd://a:1,", "etcd://a:x1"})
    CHECK_FALSE(parse_etcd_url(bad));
}

TEST_CASE("base64 and prefix ends as etcd's gateway wants them") {
  for (const std::string& s : std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto back = base64_decode(base64_encode(s));
    REQUIRE(back);
    CHECK(*back == s);
  }
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK_FALSE(base64_decode("abc"));
  CHECK(prefix_end("/kvroom/t/ranks/") == "/kvroom/t/ranks0");
  CHECK(prefix_end(std::string("a\xff", 2)) == "b");
}

TEST_CASE("signed entries: what a reader accepts from etcd") {
  codec_fixture f;
  auto codec = f.codec("the deployment secret");
  auto e = entry_of(role::decode, 2, 1, 65537, 77);
  e.integrity = "xxh3";
  auto kv = stored(codec, e, 42);
  CHECK(kv.key == "/kvroom/t/ranks/65537");
  auto back = codec.decode(kv);
  REQUIRE(back);
  CHECK(back->rank.id == 65537);
  CHECK(back->rank.dp_rank == 2);
  CHECK(back->incarnation == 77);
  CHECK(back->control_port == e.control_port);
  CHECK(back->layout.kv.size() == 2);
  CHECK(back->endpoints.size() == 1);
  CHECK(back->integrity == "xxh3");
  CHECK_FALSE(back->manager);
  SECTION("written without the secret") {
    auto other = f.codec("another secret entirely");
    auto forged = stored(other, e, 42);
    auto no = codec.decode(forged);
    REQUIRE_FALSE(no);
    CHECK(describe(no.error()).find("proof fails") != std::string::npos);
  }
  SECTION("a copy on another lease (its own expired)") {
    auto copy = kv;
    copy.lease = 43;
    CHECK_FALSE(codec.decode(copy));
  }
  SECTION("moved to another id or another deployment") {
    auto moved = kv;
    moved.key = codec.key_of(65538);
    CHECK_FALSE(codec.decode(moved));
    auto elsewhere = f.codec("the deployment secret", "/kvroom/other");
    auto there = kv;
    there.key = elsewhere.key_of(65537);
    CHECK_FALSE(elsewhere.decode(there));
  }
  SECTION("changed bytes") {
    auto changed = kv;
    auto at = changed.value.find("\"control\"");
    REQUIRE(at != std::string::npos);
    changed.value.replace(changed.value.find("\"entry\":\"") + 9, 4, "AAAA");
    CHECK_FALSE(codec.decode(changed));
  }
  SECTION("not an entry at all") {
    for (const std::string& junk : std::vector<std::string>{"", "{}", "[1]", "not json", R"({"kvroom":1,"entry":"AAAA","mac":"AAAA","lease":"42"})"}) {
      auto x = kv;
      x.value = junk;
      CHECK_FALSE(codec.decode(x));
    }
    auto x = kv;
    x.key = "/kvroom/t/ranks/abc";
    CHECK_FALSE(codec.decode(x));
  }
}

TEST_CASE("lazy links: what waits for a rank or a decider, and the listed ranks of a group") {
  parking p{16, 1000};
  CHECK(p.waiting_ranks().empty());
  p.park_for_rank(5, caf::make_message(1), 0);
  p.park_for_rank(5, caf::make_message(2), 0);
  p.park_for_rank(6, caf::make_message(3), 0);
  CHECK(p.waiting_ranks() == std::vector<rank_id>{5, 6});
  p.park_for_decider(decider_ref{role::prefill, 3}, caf::make_message(4), 0);
  p.park_for_decider(decider_ref{role::prefill, 3}, caf::make_message(5), 0);
  REQUIRE(p.waiting_deciders().size() == 1);
  CHECK(p.waiting_deciders().front().dp_rank == 3);

  peer_directory dir{100, 5000};
  std::vector<rank_entry> listed{entry_of(role::prefill, 0, 0, 0), entry_of(role::prefill, 0, 1, 1),
                                 entry_of(role::prefill, 1, 0, 2), entry_of(role::decode, 0, 1, 101)};
  auto changes = dir.update(listed);
  // Nothing is dialled because of a listing alone.
  CHECK(changes.to_link.size() == 4);
  CHECK(dir.listed_group(role::prefill, 0).size() == 2);
  CHECK(dir.listed_group(role::prefill, 1).size() == 1);
  CHECK(dir.listed_group(role::decode, 1).empty());
  auto decider = dir.listed_decider(decider_ref{role::prefill, 0});
  REQUIRE(decider);
  CHECK(decider->rank.id == 0);
  CHECK_FALSE(dir.listed_decider(decider_ref{role::prefill, 7}));
}

TEST_CASE("directory stores: the URL's scheme picks the store, others are refused by name") {
  auto etcd = directory_store_of("etcd://10.0.0.1:2379,10.0.0.2:2379");
  REQUIRE(etcd);
  CHECK(std::count((*etcd)->schemes.begin(), (*etcd)->schemes.end(), "etcds") == 1);
  auto tls = directory_store_of("etcds://10.0.0.1:2379");
  REQUIRE(tls);
  CHECK(*tls == *etcd);
  auto other = directory_store_of("consul://10.0.0.1:8500");
  REQUIRE_FALSE(other);
  CHECK_THAT(describe(other.error()), Catch::Contains("'consul://'")
                                        && Catch::Contains("etcd://, etcds://"));
  auto bare = directory_store_of("10.0.0.1:2379");
  REQUIRE_FALSE(bare);
  CHECK_THAT(describe(bare.error()), Catch::Contains("without a scheme"));
  // A replacement waits out its predecessor's lease before it registers.
  directory_options opts;
  opts.lease_ttl_ms = 5000;
  opts.registration_timeout_ms = 15000;
  CHECK((*etcd)->registration_wait_ms(opts) == 21000);
}
