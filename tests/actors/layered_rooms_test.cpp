// Rooms sent layer by layer: each chunk carries a layer's KV buffers as
// soon as the forward pass computed it (vLLM's save_kv_layer), pushed or
// pulled; the bytes land as a whole-page send's do, and misuse fails the
// room with its reason.
#include <catch2/catch.hpp>

#include "engine_kit.hpp"

using namespace kvroom;
using namespace kvroom::engine_kit;

namespace {

/// small_shape's 4 KV buffers as 2 layers of K and V.
const std::vector<std::vector<int32_t>> layers{{0, 1}, {2, 3}};

/// Sends `room` layer by layer over every TP slot; true when it succeeded
/// everywhere, byte-exact.
bool layered_room(group& g, room_id room) {
  std::vector<int64_t> src{3, 4, 5, 9};
  std::vector<int64_t> dst{30, 31, 2, 7};
  auto h = open_room(g, room);
  for (auto& r : h.receivers) {
    REQUIRE(reaches(r, kv_poll::waiting_for_input));
    REQUIRE_FALSE(r.init(dst, 5));
  }
  for (size_t t = 0; t < h.senders.size(); ++t) {
    auto& s = h.senders[t];
    g.prefill_cache(static_cast<int>(t)).write_room(key(room, static_cast<int>(t)), src, 1);
    REQUIRE(reaches(s, kv_poll::waiting_for_input));
    REQUIRE_FALSE(s.init(src.size(), 1));
    // Layer 0 in two chunks of pages, then layer 1 whole, the last.
    REQUIRE_FALSE(s.send_buffers({3, 4}, layers[0], false));
    REQUIRE_FALSE(s.send_buffers({5, 9}, layers[0], false));
    REQUIRE_FALSE(s.send_buffers(src, layers[1], true));
  }
  bool ok = true;
  for (size_t t = 0; t < h.senders.size(); ++t) {
    ok = ok && reaches(h.receivers[t], kv_poll::success) && reaches(h.senders[t], kv_poll::success);
    std::string why;
    ok = ok && g.decode_cache(static_cast<int>(t)).check_room(key(room, static_cast<int>(t)), dst,
                                                              5, &why);
    INFO(why);
  }
  for (auto& s : h.senders)
    CHECK_FALSE(s.clear());
  for (auto& r : h.receivers)
    CHECK_FALSE(r.clear());
  return ok;
}

} // namespace

TEST_CASE("rooms sent layer by layer land byte-exact, pushed and pulled", "[layers]") {
  for (auto transport : {"local", "tcp"}) {
    for (bool pull : {false, true}) {
      INFO("transport " << transport << (pull ? ", pulled" : ", pushed"));
      group::options opt;
      opt.transport = transport;
      opt.pull = pull;
      group g{opt};
      CHECK(layered_room(g, 31));
      CHECK(layered_room(g, 32));
      CHECK(all_quiet(g));
    }
  }
}

TEST_CASE("rooms sent layer by layer pass the integrity check", "[layers]") {
  group::options opt;
  opt.transport = "tcp";
  opt.integrity = integrity_mode::xxh3;
  group g{opt};
  CHECK(layered_room(g, 41));
  CHECK(all_quiet(g));
}

TEST_CASE("a layer sent twice, or a layer left out, fails the room with its reason", "[layers]") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto run = [&](room_id room, auto send) {
    auto h = open_room(g, room);
    REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[0].init({1, 2}, 0));
    REQUIRE(reaches(h.senders[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.senders[0].init(2, 0));
    send(h.senders[0]);
    REQUIRE(reaches(h.senders[0], kv_poll::failed));
    REQUIRE(reaches(h.receivers[0], kv_poll::failed));
    auto err = h.senders[0].failure();
    REQUIRE(err);
    auto reason = err->failure_reason;
    CHECK_FALSE(h.senders[0].clear());
    CHECK_FALSE(h.receivers[0].clear());
    return reason;
  };
  CHECK(run(51, [](kv_sender& s) {
          CHECK_FALSE(s.send_buffers({0, 1}, layers[0], false));
          CHECK_FALSE(s.send_buffers({0, 1}, layers[0], false));
        }).find("too many KV indices of KV buffer 0") != std::string::npos);
  CHECK(run(52, [](kv_sender& s) { CHECK_FALSE(s.send_buffers({0, 1}, layers[0], true)); })
          .find("last chunk leaves 2 of 2 declared pages of KV buffer 2 unsent")
        != std::string::npos);
  CHECK(run(53, [](kv_sender& s) { CHECK_FALSE(s.send_buffers({0, 1}, {7}, true)); })
          .find("KV buffer 7 out of range [0, 4)") != std::string::npos);
  kv_sender none;
  CHECK(none.send_buffers({0}, {}, true));
  CHECK(all_quiet(g));
}

TEST_CASE("decode learns layer by layer what landed, pushed and pulled, before the room concludes",
          "[layers]") {
  for (auto transport : {"local", "tcp"}) {
    for (bool pull : {false, true}) {
      INFO("transport " << transport << (pull ? ", pulled" : ", pushed"));
      group::options opt;
      opt.transport = transport;
      opt.pull = pull;
      opt.tp = 1;
      group g{opt};
      room_id room = 61;
      std::vector<int64_t> src{3, 4, 5, 9};
      std::vector<int64_t> dst{30, 31, 2, 7};
      auto h = open_room(g, room);
      auto& r = h.receivers[0];
      auto& s = h.senders[0];
      g.prefill_cache(0).write_room(key(room, 0), src, 1);
      REQUIRE(reaches(r, kv_poll::waiting_for_input));
      REQUIRE_FALSE(r.init(dst, 5));
      CHECK_FALSE(r.landed(layers[0]));
      CHECK(r.landed({})); // nothing asked: nothing to wait for
      REQUIRE(reaches(s, kv_poll::waiting_for_input));
      REQUIRE_FALSE(s.init(src.size(), 1));
      // Layer 0 in two chunks: whole only after the second.
      REQUIRE_FALSE(s.send_buffers({3, 4}, layers[0], false));
      REQUIRE_FALSE(s.send_buffers({5, 9}, layers[0], false));
      REQUIRE(eventually([&] { return r.landed(layers[0]); }));
      // Layer 1 was not sent: the room cannot have concluded.
      CHECK_FALSE(r.landed(layers[1]));
      CHECK_FALSE(r.landed({0, 2}));
      CHECK_FALSE(is_terminal(r.poll()));
      // Layer 0's bytes are in place already.
      std::string why;
      CHECK(g.decode_cache(0).check_room_buffers(key(room, 0), dst, layers[0], &why));
      INFO(why);
      REQUIRE_FALSE(s.send_buffers(src, layers[1], true));
      REQUIRE(reaches(r, kv_poll::success));
      CHECK(r.landed(layers[1]));
      CHECK(r.landed({0, 1, 2, 3}));
      CHECK(reaches(s, kv_poll::success));
      CHECK(g.decode_cache(0).check_room(key(room, 0), dst, 5, &why));
      CHECK_FALSE(s.clear());
      CHECK_FALSE(r.clear());
      CHECK(all_quiet(g));
    }
  }
}

TEST_CASE("a room checked for integrity, or sent whole, lands with its Success", "[layers]") {
  // Checked: a layer is whole only once its part was checked, at the end.
  {
    group::options opt;
    opt.transport = "tcp";
    opt.tp = 1;
    opt.integrity = integrity_mode::xxh3;
    group g{opt};
    std::vector<int64_t> src{3, 4};
    std::vector<int64_t> dst{30, 31};
    auto h = open_room(g, 71);
    auto& r = h.receivers[0];
    auto& s = h.senders[0];
    g.prefill_cache(0).write_room(key(71, 0), src, 1);
    REQUIRE(reaches(r, kv_poll::waiting_for_input));
    REQUIRE_FALSE(r.init(dst, 5));
    REQUIRE(reaches(s, kv_poll::waiting_for_input));
    REQUIRE_FALSE(s.init(src.size(), 1));
    REQUIRE_FALSE(s.send_buffers(src, layers[0], false));
    // No positive signal exists for "layer 0 moved" here; a wrong notice
    // would come within this wait (it fails the check, never passes it).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(r.landed(layers[0]));
    REQUIRE_FALSE(s.send_buffers(src, layers[1], true));
    REQUIRE(reaches(r, kv_poll::success));
    CHECK(r.landed(layers[0]));
    CHECK_FALSE(s.clear());
    CHECK_FALSE(r.clear());
    CHECK(all_quiet(g));
  }
  // Whole pages (SGLang's send): every buffer lands with the room's Success
  // (no ledger, no notice: a whole room costs nothing more).
  {
    group::options opt;
    opt.transport = "tcp";
    opt.tp = 1;
    group g{opt};
    auto h = open_room(g, 72);
    auto& r = h.receivers[0];
    auto& s = h.senders[0];
    REQUIRE(reaches(r, kv_poll::waiting_for_input));
    REQUIRE_FALSE(r.init({30, 31}, 5));
    REQUIRE(reaches(s, kv_poll::waiting_for_input));
    REQUIRE_FALSE(s.init(2, 1));
    REQUIRE_FALSE(s.send({3, 4}, true));
    REQUIRE(eventually([&] { return r.landed({0, 1, 2, 3}); }));
    CHECK(reaches(r, kv_poll::success));
    CHECK_FALSE(s.clear());
    CHECK_FALSE(r.clear());
    CHECK(all_quiet(g));
  }
}
