// Hybrid-model state beside the KV pages (SGLang's `state_indices`): Mamba
// state slots and sliding-window pages move with the last chunk, byte-exact;
// a room is not Success before its state landed; bad state indices and
// mismatched layouts are refused with the reason.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "kvroom/kit/harness.hpp"
#include "kvroom/kit/testkit.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

namespace {

/// The harness's bounded wait, with these tests' limit.
bool until(std::function<bool()> pred) {
  return harness::wait_until(std::move(pred), 5000ms);
}

/// 2 layers of 256 B pages and `num_state` state buffers of 8 pages of
/// `state_bytes`.
kv_shape hybrid_shape(uint32_t num_state, uint64_t state_bytes) {
  kv_shape s;
  s.num_buffers = 4;
  s.num_pages = 16;
  s.page_size_bytes = 256;
  s.num_aux = 1;
  s.aux_slots = 4;
  s.aux_item_bytes = 32;
  s.num_state = num_state;
  s.state_pages = 8;
  s.state_page_bytes = state_bytes;
  return s;
}

struct pair_of_ranks {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  std::vector<std::unique_ptr<host_kv_cache>> mem;
  std::vector<std::unique_ptr<rank>> prefill, decode;

  /// `tp` prefill and decode ranks of `shape`; `parallel`: declare a model
  /// of 2 layers, 2 heads x 32 x 2 B, 2 tokens per page (256 B pages at TP 1).
  pair_of_ranks(int tp, const kv_shape& shape, bool parallel = false) {
    for (auto side : {role::prefill, role::decode})
      for (int t = 0; t < tp; ++t) {
        auto s = shape;
        parallel_layout x;
        x.tp_size = tp;
        x.tp_rank = t;
        x.layers = 2;
        x.total_kv_heads = 2;
        x.head_dim = 32;
        x.tokens_per_page = 2;
        if (parallel)
          s.page_size_bytes = x.page_bytes();
        mem.push_back(std::make_unique<host_kv_cache>(s));
        mem.back()->fill(0xEE);
        rank_config c;
        c.side = side;
        c.tp_rank = t;
        c.tp_size = tp;
        c.memory = mem.back()->layout();
        if (parallel)
          c.parallel = x;
        c.timeouts = room_timeouts{5'000, 5'000, 5'000};
        auto r = rt.add_rank(c);
        REQUIRE(r);
        (side == role::prefill ? prefill : decode).push_back(std::move(*r));
      }
  }

  host_kv_cache& dst(size_t t) {
    return *mem[prefill.size() + t];
  }
};

} // namespace

TEST_CASE("hybrid state: Mamba slots and SWA window pages land with the room, byte-exact") {
  SECTION("Mamba: one state slot in each of 2 state buffers, 1P x 1D") {
    pair_of_ranks g{1, hybrid_shape(2, 512)};
    room_id room = 11;
    g.mem[0]->write_room(room, {1, 2}, 0);
    g.mem[0]->write_state(room, {6});
    auto r = g.decode[0]->make_receiver(room);
    auto s = g.prefill[0]->make_sender(room);
    REQUIRE(r);
    REQUIRE(s);
    REQUIRE_FALSE(r->init({9, 4}, 3, {2}));
    REQUIRE_FALSE(s->init(2, 0));
    REQUIRE_FALSE(s->send({1}, false));
    REQUIRE_FALSE(s->send({2}, true, {6}));
    REQUIRE(until([&] { return r->poll() == kv_poll::success; }));
    REQUIRE(until([&] { return s->poll() == kv_poll::success; }));
    std::string why;
    CHECK(g.dst(0).check_room(room, {9, 4}, 3, &why));
    CHECK(g.dst(0).check_state(room, {2}, &why));
    INFO(why);
    CHECK(g.dst(0).count_state_changed_outside({2}, 0xEE) == 0);
  }
  SECTION("SWA: the window's pages, 2P x 2D, declared layouts") {
    pair_of_ranks g{2, hybrid_shape(2, 256), true};
    room_id room = 12;
    std::vector<kv_sender> senders;
    std::vector<kv_receiver> receivers;
    for (auto& d : g.decode) {
      auto r = d->make_receiver(room);
      REQUIRE(r);
      REQUIRE_FALSE(r->init({3, 5}, 1, {7, 0, 1}));
      receivers.push_back(std::move(*r));
    }
    for (size_t t = 0; t < 2; ++t) {
      parallel_layout x;
      x.tp_size = 2;
      x.tp_rank = static_cast<int32_t>(t);
      x.layers = 2;
      x.total_kv_heads = 2;
      x.head_dim = 32;
      x.tokens_per_page = 2;
      g.mem[t]->write_room(room, {0, 1}, 2, x);
      g.mem[t]->write_state(room ^ (t << 20), {4, 5, 6});
      auto s = g.prefill[t]->make_sender(room);
      REQUIRE(s);
      REQUIRE_FALSE(s->init(2, 2));
      REQUIRE_FALSE(s->send({0, 1}, true, {4, 5, 6}));
      senders.push_back(std::move(*s));
    }
    for (size_t t = 0; t < 2; ++t) {
      REQUIRE(until([&] { return receivers[t].poll() == kv_poll::success; }));
      std::string why;
      // Each TP slot's own state: from the prefill rank of the same slot.
      CHECK(g.dst(t).check_state(room ^ (t << 20), {7, 0, 1}, &why));
      INFO(why);
      CHECK(g.dst(t).count_state_changed_outside({7, 0, 1}, 0xEE) == 0);
    }
  }
}

TEST_CASE("hybrid state: bad state indices and misfit layouts are refused with the reason") {
  auto failed_with = [](room_handle& h, const std::string& text) {
    REQUIRE(until([&] { return is_terminal(h.poll()); }));
    REQUIRE(h.poll() == kv_poll::failed);
    auto f = h.failure();
    REQUIRE(f);
    INFO(f->failure_reason);
    CHECK(f->failure_reason.find(text) != std::string::npos);
  };
  pair_of_ranks g{1, hybrid_shape(2, 128)};
  SECTION("decode hands no state") {
    auto r = g.decode[0]->make_receiver(21);
    REQUIRE(r);
    REQUIRE_FALSE(r->init({1}, 0));
    failed_with(*r, "no state indices");
  }
  SECTION("a state index out of range") {
    auto r = g.decode[0]->make_receiver(22);
    REQUIRE(r);
    REQUIRE_FALSE(r->init({1}, 0, {8}));
    failed_with(*r, "state index 8 out of range");
  }
  SECTION("state with a chunk that is not the last") {
    auto s = g.prefill[0]->make_sender(23);
    REQUIRE(s);
    REQUIRE_FALSE(s->init(2, 0));
    REQUIRE_FALSE(s->send({1}, false, {1}));
    failed_with(*s, "not the last");
  }
  SECTION("prefill and decode name different counts of state pages") {
    auto r = g.decode[0]->make_receiver(24);
    auto s = g.prefill[0]->make_sender(24);
    REQUIRE(r);
    REQUIRE(s);
    REQUIRE_FALSE(r->init({1}, 0, {1, 2}));
    REQUIRE_FALSE(s->init(1, 0));
    REQUIRE_FALSE(s->send({1}, true, {3}));
    failed_with(*s, "state indices");
    failed_with(*r, "state indices");
    CHECK(g.dst(0).count_state_changed_outside({}, 0xEE) == 0);
  }
  SECTION("registration: a rank without the deployment's state buffers") {
    host_kv_cache plain{hybrid_shape(0, 0)};
    rank_config c;
    c.side = role::decode;
    c.dp_rank = 1;
    c.memory = plain.layout();
    auto r = g.rt.add_rank(c);
    REQUIRE_FALSE(r);
    CHECK(describe(r.error()).find("state buffers") != std::string::npos);
  }
}

TEST_CASE("a handle may outlive its rank: the live room reads Failed, calls do nothing") {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  host_kv_cache mem{hybrid_shape(0, 0)};
  rank_config c;
  c.memory = mem.layout();
  auto r = rt.add_rank(c);
  REQUIRE(r);
  auto s = (*r)->make_sender(5);
  REQUIRE(s);
  // A room cleared before its rank closed: forgotten by the rank, so its
  // handle must not touch the rank afterwards (it did: a crash).
  auto cleared = (*r)->make_sender(6);
  REQUIRE(cleared);
  REQUIRE_FALSE(cleared->clear());
  r->reset();
  CHECK(cleared->poll() == kv_poll::bootstrapping);
  CHECK_FALSE(cleared->failure());
  CHECK(is(cleared->abort(), errc::room_cleared));
  CHECK(s->poll() == kv_poll::failed);
  auto f = s->failure();
  REQUIRE(f);
  CHECK(f->failure_reason.find("was closed while the room was live") != std::string::npos);
  // Closing the rank concluded the room: a scheduler's calls race nothing.
  CHECK_FALSE(s->init(1, 0));
  CHECK_FALSE(s->send({0}, true));
  CHECK_FALSE(s->abort());
  CHECK(s->poll() == kv_poll::failed);
  CHECK_FALSE(s->clear());
  kv_sender empty;
  CHECK(empty.poll() == kv_poll::failed);
}
