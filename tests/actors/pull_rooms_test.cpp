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

TEST_CASE("a read that fails fails the room once, its prefill the origin, naming the read", "[pull]") {
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
  CHECK(s->origin_rank == g.prefill[0]->ref().id);
  CHECK(r->origin_rank == g.prefill[0]->ref().id);
  CHECK(r->is_from_another_rank);
  CHECK(s->failure_reason.find("its read of this rank's pages failed") != std::string::npos);
  CHECK(s->failure_reason.find("injected fault before post") != std::string::npos);
  CHECK(r->failure_reason == s->failure_reason);
  REQUIRE_FALSE(h.receivers[0].clear());
  REQUIRE_FALSE(h.senders[0].clear());
  // Other rooms still pull.
  pulled_room(g, 6, 1);
  CHECK(all_quiet(g));
}

namespace {

/// Room 7's reads land 300 ms after they are posted; decode aborts while
/// they are on the way, reuses the pages for room 8 at once, and checks
/// that nothing of room 7 lands in them afterwards.
bool reused_pages_stay_intact(const char* transport, bool fence) {
  auto opt = pulling(transport, 1);
  opt.chaos.no_fence = !fence;
  opt.decode0_faults.point = fault_point::slow;
  opt.decode0_faults.rooms = {7};
  opt.decode0_faults.slow_ms = 300;
  group g{opt};
  auto h = open_room(g, 7);
  auto& s = h.senders[0];
  auto& r = h.receivers[0];
  REQUIRE(reaches(r, kv_poll::waiting_for_input));
  REQUIRE_FALSE(r.init({3, 4}, 1));
  REQUIRE(reaches(s, kv_poll::waiting_for_input));
  g.prefill_cache(0).write_room(key(7, 0), {0, 1}, 0);
  REQUIRE_FALSE(s.init(2, 0));
  REQUIRE_FALSE(s.send({0, 1}, true));
  REQUIRE(reaches(r, kv_poll::transferring));
  REQUIRE_FALSE(r.abort("client went away"));
  REQUIRE(reaches(r, kv_poll::failed));
  REQUIRE(concludes(s));
  REQUIRE_FALSE(r.clear());
  REQUIRE_FALSE(s.clear());
  g.decode_cache(0).fill(0x5A);
  auto h8 = open_room(g, 8);
  REQUIRE(reaches(h8.receivers[0], kv_poll::waiting_for_input));
  REQUIRE_FALSE(h8.receivers[0].init({4, 3}, 1));
  REQUIRE(reaches(h8.senders[0], kv_poll::waiting_for_input));
  g.prefill_cache(0).write_room(key(8, 0), {5, 6}, 2);
  REQUIRE_FALSE(h8.senders[0].init(2, 2));
  REQUIRE_FALSE(h8.senders[0].send({5, 6}, true));
  REQUIRE(reaches(h8.receivers[0], kv_poll::success));
  std::string why;
  REQUIRE(g.decode_cache(0).check_room(key(8, 0), {4, 3}, 1, &why));
  // Longer than room 7's delay: a late byte of it would have landed now.
  std::this_thread::sleep_for(400ms);
  CHECK(g.decode_cache(0).count_changed_outside({3, 4}, 1, 0x5A) == 0);
  return g.decode_cache(0).check_room(key(8, 0), {4, 3}, 1, &why);
}

} // namespace

TEST_CASE("a pulling decode rank publishes Failed only once its own reads are over", "[pull]") {
  for (auto transport : {"local", "shm", "tcp"}) {
    INFO("transport " << transport);
    CHECK(reused_pages_stay_intact(transport, true));
  }
  // The check can fail: without the fence room 7's late read overwrites
  // the reused pages.
  CHECK_FALSE(reused_pages_stay_intact("local", false));
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
  runtime rt{runtime_options{"pull-config", 0, "off"}};
  host_kv_cache cache{small_shape()};
  rank_config cfg;
  cfg.side = role::prefill;
  cfg.memory = cache.layout();
  cfg.pull = true;
  auto r = rt.add_rank(cfg);
  REQUIRE_FALSE(r);
  CHECK(describe(r.error()).find("pull is a decode rank's choice") != std::string::npos);
}
