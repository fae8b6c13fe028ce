// Per-room end-to-end latency, small and realistic rooms, against a
// single-thread memcpy of the same bytes measured in the same run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/kit/testkit.hpp"
#include "kvroom/api/backend.hpp"

#include "benches.hpp"
#include "report.hpp"
#include "room_driver.hpp"
#include "shapes.hpp"

namespace kvroom::bench {

namespace {

class latency_config : public bench_config {
public:
  int64_t rooms = 2000;
  latency_config() {
    opt_group{custom_options_, "global"}.add(rooms, "rooms", "rooms per room size");
  }
};

} // namespace

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
