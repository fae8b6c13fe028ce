#include "kvroom/actors/control/side_shape.hpp"

#include <algorithm>
#include <map>

namespace kvroom {

side_shape shape_of(const std::vector<std::shared_ptr<const rank_entry>>& ranks, role side) {
  side_shape out;
  std::map<int32_t, int32_t> per_group;
  for (auto& e : ranks) {
    if (!e || e->rank.side != side)
      continue;
    ++out.ranks;
    ++per_group[e->rank.dp_rank];
    // What a rank said, else what the listed ranks imply (a lower bound).
    out.dp_size = std::max({out.dp_size, e->rank.dp_rank + 1, e->rank.dp_size});
    out.tp_size = std::max(out.tp_size, e->rank.tp_size);
    if (e->has_parallel) {
      out.pp_size = std::max(out.pp_size, e->parallel.pp_size);
      out.tokens_per_page = e->parallel.tokens_per_page;
    }
  }
  if (out.ranks == 0)
    return out;
  out.complete = static_cast<int32_t>(per_group.size()) == out.dp_size;
  for (auto& [dp, n] : per_group)
    out.complete = out.complete && n == out.tp_size * out.pp_size;
  return out;
}

} // namespace kvroom
