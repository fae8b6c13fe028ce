// Bandwidth per transport and per-room latency, each against single-thread
// memcpy of the same bytes measured in the same run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "caf/all.hpp"

#include "actors/kvroom.hpp"
#include "transport/factory.hpp"

#include "benches.hpp"
#include "report.hpp"
#include "room_driver.hpp"

namespace kvroom::bench {

namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Llama-3-8B-like: 32 layers x K/V, pages of 16 tokens x 8 KV heads / tp x
/// 128 dims x bf16.
kv_shape realistic_shape(int tp, int64_t slots, int64_t pages_per_room) {
  kv_shape s;
  s.num_buffers = 64;
  s.page_size_bytes = static_cast<uint64_t>(16 * (8 / tp) * 128 * 2);
  s.num_pages = static_cast<uint64_t>(slots * pages_per_room);
  s.num_aux = 1;
  s.aux_slots = static_cast<uint64_t>(slots);
  s.aux_item_bytes = 256;
  return s;
}

kv_shape tiny_shape(int64_t slots) {
  kv_shape s;
  s.num_buffers = 2;
  s.page_size_bytes = 256;
  s.num_pages = static_cast<uint64_t>(slots);
  s.num_aux = 1;
  s.aux_slots = static_cast<uint64_t>(slots);
  s.aux_item_bytes = 64;
  return s;
}

/// Mean seconds of one single-thread memcpy of `ops`' bytes, repeated for
/// `seconds` (the same method the transport is measured with).
double memcpy_seconds(const std::vector<write_op>& ops, double seconds) {
  uint64_t reps = 0;
  auto t0 = clock_type::now();
  do {
    for (auto& op : ops)
      std::memcpy(reinterpret_cast<void*>(op.dst_addr),
                  reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
    ++reps;
  } while (since(t0) < seconds);
  return since(t0) / static_cast<double>(reps);
}

class bandwidth_config : public bench_config {
public:
  std::string blocks = "4096,16384,65536,262144,1048576,4194304";
  std::string batches = "1,8,32,128";
  std::string transports = "local";
  bandwidth_config() {
    opt_group{custom_options_, "global"}
      .add(blocks, "blocks", "block sizes in bytes, comma-separated")
      .add(batches, "batches", "writes per batch, comma-separated")
      .add(transports, "transports", "transports to measure, comma-separated");
  }
};

class latency_config : public bench_config {
public:
  int64_t rooms = 2000;
  latency_config() {
    opt_group{custom_options_, "global"}.add(rooms, "rooms", "rooms per room size");
  }
};

} // namespace

int bench_bandwidth(int argc, char** argv) {
  bandwidth_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto blocks = parse_list(cfg.blocks);
  auto batches = parse_list(cfg.batches);
  if (blocks.empty() || batches.empty()) {
    std::fprintf(stderr, "bad --blocks or --batches list\n");
    return 2;
  }
  std::vector<std::string> names;
  for (size_t p = 0; p <= cfg.transports.size();) {
    auto c = cfg.transports.find(',', p);
    names.push_back(cfg.transports.substr(p, c == std::string::npos ? std::string::npos : c - p));
    if (c == std::string::npos)
      break;
    p = c + 1;
  }
  constexpr uint64_t max_batch_bytes = 64ull << 20;
  std::printf("kvroom-bench bandwidth: transports %s; each point %.2f s; baseline: single-thread memcpy of the same writes\n",
              cfg.transports.c_str(), cfg.seconds / 10);
  std::printf("%-9s %10s %6s %12s %12s %8s\n", "transport", "block", "batch", "GB/s", "memcpy GB/s",
              "ratio");
  std::vector<std::string> rows;
  for (auto& name : names) {
    for (auto block : blocks) {
      for (auto batch : batches) {
        auto bytes = static_cast<uint64_t>(block) * static_cast<uint64_t>(batch);
        if (block <= 0 || batch <= 0 || bytes > max_batch_bytes)
          continue;
        auto sender = make_backend(backend_config{name, 1, {}});
        auto receiver = make_backend(backend_config{name, 2, {}});
        if (!sender || !receiver) {
          std::printf("%-9s skipped: %s\n", name.c_str(),
                      describe(sender ? receiver.error() : sender.error()).c_str());
          break;
        }
        auto* src = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
        auto* dst = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
        std::memset(src, 1, bytes);
        std::memset(dst, 0, bytes);
        (void) (*sender)->register_memory({reinterpret_cast<uint64_t>(src), bytes, -1});
        (void) (*receiver)->register_memory({reinterpret_cast<uint64_t>(dst), bytes, -1});
        write_batch wb;
        wb.peer = (*receiver)->endpoint();
        for (int64_t i = 0; i < batch; ++i)
          wb.ops.push_back({reinterpret_cast<uint64_t>(src) + i * block,
                            reinterpret_cast<uint64_t>(dst) + i * block,
                            static_cast<uint64_t>(block)});
        uint64_t moved = 0;
        auto t0 = clock_type::now();
        while (since(t0) < cfg.seconds / 10) {
          auto id = (*sender)->post(wb);
          if (!id)
            break;
          std::string reason;
          while ((*sender)->poll(*id, reason) == xfer_status::in_progress)
            ;
          (*sender)->release(*id);
          moved += bytes;
        }
        auto gbps = moved / since(t0) / 1e9;
        auto base = bytes / memcpy_seconds(wb.ops, cfg.seconds / 10) / 1e9;
        std::printf("%-9s %10lld %6lld %12.2f %12.2f %7.0f%%\n", name.c_str(),
                    static_cast<long long>(block), static_cast<long long>(batch), gbps, base,
                    100 * gbps / base);
        rows.push_back(json_object{}
                         .str("transport", name)
                         .num("block_bytes", static_cast<double>(block))
                         .num("batch", static_cast<double>(batch))
                         .num("gb_per_s", gbps)
                         .num("memcpy_gb_per_s", base)
                         .num("ratio", gbps / base)
                         .dump(6));
        std::free(src);
        std::free(dst);
      }
    }
  }
  // The realistic layout, end to end through rooms.
  double kv_gbps = 0, kv_base = 0;
  {
    caf::actor_system sys{cfg};
    runtime rt{sys};
    constexpr int64_t ppr = 16, conc = 4;
    bench_group g{rt, 1, realistic_shape(1, conc, ppr), ppr};
    room_driver d{g, conc};
    auto t0 = clock_type::now();
    while (since(t0) < cfg.seconds)
      if (!d.step())
        std::this_thread::yield();
    d.finish();
    auto secs = since(t0);
    auto& shape = g.prefill_mem[0]->shape();
    auto room_bytes = shape.num_buffers * ppr * shape.page_size_bytes + shape.aux_item_bytes;
    kv_gbps = d.succeeded * room_bytes / secs / 1e9;
    auto layout = g.prefill_mem[0]->layout();
    auto dst = g.decode_mem[0]->layout();
    std::vector<write_op> ops;
    for (size_t b = 0; b < layout.kv.size(); ++b)
      ops.push_back({layout.kv[b].mem.addr, dst.kv[b].mem.addr, ppr * shape.page_size_bytes});
    kv_base = room_bytes / memcpy_seconds(ops, 0.5) / 1e9;
    std::printf("realistic KV (64 buffers x 16 pages x %llu B per room, 1P x 1D, 4 rooms in flight): %.2f GB/s vs memcpy %.2f GB/s (%.0f%%)\n",
                static_cast<unsigned long long>(shape.page_size_bytes), kv_gbps, kv_base,
                100 * kv_gbps / kv_base);
  }
  auto out = json_object{}
               .str("bench", "bandwidth")
               .str("transports", cfg.transports)
               .raw("points", json_array(rows))
               .num("realistic_kv_gb_per_s", kv_gbps)
               .num("realistic_kv_memcpy_gb_per_s", kv_base)
               .dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

int bench_latency(int argc, char** argv) {
  latency_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto tp = static_cast<int>(cfg.tp);
  std::printf("kvroom-bench latency: one room at a time, %dP x %dD, %lld rooms per size\n", tp,
              tp, static_cast<long long>(cfg.rooms));
  std::printf("%-10s %12s %10s %10s %10s %14s\n", "room", "bytes", "p50 us", "p99 us",
              "max us", "memcpy us");
  caf::actor_system sys{cfg};
  std::vector<std::string> rows;
  {
    runtime rt{sys};
    for (auto realistic : {false, true}) {
      constexpr int64_t ppr = 16;
      auto shape = realistic ? realistic_shape(tp, 1, ppr) : tiny_shape(1);
      bench_group g{rt, tp, shape, realistic ? ppr : 1};
      room_driver d{g, 1};
      auto t0 = clock_type::now();
      while (d.succeeded + d.failed < static_cast<uint64_t>(cfg.rooms)
             && since(t0) < 10 * cfg.seconds)
        if (!d.step())
          std::this_thread::yield();
      d.finish();
      auto pages = realistic ? ppr : 1;
      auto bytes = static_cast<uint64_t>(tp) * shape.num_buffers * pages * shape.page_size_bytes;
      auto layout = g.prefill_mem[0]->layout();
      auto dst = g.decode_mem[0]->layout();
      std::vector<write_op> ops;
      for (size_t b = 0; b < layout.kv.size(); ++b)
        ops.push_back({layout.kv[b].mem.addr, dst.kv[b].mem.addr,
                       static_cast<uint64_t>(pages) * shape.page_size_bytes});
      auto base_us = memcpy_seconds(ops, 0.2) * 1e6 * tp;
      auto p50 = percentile(d.latencies_us, 50), p99 = percentile(d.latencies_us, 99),
           mx = percentile(d.latencies_us, 100);
      auto name = realistic ? "realistic" : "small";
      std::printf("%-10s %12llu %10.1f %10.1f %10.1f %14.1f\n", name,
                  static_cast<unsigned long long>(bytes), p50, p99, mx, base_us);
      rows.push_back(json_object{}
                       .str("room", name)
                       .num("bytes", static_cast<double>(bytes))
                       .num("rooms", static_cast<double>(d.latencies_us.size()))
                       .num("latency_us_p50", p50)
                       .num("latency_us_p99", p99)
                       .num("latency_us_max", mx)
                       .num("memcpy_us", base_us)
                       .dump(6));
    }
  }
  auto out = json_object{}.str("bench", "latency").num("tp", tp).raw("rooms", json_array(rows)).dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

} // namespace kvroom::bench
