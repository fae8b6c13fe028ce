#include "kvroom/api/parallel_layout.hpp"

namespace kvroom {

std::string to_string(page_order x) {
  return x == page_order::nhd ? "NHD" : "HND";
}

int32_t parallel_layout::local_heads() const noexcept {
  if (mla || tp_size <= 0 || total_kv_heads <= 0)
    return 1;
  return tp_size <= total_kv_heads ? total_kv_heads / tp_size : 1;
}

int32_t parallel_layout::first_head() const noexcept {
  if (mla || tp_size <= 0 || total_kv_heads <= 0)
    return 0;
  if (tp_size <= total_kv_heads)
    return tp_rank * local_heads();
  // Replicated: tp_size / total_kv_heads consecutive ranks share a head.
  return tp_rank / (tp_size / total_kv_heads);
}

uint64_t parallel_layout::offset(int32_t token, int32_t local_head) const noexcept {
  auto t = static_cast<uint64_t>(token);
  auto h = static_cast<uint64_t>(local_head);
  auto n = order == page_order::nhd ? t * static_cast<uint64_t>(local_heads()) + h
                                    : h * static_cast<uint64_t>(tokens_per_page) + t;
  return n * head_bytes();
}

std::string check(const parallel_layout& x) {
  auto positive = [](int32_t v) { return v > 0; };
  if (!positive(x.tp_size) || x.tp_rank < 0 || x.tp_rank >= x.tp_size)
    return "TP rank " + std::to_string(x.tp_rank) + " of TP size " + std::to_string(x.tp_size);
  if (!positive(x.pp_size) || x.pp_rank < 0 || x.pp_rank >= x.pp_size)
    return "PP rank " + std::to_string(x.pp_rank) + " of PP size " + std::to_string(x.pp_size);
  if (x.first_layer < 0 || !positive(x.layers))
    return "layers [" + std::to_string(x.first_layer) + ", +" + std::to_string(x.layers) + ")";
  if (!positive(x.head_dim) || !positive(x.bytes_per_element) || !positive(x.tokens_per_page))
    return "head_dim, bytes_per_element and tokens_per_page must be positive";
  if (!x.mla) {
    if (!positive(x.total_kv_heads))
      return "total_kv_heads must be positive";
    if (x.tp_size <= x.total_kv_heads && x.total_kv_heads % x.tp_size != 0)
      return std::to_string(x.total_kv_heads) + " KV heads do not split evenly over TP size "
             + std::to_string(x.tp_size);
    if (x.tp_size > x.total_kv_heads && x.tp_size % x.total_kv_heads != 0)
      return "TP size " + std::to_string(x.tp_size) + " is not a multiple of the "
             + std::to_string(x.total_kv_heads) + " KV heads it replicates";
  }
  return {};
}

} // namespace kvroom
