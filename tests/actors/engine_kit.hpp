#pragma once

// What the end-to-end room tests share: a prefill and a decode group of
// equal TP size in one runtime over real registered buffers, and bounded
// waits (no test sleeps to let something happen: it polls until a
// condition holds or a limit passes).

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvroom/kit/testkit.hpp"

namespace kvroom::engine_kit {

using namespace std::chrono_literals;

inline kv_shape small_shape() {
  kv_shape s;
  s.num_buffers = 4;
  s.num_pages = 32;
  s.page_size_bytes = 256;
  s.num_aux = 2;
  s.aux_slots = 8;
  s.aux_item_bytes = 48;
  return s;
}

inline room_timeouts generous() {
  return room_timeouts{10'000, 10'000, 10'000};
}

/// Pattern key of one TP slot of a room: TP ranks carry different heads.
inline room_id key(room_id room, int tp) {
  return room ^ (static_cast<room_id>(tp + 1) << 40);
}

/// A prefill group and a decode group of equal TP size in one runtime.
struct group {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  std::vector<std::unique_ptr<host_kv_cache>> caches;
  std::vector<std::unique_ptr<rank>> prefill;
  std::vector<std::unique_ptr<rank>> decode;

  struct options {
    int tp = 2;
    room_timeouts prefill_timeouts = generous();
    room_timeouts decode_timeouts = generous();
    fault_plan prefill0_faults;
    /// Decode TP rank 0's data plane (a pulling rank's reads meet them).
    fault_plan decode0_faults;
    kv_shape shape = small_shape();
    uint32_t max_rooms = 65'536;
    std::function<caf::expected<backend_ptr>(const backend_config&)> data_plane;
    /// "local", or "shm" / "tcp" forced between ranks of this process.
    std::string transport = "local";
    /// With a network transport: the tcp addresses (one path each).
    std::string tcp_host = "127.0.0.1";
    path_options paths;
    integrity_mode integrity = integrity_mode::off;
    control_chaos chaos;
    /// KV buffers labelled as GPU 0's (host memory; for a data plane that
    /// pretends to move GPU memory), aux on the host.
    bool kv_on_pretend_gpu = false;
    /// The decode ranks pull (read the prefill's pages themselves).
    bool pull = false;
  };

  group() : group(options{}) {
  }

  explicit group(options opt) {
    for (auto side : {role::prefill, role::decode}) {
      for (int t = 0; t < opt.tp; ++t) {
        caches.push_back(std::make_unique<host_kv_cache>(opt.shape, opt.transport == "shm"));
        rank_config cfg;
        cfg.side = side;
        cfg.tp_rank = t;
        cfg.tp_size = opt.tp;
        cfg.memory = caches.back()->layout();
        if (opt.kv_on_pretend_gpu)
          for (auto& b : cfg.memory.kv)
            b.mem.device_id = 0;
        cfg.timeouts = side == role::prefill ? opt.prefill_timeouts
                                             : opt.decode_timeouts;
        cfg.limits.max_rooms = opt.max_rooms;
        if (side == role::prefill && t == 0)
          cfg.faults = opt.prefill0_faults;
        if (side == role::decode && t == 0)
          cfg.faults = opt.decode0_faults;
        cfg.data_plane = opt.data_plane;
        cfg.chaos = opt.chaos;
        if (opt.transport != "local") {
          cfg.transport = opt.transport;
          cfg.network = true;
          cfg.tcp_host = opt.tcp_host;
        }
        cfg.paths = opt.paths;
        cfg.integrity = opt.integrity;
        cfg.pull = side == role::decode && opt.pull;
        auto r = rt.add_rank(cfg);
        REQUIRE(r);
        (side == role::prefill ? prefill : decode).push_back(std::move(*r));
      }
    }
  }

  host_kv_cache& prefill_cache(int tp) {
    return *caches[static_cast<size_t>(tp)];
  }

  host_kv_cache& decode_cache(int tp) {
    return *caches[prefill.size() + static_cast<size_t>(tp)];
  }

  std::vector<rank*> all() {
    std::vector<rank*> out;
    for (auto& r : prefill)
      out.push_back(r.get());
    for (auto& r : decode)
      out.push_back(r.get());
    return out;
  }
};

/// Polls `pred` until it holds or `limit` passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(200us);
  }
  return pred();
}

template <class Handle>
bool reaches(Handle& h, kv_poll state, std::chrono::milliseconds limit = 5000ms) {
  return eventually([&] { return h.poll() == state; }, limit);
}

template <class Handle>
bool concludes(Handle& h, std::chrono::milliseconds limit = 5000ms) {
  return eventually([&] { return is_terminal(h.poll()); }, limit);
}

/// One room over every TP slot: handles of both sides.
struct room_handles {
  std::vector<kv_sender> senders;
  std::vector<kv_receiver> receivers;
};

inline room_handles open_room(group& g, room_id room) {
  room_handles out;
  for (auto& r : g.decode) {
    auto h = r->make_receiver(room);
    REQUIRE(h);
    out.receivers.push_back(*h);
  }
  for (auto& r : g.prefill) {
    auto h = r->make_sender(room);
    REQUIRE(h);
    out.senders.push_back(*h);
  }
  return out;
}

/// Drives a whole room: bootstrap, init both sides, send in `chunks`
/// (non-last chunks end on page boundaries by construction).
inline void drive_room(group& g, room_handles& h, room_id room,
                const std::vector<int64_t>& src_pages,
                const std::vector<int64_t>& dst_pages, int64_t src_aux,
                int64_t dst_aux, size_t chunks = 1) {
  for (size_t t = 0; t < h.receivers.size(); ++t) {
    REQUIRE(reaches(h.receivers[t], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[t].init(dst_pages, dst_aux));
  }
  for (size_t t = 0; t < h.senders.size(); ++t) {
    g.prefill_cache(static_cast<int>(t)).write_room(key(room, static_cast<int>(t)), src_pages, src_aux);
    // A failure elsewhere in the room may conclude this rank first.
    REQUIRE(eventually([&] {
      auto st = h.senders[t].poll();
      return st == kv_poll::waiting_for_input || st == kv_poll::failed;
    }));
    if (h.senders[t].poll() == kv_poll::failed)
      continue;
    REQUIRE_FALSE(h.senders[t].init(src_pages.size(), src_aux));
    auto per = (src_pages.size() + chunks - 1) / chunks;
    for (size_t c = 0; c < chunks; ++c) {
      auto first = std::min(src_pages.size(), c * per);
      auto last = std::min(src_pages.size(), first + per);
      std::vector<int64_t> chunk(src_pages.begin() + static_cast<long>(first),
                                 src_pages.begin() + static_cast<long>(last));
      auto err = h.senders[t].send(chunk, c + 1 == chunks);
      REQUIRE((!err || err == make_error(errc::room_concluded)));
    }
  }
}

inline manager_stats stats_of(rank& r) {
  auto st = r.stats();
  REQUIRE(st);
  return *st;
}

/// Waits until no rank holds a live room, a failure record or parked input.
inline bool all_quiet(group& g) {
  return eventually([&] {
    for (auto* r : g.all()) {
      auto st = r->stats();
      if (!st || st->live_rooms != 0 || st->failure_records != 0
          || st->parked != 0)
        return false;
    }
    return true;
  });
}


/// Aborts room 7 while its bytes are on a slow link (their post, or with
/// `pull` the decode rank's read, goes 300 ms late), reuses its pages for
/// room 8 as soon as decode's poll() says Failed, and reports whether room
/// 8's pages stayed intact once room 7's bytes could have landed.
inline bool reused_pages_stay_intact(const char* transport, bool fence, bool pull = false) {
  group::options opt;
  opt.tp = 1;
  opt.transport = transport;
  opt.chaos.no_fence = !fence;
  opt.pull = pull;
  auto& slow = pull ? opt.decode0_faults : opt.prefill0_faults;
  slow.point = fault_point::slow;
  slow.rooms = {7};
  slow.slow_ms = 300;
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
  // The scheduler reuses pages 3 and 4 and aux slot 1 at once, for room 8.
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

} // namespace kvroom::engine_kit
