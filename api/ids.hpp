#pragma once

#include <cstdint>
#include <string>

#include "caf/meta/type_name.hpp"

namespace kvroom {

/// Identifier of a bootstrap room: one request's transfer, chosen by the
/// serving stack (SGLang's `bootstrap_room`).
using room_id = uint64_t;

/// Deployment-wide identifier of one rank; `origin_rank` in errors.
using rank_id = int32_t;

/// Which side of the disaggregation a rank serves.
enum class role : uint8_t {
  prefill = 0,
  decode = 1,
};

std::string to_string(role x);

/// Where a rank sits: its side, data-parallel group and tensor-parallel slot.
struct rank_ref {
  role side = role::prefill;
  int32_t dp_rank = 0;
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  /// Unique across the deployment; see `default_rank_id`.
  rank_id id = 0;
  /// Pipeline stage (prefill ranks of a pipeline-parallel group; 0
  /// otherwise): a group's ranks are its TP x PP grid.
  int32_t pp_rank = 0;
  /// DP groups of its side, as the rank said (0: not said). A side's shape
  /// must not depend on which groups happen to be listed yet: SGLang's decode
  /// sends room r to prefill group r % dp_size as soon as it knows a size.
  int32_t dp_size = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_ref& x) {
  return f(caf::meta::type_name("kvroom.rank_ref"), x.side, x.dp_rank,
           x.tp_rank, x.tp_size, x.id, x.pp_rank, x.dp_size);
}

/// Rank ids when the operator sets none: prefill ranks count from 0,
/// decode ranks from 1 << 16, `(dp_rank * pp_size + pp_rank) * tp_size +
/// tp_rank` within a side.
rank_id default_rank_id(role side, int32_t dp_rank, int32_t tp_rank, int32_t tp_size,
                        int32_t pp_rank = 0, int32_t pp_size = 1) noexcept;

/// Human form used in logs, e.g. "prefill[dp0,tp1]#1".
std::string to_string(const rank_ref& x);

bool operator==(const rank_ref& x, const rank_ref& y) noexcept;

} // namespace kvroom
