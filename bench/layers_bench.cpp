// Layer by layer against whole rooms: a fake forward pass takes a set time
// per layer, and the prefill sends each layer's K and V as soon as it is
// computed (vLLM's save_kv_layer) or the whole room after the last layer.
// What counts is the transfer time left exposed after the last layer (from
// its end to decode's Success), for a long prompt (where overlapping pays)
// and a short one (where the extra chunks cost). Decode's destination is
// known before the forward starts (the proxy names the room and sends the
// request to both at once), as overlapping needs. Both modes run in the
// same run, alternating room by room.
//
// The load side, then: decode's forward pass over a request whose prefill
// finished already (the proxy's usual order: the layers wait in the
// prefill's room for decode's destination), with the same time per layer.
// Loaded whole, the pass starts at the room's Success (vLLM's asynchronous
// loads); layer by layer, each layer starts once its K and V landed
// (`kv_receiver::landed`, vLLM's `wait_for_layer_load`). What counts is
// the time from decode's init to its Success and the end of its pass, less
// the pass itself: the transfer left exposed.
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/kit/testkit.hpp"

#include "benches.hpp"
#include "report.hpp"

namespace kvroom::bench {

namespace {

using clock_type = std::chrono::steady_clock;

class layers_config : public bench_config {
public:
  int64_t layers = 32;
  double layer_ms = 2.0;
  int64_t pages = 64;
  int64_t short_pages = 1;
  int64_t page_kib = 16;
  int64_t rooms = 20;
  std::string transport = "tcp";
  layers_config() {
    opt_group{custom_options_, "global"}
      .add(layers, "layers", "layers of the model (two KV buffers each: K and V)")
      .add(layer_ms, "layer-ms", "the fake forward's time per layer")
      .add(pages, "pages", "pages of a long prompt")
      .add(short_pages, "short-pages", "pages of a short prompt")
      .add(page_kib, "page-kib", "KiB per page and buffer")
      .add(rooms, "rooms", "rooms per mode and prompt")
      .add(transport, "transport", "tcp, shm or local between the two ranks");
  }
};

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

template <class Handle>
bool wait_for(Handle& h, kv_poll state, double limit_ms) {
  auto t0 = clock_type::now();
  while (ms_since(t0) < limit_ms) {
    auto st = h.poll();
    if (st == state)
      return true;
    if (is_terminal(st))
      return false;
    std::this_thread::yield();
  }
  return false;
}

struct pair_of_ranks {
  std::unique_ptr<host_kv_cache> src, dst;
  std::unique_ptr<rank> prefill, decode;
};

/// Opens room `room` on both ranks over pages 0..pages-1, runs `f(receiver,
/// sender, pages)` (its milliseconds; negative: failed), then lets the
/// sender conclude and clears both.
template <class F>
double with_room(pair_of_ranks& p, room_id room, int64_t pages, F f) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < pages; ++i)
    idx.push_back(i);
  auto r = p.decode->make_receiver(room);
  auto s = p.prefill->make_sender(room);
  if (!r || !s)
    return -1;
  auto out = f(*r, *s, idx);
  wait_for(*s, kv_poll::success, 10'000);
  r->clear();
  s->clear();
  return out;
}

/// The exposed milliseconds of one room (negative: it failed).
double one_room(pair_of_ranks& p, room_id room, const layers_config& cfg, int64_t pages,
                bool layered) {
  return with_room(p, room, pages, [&](kv_receiver& r, kv_sender& s,
                                       const std::vector<int64_t>& idx) {
    if (!wait_for(r, kv_poll::waiting_for_input, 10'000) || r.init(idx, 0)
        || !wait_for(s, kv_poll::waiting_for_input, 10'000) || s.init(idx.size(), 0))
      return -1.0;
    auto forward = std::chrono::duration<double, std::milli>(cfg.layer_ms);
    bool sent = true;
    for (int32_t l = 0; l < cfg.layers; ++l) {
      std::this_thread::sleep_for(forward);
      if (layered)
        sent = sent && !s.send_buffers(idx, {2 * l, 2 * l + 1}, l + 1 == cfg.layers);
    }
    auto end = clock_type::now();
    if (!layered)
      sent = !s.send(idx, true);
    return sent && wait_for(r, kv_poll::success, 30'000) ? ms_since(end) : -1.0;
  });
}

/// The exposed milliseconds of one load (negative: it failed): decode's
/// pass starts at Success (`by_layer` false) or layer by layer as each
/// landed.
double one_load(pair_of_ranks& p, room_id room, const layers_config& cfg, int64_t pages,
                bool by_layer) {
  return with_room(p, room, pages, [&](kv_receiver& r, kv_sender& s,
                                       const std::vector<int64_t>& idx) {
    if (!wait_for(r, kv_poll::waiting_for_input, 10'000))
      return -1.0;
    auto t0 = clock_type::now();
    bool ok = !r.init(idx, 0) && wait_for(s, kv_poll::waiting_for_input, 10'000)
              && !s.init(idx.size(), 0);
    // The prefill's layers were computed before: they all go now.
    for (int32_t l = 0; ok && l < cfg.layers; ++l)
      ok = !s.send_buffers(idx, {2 * l, 2 * l + 1}, l + 1 == cfg.layers);
    if (ok && !by_layer)
      ok = wait_for(r, kv_poll::success, 30'000);
    // The pass as it ran (a sleep overshoots: what it took is subtracted).
    auto forward = std::chrono::duration<double, std::milli>(cfg.layer_ms);
    double pass_ms = 0;
    for (int32_t l = 0; ok && l < cfg.layers; ++l) {
      if (by_layer) {
        auto w0 = clock_type::now();
        while (!r.landed({2 * l, 2 * l + 1}) && !is_terminal(r.poll()) && ms_since(w0) < 30'000)
          std::this_thread::yield();
      }
      auto f0 = clock_type::now();
      std::this_thread::sleep_for(forward);
      pass_ms += ms_since(f0);
    }
    // A pass computed from layers that did not all land counts for nothing.
    return ok && wait_for(r, kv_poll::success, 30'000) ? ms_since(t0) - pass_ms : -1.0;
  });
}

} // namespace

int bench_layers(int argc, char** argv) {
  layers_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  if (cfg.layers < 1 || cfg.pages < 1 || cfg.short_pages < 1 || cfg.page_kib < 1
      || cfg.rooms < 1 || cfg.layer_ms < 0) {
    std::fprintf(stderr, "layers, pages, short-pages, page-kib and rooms must be positive\n");
    return 2;
  }
  auto page_bytes = static_cast<uint64_t>(cfg.page_kib) * 1024;
  auto room_bytes = [&](int64_t pages) {
    return static_cast<uint64_t>(pages) * page_bytes * 2 * static_cast<uint64_t>(cfg.layers);
  };
  std::printf("kvroom-bench layers: %lld layers x %.1f ms of forward, %s, %lld rooms per "
              "point; long prompt %lld pages (%.1f MiB), short %lld\n",
              static_cast<long long>(cfg.layers), cfg.layer_ms, cfg.transport.c_str(),
              static_cast<long long>(cfg.rooms), static_cast<long long>(cfg.pages),
              static_cast<double>(room_bytes(cfg.pages)) / (1 << 20),
              static_cast<long long>(cfg.short_pages));
  std::printf("%-7s %12s %16s %16s %10s\n", "prompt", "bytes", "bulk exposed ms",
              "layers exposed ms", "ratio");
  caf::actor_system sys{cfg};
  std::vector<std::string> rows, loads;
  {
    runtime rt{sys};
    kv_shape shape;
    shape.num_buffers = static_cast<uint32_t>(2 * cfg.layers);
    shape.num_pages = static_cast<uint64_t>(std::max(cfg.pages, cfg.short_pages));
    shape.page_size_bytes = page_bytes;
    shape.num_aux = 1;
    shape.aux_slots = 1;
    shape.aux_item_bytes = 64;
    pair_of_ranks p;
    bool shared = cfg.transport == "shm";
    p.src = std::make_unique<host_kv_cache>(shape, shared);
    p.dst = std::make_unique<host_kv_cache>(shape, shared);
    for (auto side : {role::prefill, role::decode}) {
      rank_config rc;
      rc.side = side;
      rc.memory = (side == role::prefill ? p.src : p.dst)->layout();
      if (cfg.transport != "local") {
        rc.transport = cfg.transport;
        rc.network = true;
      }
      auto made = rt.add_rank(rc);
      if (!made) {
        std::fprintf(stderr, "cannot start a rank: %s\n", describe(made.error()).c_str());
        return 1;
      }
      (side == role::prefill ? p.prefill : p.decode) = std::move(*made);
    }
    room_id room = 1;
    // One room of each mode first, unmeasured: links and connections.
    one_room(p, room++, cfg, cfg.short_pages, false);
    one_room(p, room++, cfg, cfg.short_pages, true);
    // Both prompts, each mode alternated room by room: one table row and
    // one JSON row per prompt. `whole` names the mode without layers.
    auto compare = [&](const std::string& whole, auto one, std::vector<std::string>& out) {
      for (auto pages : {cfg.pages, cfg.short_pages}) {
        std::vector<double> plain, layered;
        uint64_t failed = 0;
        for (int64_t i = 0; i < cfg.rooms; ++i) {
          for (bool by_layer : {false, true}) {
            auto ms = one(room++, pages, by_layer);
            if (ms < 0)
              ++failed;
            else
              (by_layer ? layered : plain).push_back(ms);
          }
        }
        auto w = percentile(plain, 50), l = percentile(layered, 50);
        auto name = pages == cfg.pages ? "long" : "short";
        std::printf("%-7s %12llu %16.3f %16.3f %10.2f%s\n", name,
                    static_cast<unsigned long long>(room_bytes(pages)), w, l, w > 0 ? l / w : 0.0,
                    failed ? " (rooms failed)" : "");
        out.push_back(json_object{}
                        .str("prompt", name)
                        .num("pages", static_cast<double>(pages))
                        .num("bytes", static_cast<double>(room_bytes(pages)))
                        .num(whole + "_exposed_ms_p50", w)
                        .num("layers_exposed_ms_p50", l)
                        .num(whole + "_exposed_ms_p90", percentile(plain, 90))
                        .num("layers_exposed_ms_p90", percentile(layered, 90))
                        .num("layers_over_" + whole, w > 0 ? l / w : 0.0)
                        .num("failed", static_cast<double>(failed))
                        .dump(6));
      }
    };
    compare("bulk",
            [&](room_id r, int64_t pages, bool by_layer) {
              return one_room(p, r, cfg, pages, by_layer);
            },
            rows);
    std::printf("%-7s %12s %16s %16s %10s\n", "load", "bytes", "whole exposed ms",
                "layers exposed ms", "ratio");
    compare("whole",
            [&](room_id r, int64_t pages, bool by_layer) {
              return one_load(p, r, cfg, pages, by_layer);
            },
            loads);
  }
  auto out = json_object{}
               .str("bench", "layers")
               .str("transport", cfg.transport)
               .num("layers", static_cast<double>(cfg.layers))
               .num("layer_ms", cfg.layer_ms)
               .raw("prompts", json_array(rows))
               .raw("loads", json_array(loads))
               .dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

} // namespace kvroom::bench
