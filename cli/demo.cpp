// `kvroom demo`: the main job. A prefill group and a decode group run in one
// process over real registered buffers with a Llama-3-8B-like KV layout; a
// scheduler loop (one thread, as SGLang's) opens rooms up to a concurrency,
// polls them every iteration, and clears them when they conclude. One room
// gets an injected transfer failure on one prefill rank: the output shows one
// origin and every other rank learning it, propagated, with its root cause.
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "caf/all.hpp"

#include "kvroom/kit/engine.hpp"
#include "kvroom/kit/testkit.hpp"

#include "command_line.hpp"
#include "commands.hpp"

namespace kvroom::cli {

namespace {

class demo_config : public caf::actor_system_config {
public:
  int64_t prefill_tp = 2;
  int64_t decode_tp = 2;
  int64_t prefill_pp = 1;
  int64_t rooms = 400;
  int64_t concurrency = 16;
  int64_t layers = 32;
  int64_t page_tokens = 16;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int64_t dtype_bytes = 2;
  std::string page_order = "hnd";
  std::string state = "none";
  bool mla = false;
  int64_t pages_per_room = 16;
  int64_t chunks = 2;
  int64_t verify_every = 20;
  int64_t fail_room = 7;
  int64_t fail_rank = 0;
  std::string fail_point = "after_post";
  int64_t timeout_ms = 30'000;
  std::string log_level = "info";

  demo_config() {
    opt_group{custom_options_, "global"}
      .add(prefill_tp, "prefill-tp", "tensor-parallel size of the prefill group")
      .add(prefill_pp, "prefill-pp", "pipeline stages of the prefill group (each holds "
                                     "layers / prefill-pp layers)")
      .add(decode_tp, "decode-tp", "tensor-parallel size of the decode group (any: the rank "
                                   "mapping slices heads)")
      .add(rooms, "rooms", "rooms (requests) to transfer")
      .add(concurrency, "concurrency", "rooms in flight at once")
      .add(layers, "layers", "model layers (K and V buffer each)")
      .add(page_tokens, "page-tokens", "tokens per KV page")
      .add(kv_heads, "kv-heads", "KV heads of the model (split across TP)")
      .add(head_dim, "head-dim", "head dimension")
      .add(dtype_bytes, "dtype-bytes", "bytes per element (2: bf16)")
      .add(page_order, "page-order", "hnd (head-major pages) or nhd (token-major)")
      .add(state, "state", "hybrid-model state beside the pages: none, mamba (2 buffers, a "
                           "64 KiB slot per request) or swa (2 buffers, a 4-page window)")
      .add(mla, "mla", "MLA: one latent head of head-dim, replicated on every TP rank")
      .add(pages_per_room, "pages-per-room", "KV pages per request (prompt tokens / page-tokens)")
      .add(chunks, "chunks", "send() calls per room (chunked prefill)")
      .add(verify_every, "verify-every", "check every N-th room byte-exact (0: none)")
      .add(fail_room, "fail-room", "room that gets an injected transfer failure (0: none)")
      .add(fail_rank, "fail-rank", "prefill TP rank the failure is injected on")
      .add(fail_point, "fail-point", "before_post, after_post, on_aux, bad_completion, stall")
      .add(timeout_ms, "timeout-ms", "every room state's timeout")
      .add(log_level, "log-level", "trace, debug, info, warn, error, off");
  }
};


struct tally {
  uint64_t success = 0;
  uint64_t failed = 0;
};

int fail(const std::string& what) {
  return usage_error("demo", what);
}

} // namespace

int run_demo(int argc, char** argv) {
  demo_config cfg;
  prepare_config(cfg);
  if (auto done = parse_command_line(cfg, argc, argv, "demo"))
    return *done;
  if (!set_log_level(cfg.log_level))
    return fail("unknown log level '" + cfg.log_level + "'");
  if (cfg.prefill_tp < 1 || cfg.decode_tp < 1 || cfg.prefill_tp > 64 || cfg.decode_tp > 64)
    return fail("prefill-tp and decode-tp must lie in [1, 64]");
  if (cfg.rooms < 1 || cfg.concurrency < 1 || cfg.layers < 1 || cfg.chunks < 1
      || cfg.pages_per_room < 1 || cfg.page_tokens < 1 || cfg.head_dim < 1
      || cfg.dtype_bytes < 1 || cfg.kv_heads < 1 || cfg.timeout_ms < 1 || cfg.layers > 4096
      || cfg.page_tokens > 65536 || cfg.head_dim > 65536 || cfg.dtype_bytes > 16
      || cfg.kv_heads > 4096)
    return fail("every size must be positive (and reasonable)");
  if (cfg.page_order != "hnd" && cfg.page_order != "nhd")
    return fail("--page-order must be hnd or nhd");
  if (cfg.state != "none" && cfg.state != "mamba" && cfg.state != "swa")
    return fail("--state must be none, mamba or swa");
  if (cfg.state != "none" && (cfg.prefill_tp != cfg.decode_tp || cfg.prefill_pp != 1))
    return fail("--state moves each rank's own state: equal TP sizes and no PP");
  // The model the demo serves; each rank holds its TP share of it.
  parallel_layout model;
  model.layers = static_cast<int32_t>(cfg.layers);
  model.total_kv_heads = static_cast<int32_t>(cfg.kv_heads);
  model.head_dim = static_cast<int32_t>(cfg.head_dim);
  model.bytes_per_element = static_cast<int32_t>(cfg.dtype_bytes);
  model.tokens_per_page = static_cast<int32_t>(cfg.page_tokens);
  model.order = cfg.page_order == "nhd" ? page_order::nhd : page_order::hnd;
  model.mla = cfg.mla;
  if (cfg.prefill_pp < 1 || cfg.prefill_pp > 16 || cfg.layers % cfg.prefill_pp != 0)
    return fail("prefill-pp must lie in [1, 16] and divide layers");
  auto ptp = static_cast<int>(cfg.prefill_tp);
  auto ppp = static_cast<int>(cfg.prefill_pp);
  // Prefill ranks in stage-major order: index pp * ptp + tp.
  auto np = ptp * ppp;
  auto dtp = static_cast<int>(cfg.decode_tp);
  for (auto tp : {ptp, dtp}) {
    auto x = model;
    x.tp_size = tp;
    if (auto why = check(x); !why.empty())
      return fail("TP " + std::to_string(tp) + ": " + why);
  }
  fault_point point;
  if (!from_string(cfg.fail_point, point))
    return fail("unknown fail-point '" + cfg.fail_point + "'");
  if (cfg.fail_rank < 0 || cfg.fail_rank >= cfg.prefill_tp)
    return fail("fail-rank must name a prefill TP rank");
  {
    std::vector<parallel_layout> group;
    for (int i = 0; i < np; ++i) {
      group.push_back(model);
      auto& x = group.back();
      x.tp_size = ptp;
      x.tp_rank = i % ptp;
      x.pp_size = ppp;
      x.pp_rank = i / ptp;
      x.layers = model.layers / ppp;
      x.first_layer = x.pp_rank * x.layers;
    }
    auto targets = prefill_targets(group, group[static_cast<size_t>(cfg.fail_rank)], dtp);
    if (!targets)
      return fail(describe(targets.error()));
    if (cfg.fail_room > 0 && targets->empty())
      return fail("prefill tp" + std::to_string(cfg.fail_rank)
                  + " moves no byte in this layout (a dummy): --fail-rank must name a sender");
  }
  auto decode_page = [&] {
    auto x = model;
    x.tp_size = dtp;
    return x.page_bytes();
  }();
  auto prefill_page = [&] {
    auto x = model;
    x.tp_size = ptp;
    return x.page_bytes();
  }();
  kv_shape shape;
  shape.num_buffers = static_cast<uint32_t>(model.kv_buffers());
  shape.page_size_bytes = decode_page;
  shape.num_pages = static_cast<uint64_t>(cfg.concurrency * cfg.pages_per_room);
  shape.num_aux = 2;
  shape.aux_slots = static_cast<uint64_t>(cfg.concurrency);
  shape.aux_item_bytes = 256;
  // A request's state pages follow its slot (decode: the window reversed).
  int64_t window = cfg.state == "swa" ? 4 : 1;
  if (cfg.state != "none") {
    shape.num_state = 2;
    shape.state_pages = shape.aux_slots * static_cast<uint64_t>(window);
    shape.state_page_bytes = cfg.state == "swa" ? 16384 : 65536;
  }
  auto state_of = [&](size_t slot, bool dst) {
    std::vector<int64_t> out;
    for (int64_t i = 0; cfg.state != "none" && i < window; ++i)
      out.push_back(static_cast<int64_t>(slot) * window + (dst ? window - 1 - i : i));
    return out;
  };
  // What lands on the decode ranks, all of them together.
  auto room_bytes = static_cast<uint64_t>(dtp) * shape.num_buffers
                      * static_cast<uint64_t>(cfg.pages_per_room) * decode_page
                    + static_cast<uint64_t>(dtp) * shape.num_aux * shape.aux_item_bytes;
  std::printf("kvroom demo: %d prefill + %d decode ranks (TP %d%s -> %d%s), one process, transport local\n"
              "  KV layout: %lld layers x %s, page %lld tokens x %lld heads x %lld dims x %lld B"
              " %s = %llu B per page per buffer on prefill, %llu B on decode\n"
              "  rooms %lld, concurrency %lld, %lld pages/room (%.1f MiB/room over all ranks), %lld chunks/room\n"
              "  registered per rank: %.1f MiB; injected failure: room %lld on prefill tp%lld (%s)\n",
              np, dtp, ptp, ppp > 1 ? (" x PP " + std::to_string(ppp)).c_str() : "", dtp,
              cfg.mla ? ", MLA" : "", static_cast<long long>(cfg.layers),
              cfg.mla ? "one latent buffer" : "K/V",
              static_cast<long long>(cfg.page_tokens),
              static_cast<long long>(cfg.mla ? 1 : cfg.kv_heads),
              static_cast<long long>(cfg.head_dim), static_cast<long long>(cfg.dtype_bytes),
              cfg.page_order.c_str(), static_cast<unsigned long long>(prefill_page),
              static_cast<unsigned long long>(decode_page),
              static_cast<long long>(cfg.rooms), static_cast<long long>(cfg.concurrency),
              static_cast<long long>(cfg.pages_per_room), room_bytes / 1048576.0,
              static_cast<long long>(cfg.chunks), shape.total_bytes() / 1048576.0,
              static_cast<long long>(cfg.fail_room), static_cast<long long>(cfg.fail_rank),
              cfg.fail_point.c_str());
  std::fflush(stdout);

  caf::actor_system sys{cfg};
  int exit_code = 0;
  {
    runtime rt{sys};
    auto ms = static_cast<uint32_t>(cfg.timeout_ms);
    auto group = local_group::start(rt, ptp, dtp, model, shape, [&](rank_config& rc) {
      rc.timeouts = room_timeouts{ms, ms, ms};
      if (rc.side == role::prefill && rc.tp_rank == cfg.fail_rank && cfg.fail_room > 0
          && rc.parallel->pp_rank == 0) {
        rc.faults.rooms = {static_cast<room_id>(cfg.fail_room)};
        rc.faults.point = point;
      }
    }, ppp);
    if (!group)
      return fail(describe(group.error()));
    auto& prefill = (*group)->prefill;
    auto& decode = (*group)->decode;
    auto& prefill_mem = (*group)->prefill_mem;
    auto& decode_mem = (*group)->decode_mem;
    auto pages_of = [&](size_t slot, bool dst) {
      // Prefill pages are contiguous; decode pages come in reversed runs of
      // four, as a page allocator hands out fragments.
      std::vector<int64_t> out;
      auto base = static_cast<int64_t>(slot) * cfg.pages_per_room;
      for (int64_t i = 0; i < cfg.pages_per_room; ++i) {
        auto j = dst ? (i / 4) * 4 + (3 - i % 4) : i;
        out.push_back(base + (j < cfg.pages_per_room ? j : i));
      }
      return out;
    };
    tally prefill_states, decode_states;
    uint64_t verified = 0, verify_failures = 0, bytes_ok = 0;
    std::vector<std::string> failure_lines;
    uint64_t failed_rooms = 0, wrong_failures = 0;
    auto start = std::chrono::steady_clock::now();
    auto last_progress = start;
    auto verify = [&](room_id room) {
      return cfg.verify_every > 0 && room % static_cast<room_id>(cfg.verify_every) == 0;
    };
    loop_hooks hooks;
    hooks.opened = [&](loop_room& r) {
      // The model's pattern of each rank's heads: decode ranks of any TP
      // check theirs.
      if (verify(r.id))
        for (int t = 0; t < np; ++t) {
          prefill_mem[t]->write_room(r.id, pages_of(r.slot, false), static_cast<int64_t>(r.slot),
                                     *(*group)->layout(role::prefill, t));
          prefill_mem[t]->write_state(r.id ^ (room_id(t + 1) << 40), state_of(r.slot, false));
        }
    };
    hooks.receiver_ready = [&](loop_room& r, int t) {
      (void) r.receivers[static_cast<size_t>(t)].init(pages_of(r.slot, true),
                                                     static_cast<int64_t>(r.slot),
                                                     state_of(r.slot, true));
      return true;
    };
    hooks.sender_ready = [&](loop_room& r, int t) {
      auto& send = r.senders[static_cast<size_t>(t)];
      auto pages = pages_of(r.slot, false);
      (void) send.init(pages.size(), static_cast<int64_t>(r.slot));
      auto per = (pages.size() + cfg.chunks - 1) / cfg.chunks;
      for (size_t c = 0; c * per < pages.size(); ++c) {
        auto last = std::min(pages.size(), (c + 1) * per);
        std::vector<int64_t> chunk(pages.begin() + c * per, pages.begin() + last);
        (void) send.send(std::move(chunk), last == pages.size(),
                         last == pages.size() ? state_of(r.slot, false) : std::vector<int64_t>{});
      }
      return true;
    };
    hooks.concluded = [&](loop_room& r) {
      bool room_failed = false;
      for (int t = 0; t < std::max(np, dtp); ++t) {
        auto ut = static_cast<size_t>(t);
        std::vector<room_handle*> handles;
        if (t < np)
          handles.push_back(&r.senders[ut]);
        if (t < dtp)
          handles.push_back(&r.receivers[ut]);
        for (auto* h : handles) {
          bool is_sender = t < np && h == &r.senders[ut];
          auto& states = is_sender ? prefill_states : decode_states;
          if (h->poll() == kv_poll::success) {
            ++states.success;
            continue;
          }
          ++states.failed;
          room_failed = true;
          auto err = h->failure();
          if (!err)
            continue;
          auto who = to_string(is_sender ? prefill[ut]->ref() : decode[ut]->ref());
          failure_lines.push_back("  " + who + (err->is_from_another_rank ? "  propagated  " : "  ORIGIN      ")
                                  + to_string(*err) + "  [origin_rank "
                                  + std::to_string(err->origin_rank) + "]");
        }
      }
      if (room_failed) {
        ++failed_rooms;
        if (r.id != static_cast<room_id>(cfg.fail_room))
          ++wrong_failures;
        return;
      }
      bytes_ok += room_bytes;
      if (!verify(r.id))
        return;
      for (int t = 0; t < dtp; ++t) {
        std::string why;
        ++verified;
        if (!decode_mem[t]->check_room(r.id, pages_of(r.slot, true), static_cast<int64_t>(r.slot),
                                       *(*group)->layout(role::decode, t), &why)
            || !decode_mem[t]->check_state(r.id ^ (room_id(t + 1) << 40),
                                           state_of(r.slot, true), &why)) {
          ++verify_failures;
          std::fprintf(stderr, "verification failed: %s\n", why.c_str());
        }
      }
    };
    scheduler_loop loop{ranks_of(prefill), ranks_of(decode), 0, static_cast<size_t>(cfg.concurrency),
                        1, static_cast<uint64_t>(cfg.rooms), std::move(hooks)};
    while (!loop.done()) {
      bool progressed = loop.step();
      if (!loop.open_error().empty())
        return fail("cannot open room: " + loop.open_error());
      auto now = std::chrono::steady_clock::now();
      if (now - last_progress > std::chrono::seconds(2)) {
        std::printf("  ... %llu / %lld rooms concluded\n",
                    static_cast<unsigned long long>(loop.concluded_rooms()),
                    static_cast<long long>(cfg.rooms));
        std::fflush(stdout);
        last_progress = now;
      }
      // A scheduler iteration with nothing to do yields its core to the
      // actors doing the work (2-core machines).
      if (!progressed)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("\nfinal states per rank-room    success   failed\n"
                "  prefill ranks              %8llu %8llu\n"
                "  decode ranks               %8llu %8llu\n"
                "rooms: %lld concluded in %.2f s: %.0f rooms/s, %.2f GB/s of KV moved (%.2f GiB)\n"
                "byte-exact check: %llu of %llu sampled rank-rooms ok\n",
                static_cast<unsigned long long>(prefill_states.success),
                static_cast<unsigned long long>(prefill_states.failed),
                static_cast<unsigned long long>(decode_states.success),
                static_cast<unsigned long long>(decode_states.failed),
                static_cast<long long>(cfg.rooms), secs, cfg.rooms / secs,
                bytes_ok / secs / 1e9, bytes_ok / 1073741824.0,
                static_cast<unsigned long long>(verified - verify_failures),
                static_cast<unsigned long long>(verified));
    std::printf("failures (%llu room%s):\n", static_cast<unsigned long long>(failed_rooms),
                failed_rooms == 1 ? "" : "s");
    for (auto& line : failure_lines)
      std::printf("%s\n", line.c_str());
    uint64_t leaked = 0;
    for (auto* group : {&prefill, &decode})
      for (auto& r : *group) {
        auto st = r->stats();
        if (st)
          leaked += st->failure_records;
      }
    std::printf("failure records left after every room was cleared: %llu\n",
                static_cast<unsigned long long>(leaked));
    bool expected_failure = cfg.fail_room > 0 && cfg.fail_room <= cfg.rooms;
    if (verify_failures > 0 || wrong_failures > 0 || leaked > 0
        || failed_rooms != (expected_failure ? 1u : 0u))
      exit_code = 1;
    std::printf("%s\n", exit_code == 0 ? "demo: ok" : "demo: UNEXPECTED RESULT");
  }
  return exit_code;
}

} // namespace kvroom::cli
