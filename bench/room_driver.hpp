#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "kvroom/kit/scheduler_loop.hpp"
#include "kvroom/kit/testkit.hpp"

namespace kvroom::bench {

/// A `local_group` plus how many pages a room of this benchmark moves.
struct bench_group {
  std::vector<std::unique_ptr<host_kv_cache>> prefill_mem, decode_mem;
  std::vector<std::unique_ptr<rank>> prefill, decode;
  int tp = 1;
  int64_t pages_per_room = 1;

  bench_group(runtime& rt, int tp, const kv_shape& shape, int64_t pages_per_room);
  /// Ranks declaring `model`'s layout (TP sizes `prefill_tp` and
  /// `decode_tp`): rooms follow the rank mapping.
  bench_group(runtime& rt, int prefill_tp, int decode_tp, const parallel_layout& model,
              const kv_shape& shape, int64_t pages_per_room);
  /// The ranks of a group started elsewhere (with a customizer).
  bench_group(std::unique_ptr<local_group> g, int64_t pages_per_room);
  ~bench_group();
};

/// Drives rooms through the testkit's scheduler loop: opens rooms up to the
/// concurrency, polls every in-flight room once per step, inits and sends
/// when a side is ready, clears rooms once every rank concluded.
class room_driver {
public:
  /// Room ids start at `first_room`; drivers sharing ranks use disjoint ids.
  room_driver(bench_group& g, size_t concurrency, room_id first_room = 1);

  /// Stops admitting and drives the rooms in flight to their end (bounded).
  void finish(double max_seconds = 30.0);

  room_id next_room() const noexcept {
    return loop_.next_room();
  }

  /// One scheduler iteration; returns whether anything happened.
  bool step();

  /// Steps for `seconds` (yielding when nothing happened), then `finish`es:
  /// the seconds it all took, the rooms in flight at the end included.
  double run_for(double seconds);

  /// Decode's pages of a room, as positions among its slot's pages (empty:
  /// the same pages as prefill's, in order). A permutation scatters them:
  /// no run of pages stays adjacent on both sides, so none coalesce.
  std::vector<int64_t> decode_order;

  uint64_t succeeded = 0;
  uint64_t failed = 0;
  /// Open-to-conclusion time of every finished room, microseconds.
  std::vector<double> latencies_us;

private:
  std::vector<int64_t> pages(size_t slot) const;
  std::vector<int64_t> decode_pages(size_t slot) const;
  loop_hooks hooks();

  bench_group& g_;
  scheduler_loop loop_;
};

} // namespace kvroom::bench
