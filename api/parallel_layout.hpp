#pragma once

#include <cstdint>
#include <string>

#include "caf/meta/type_name.hpp"

namespace kvroom {

/// How one KV page is laid out in memory: token-major ([token][head][dim],
/// "NHD") or head-major ([head][token][dim], "HND").
enum class page_order : uint8_t {
  nhd = 0,
  hnd = 1,
};

std::string to_string(page_order x);

/// Which part of the model's KV cache one rank holds, and how: what the
/// rank mapping (transport/rank_mapping.hpp) needs to know which prefill
/// rank writes which bytes of which decode page. A rank's KV buffers are one
/// K and one V buffer per layer of its pipeline stage (MLA: one latent
/// buffer per layer), in layer order; a page of each holds
/// `tokens_per_page` tokens of this rank's heads.
struct parallel_layout {
  /// Tensor-parallel size and this rank's place in it.
  int32_t tp_size = 1;
  int32_t tp_rank = 0;
  /// Pipeline-parallel size and stage; the stage holds layers
  /// [first_layer, first_layer + layers).
  int32_t pp_size = 1;
  int32_t pp_rank = 0;
  int32_t first_layer = 0;
  int32_t layers = 1;
  /// The model's KV heads (all TP ranks together) and their shape.
  int32_t total_kv_heads = 1;
  int32_t head_dim = 128;
  int32_t bytes_per_element = 2;
  int32_t tokens_per_page = 16;
  page_order order = page_order::hnd;
  /// MLA (DeepSeek-style): one latent "head" of `head_dim`, replicated on
  /// every TP rank; `total_kv_heads` is ignored.
  bool mla = false;

  /// Heads this rank holds: an even share, or one head replicated on
  /// several ranks when the TP size exceeds the heads (1 for MLA).
  int32_t local_heads() const noexcept;
  /// The first (global) head it holds.
  int32_t first_head() const noexcept;
  uint64_t head_bytes() const noexcept {
    return static_cast<uint64_t>(head_dim) * static_cast<uint64_t>(bytes_per_element);
  }
  /// Bytes of one page of one K or V buffer.
  uint64_t page_bytes() const noexcept {
    return head_bytes() * static_cast<uint64_t>(local_heads())
           * static_cast<uint64_t>(tokens_per_page);
  }
  /// Offset in a page of token `t` of local head `h`.
  uint64_t offset(int32_t token, int32_t local_head) const noexcept;
  /// KV buffers per layer: K and V, or one latent buffer for MLA (SGLang's
  /// MLA pool keeps one `kv_buffer` per layer).
  int32_t buffers_per_layer() const noexcept {
    return mla ? 1 : 2;
  }
  /// The rank's KV buffers: every layer of its stage, in layer order.
  int32_t kv_buffers() const noexcept {
    return buffers_per_layer() * layers;
  }
  bool holds_layer(int32_t layer) const noexcept {
    return layer >= first_layer && layer < first_layer + layers;
  }
};

/// Empty when `x` describes a layout a rank can hold, else why not.
std::string check(const parallel_layout& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, parallel_layout& x) {
  return f(caf::meta::type_name("kvroom.parallel_layout"), x.tp_size, x.tp_rank, x.pp_size,
           x.pp_rank, x.first_layer, x.layers, x.total_kv_heads, x.head_dim,
           x.bytes_per_element, x.tokens_per_page, x.order, x.mla);
}

/// What the directory says of one side of a deployment (`rank::shape_of_side`):
/// its DP groups, TP and PP sizes, and the page size its layouts declare.
struct side_shape {
  /// Ranks of that side the directory lists (usable or not yet linked).
  int32_t ranks = 0;
  /// The DP size its ranks said, or else the highest DP rank listed plus one
  /// (0: no rank of that side).
  int32_t dp_size = 0;
  /// Every rank's TP size (the directory admits one per side).
  int32_t tp_size = 0;
  /// From declared layouts; 1 where none declares one.
  int32_t pp_size = 1;
  /// Tokens per page of a declared layout; 0 where none declares one.
  int32_t tokens_per_page = 0;
  /// Every DP group up to `dp_size` holds `tp_size` x `pp_size` ranks.
  bool complete = false;
};

} // namespace kvroom
