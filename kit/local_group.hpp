#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/kit/host_kv_cache.hpp"
#include "kvroom/api/rank.hpp"
#include "kvroom/api/runtime.hpp"

namespace kvroom {

/// A prefill group and a decode group of equal TP in one runtime, every rank
/// with its own host KV cache of `shape`: what the demo, the stress runner
/// and the benchmarks run on. `customize` adjusts each rank's config
/// (timeouts, faults) before it starts. Ranks stop before their memory goes.
class local_group {
public:
  using customizer = std::function<void(rank_config&)>;

  static caf::expected<std::unique_ptr<local_group>>
  start(runtime& rt, int tp, const kv_shape& shape, const customizer& customize = {});

  /// Groups of any two TP sizes whose ranks declare `model`'s layout (its
  /// TP size and rank set per rank; `model.layers` the whole model): each
  /// rank's pages hold its heads (`shape`'s page size and buffer count
  /// follow from the layout). `prefill_pp` > 1: the prefill group is that
  /// many pipeline stages of `prefill_tp` ranks, each holding its share of
  /// the layers (`prefill` in stage-major order: index pp * prefill_tp + tp).
  static caf::expected<std::unique_ptr<local_group>>
  start(runtime& rt, int prefill_tp, int decode_tp, const parallel_layout& model,
        const kv_shape& shape, const customizer& customize = {}, int prefill_pp = 1);

  /// The layout a rank declared, when it did.
  const std::optional<parallel_layout>& layout(role side, int tp_rank) const {
    return (side == role::prefill ? prefill_layout : decode_layout)[static_cast<size_t>(tp_rank)];
  }

  ~local_group();

  int tp() const noexcept {
    return static_cast<int>(prefill.size());
  }

  rank& at(role side, int tp_rank) {
    return *(side == role::prefill ? prefill : decode)[static_cast<size_t>(tp_rank)];
  }

  host_kv_cache& memory(role side, int tp_rank) {
    return *(side == role::prefill ? prefill_mem : decode_mem)[static_cast<size_t>(tp_rank)];
  }

  std::vector<std::unique_ptr<host_kv_cache>> prefill_mem, decode_mem;
  std::vector<std::unique_ptr<rank>> prefill, decode;
  std::vector<std::optional<parallel_layout>> prefill_layout, decode_layout;
};

} // namespace kvroom
