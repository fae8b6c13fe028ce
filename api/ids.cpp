#include "kvroom/api/ids.hpp"

namespace kvroom {

std::string to_string(role x) {
  return x == role::prefill ? "prefill" : "decode";
}

rank_id default_rank_id(role side, int32_t dp_rank, int32_t tp_rank, int32_t tp_size,
                        int32_t pp_rank, int32_t pp_size) noexcept {
  rank_id base = side == role::prefill ? 0 : (1 << 16);
  return base + (dp_rank * pp_size + pp_rank) * tp_size + tp_rank;
}

std::string to_string(const rank_ref& x) {
  std::string out = to_string(x.side);
  out += "[dp";
  out += std::to_string(x.dp_rank);
  if (x.pp_rank != 0) {
    out += ",pp";
    out += std::to_string(x.pp_rank);
  }
  out += ",tp";
  out += std::to_string(x.tp_rank);
  out += "]#";
  out += std::to_string(x.id);
  return out;
}

bool operator==(const rank_ref& x, const rank_ref& y) noexcept {
  return x.side == y.side && x.dp_rank == y.dp_rank && x.tp_rank == y.tp_rank
         && x.tp_size == y.tp_size && x.id == y.id && x.pp_rank == y.pp_rank
         && x.dp_size == y.dp_size;
}

} // namespace kvroom
