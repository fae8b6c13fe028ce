// Pulled rooms: the decode rank reads the prefill's pages itself (vLLM's
// NixlConnector's direction). The room protocol is the push's; these check
// what pulling adds: the reads land byte-exact on every host data plane,
// a failed read fails the room once, the decode rank's own reads hold its
// terminal state (the fence), and the prefill's lease ends its grants.
#include <catch2/catch.hpp>

#include <thread>

#include "engine_kit.hpp"

using namespace kvroom;
using namespace kvroom::engine_kit;
using namespace std::chrono_literals;

namespace {

group::options pulling(const char* transport, int tp = 2) {
  group::options opt;
  opt.tp = tp;
  opt.transport = transport;
  opt.pull = true;
  return opt;
}

/// Drives `room` over every TP slot in `chunks` chunks and checks that it
/// succeeds everywhere, byte-exact, and clears.
void pulled_room(group& g, room_id room, size_t chunks) {
  std::vector<int64_t> src{3, 4, 5, 9, 10, 20};
  std::vector<int64_t> dst{30, 31, 2, 7, 8, 0};
  auto h = open_room(g, room);
  drive_room(g, h, room, src, dst, 1, 6, chunks);
  for (size_t t = 0; t < h.senders.size(); ++t) {
    REQUIRE(reaches(h.receivers[t], kv_poll::success));
    REQUIRE(reaches(h.senders[t], kv_poll::success));
    std::string why;
    CHECK(g.decode_cache(static_cast<int>(t)).check_room(key(room, static_cast<int>(t)), dst, 6,
                                                         &why));
    INFO(why);
  }
  for (auto& s : h.senders)
    CHECK_FALSE(s.clear());
  for (auto& r : h.receivers)
    CHECK_FALSE(r.clear());
}

} // namespace

TEST_CASE("pulled rooms land byte-exact on every host data plane, whole and in chunks", "[pull]") {
  for (auto transport : {"local", "shm", "tcp"}) {
    INFO("transport " << transport);
    group g{pulling(transport)};
    pulled_room(g, 11, 1);
    pulled_room(g, 12, 3);
    CHECK(all_quiet(g));
    // The decode ranks moved the bytes (a pushed decode rank counts none).
    for (auto& r : g.decode) {
      auto m = r->metrics();
      CHECK(m.transfer_bytes[static_cast<size_t>(transport_index(transport))] > 0);
    }
  }
  group pushed{group::options{}};
  pulled_room(pushed, 13, 1);
  for (auto& r : pushed.decode)
    for (auto bytes : r->metrics().transfer_bytes)
      CHECK(bytes == 0);
}

TEST_CASE("pulled rooms with the integrity check on are hashed on both sides", "[pull]") {
  for (auto transport : {"local", "tcp"}) {
    INFO("transport " << transport);
    auto opt = pulling(transport);
    opt.integrity = integrity_mode::xxh3;
    group g{opt};
    pulled_room(g, 21, 2);
    CHECK(all_quiet(g));
  }
}

TEST_CASE("a read that fails fails the room once, the reading decode rank its origin", "[pull]") {
  auto opt = pulling("local", 1);
  // The decode rank's own data plane refuses the reads of room 5: proof
  // that it, not the prefill, moves the bytes.
  opt.decode0_faults.rooms = {5};
  opt.decode0_faults.point = fault_point::before_post;
  group g{opt};
  auto h = open_room(g, 5);
  drive_room(g, h, 5, {0, 1}, {3, 4}, 1, 2);
  REQUIRE(reaches(h.receivers[0], kv_poll::failed));
  REQUIRE(reaches(h.senders[0], kv_poll::failed));
  auto s = h.senders[0].failure();
  auto r = h.receivers[0].failure();
  REQUIRE(s);
  REQUIRE(r);
  CHECK(s->origin_rank == g.decode[0]->ref().id);
  CHECK(r->origin_rank == g.decode[0]->ref().id);
  CHECK(s->is_from_another_rank);
  CHECK_FALSE(r->is_from_another_rank);
  CHECK(r->failure_reason.find("reading from prefill") != std::string::npos);
  CHECK(r->failure_reason.find("injected fault before post") != std::string::npos);
  CHECK(r->failure_reason == s->failure_reason);
  REQUIRE_FALSE(h.receivers[0].clear());
  REQUIRE_FALSE(h.senders[0].clear());
  // Other rooms still pull.
  pulled_room(g, 6, 1);
  CHECK(all_quiet(g));
}

TEST_CASE("a pulling decode rank publishes Failed only once its own reads are over", "[pull]") {
  for (auto transport : {"local", "shm", "tcp"}) {
    INFO("transport " << transport);
    CHECK(reused_pages_stay_intact(transport, true, true));
  }
  // The check can fail: without the fence room 7's late read overwrites
  // the reused pages.
  CHECK_FALSE(reused_pages_stay_intact("local", false, true));
}

TEST_CASE("the prefill's lease: once its room concluded, a late read of its pages is refused", "[pull]") {
  auto opt = pulling("tcp", 1);
  // The prefill holds the pages 200 ms in Transferring; the decode rank's
  // read goes out only after 300 ms.
  opt.prefill_timeouts = room_timeouts{10'000, 10'000, 200};
  opt.decode0_faults.point = fault_point::slow;
  opt.decode0_faults.rooms = {9};
  opt.decode0_faults.slow_ms = 300;
  group g{opt};
  g.decode_cache(0).fill(0x5A);
  auto h = open_room(g, 9);
  drive_room(g, h, 9, {0, 1}, {3, 4}, 1, 2);
  REQUIRE(reaches(h.senders[0], kv_poll::failed));
  auto s = h.senders[0].failure();
  REQUIRE(s);
  INFO(s->failure_reason);
  CHECK(s->failure_reason.find("timed out in transferring") != std::string::npos);
  REQUIRE(reaches(h.receivers[0], kv_poll::failed));
  // Published only once the late read was answered, and it was refused:
  // not a byte of the prefill's pages came.
  CHECK(g.decode_cache(0).count_changed_outside({}, -1, 0x5A) == 0);
  REQUIRE_FALSE(h.receivers[0].clear());
  REQUIRE_FALSE(h.senders[0].clear());
  CHECK(all_quiet(g));
}

TEST_CASE("pull is a decode rank's choice", "[pull]") {
  runtime rt{runtime_options{"central", 0, "off"}};
  host_kv_cache cache{small_shape()};
  rank_config cfg;
  cfg.side = role::prefill;
  cfg.memory = cache.layout();
  cfg.pull = true;
  auto r = rt.add_rank(cfg);
  REQUIRE_FALSE(r);
  CHECK(describe(r.error()).find("pull is a decode rank's choice") != std::string::npos);
}
