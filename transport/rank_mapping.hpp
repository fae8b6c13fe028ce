#pragma once

// Which prefill rank writes which bytes of which decode page, for any pair of
// parallel layouts a serving stack runs: prefill TP larger or smaller than
// decode TP (head slicing), decode TP beyond the KV heads (replication), MLA
// (one sender per decode rank, the rest dummies), pipeline-parallel prefill
// (each stage its own layers). A plain function of two layouts: rooms only
// carry it out, and every byte of it is a unit test (rank_mapping_test).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/parallel_layout.hpp"

namespace kvroom {

/// A prefill rank of the group by its place: TP rank and PP stage.
struct prefill_place {
  int32_t tp_rank = 0;
  int32_t pp_rank = 0;

  friend bool operator==(const prefill_place& x, const prefill_place& y) noexcept {
    return x.tp_rank == y.tp_rank && x.pp_rank == y.pp_rank;
  }
  friend bool operator<(const prefill_place& x, const prefill_place& y) noexcept {
    return x.pp_rank != y.pp_rank ? x.pp_rank < y.pp_rank : x.tp_rank < y.tp_rank;
  }
};

/// The place of the prefill rank whose layout is `x`.
inline prefill_place place_of(const parallel_layout& x) noexcept {
  return prefill_place{x.tp_rank, x.pp_rank};
}

/// One write of the page template: bytes [src_offset, +length) of page i of
/// the source's KV buffer `src_buffer` go to [dst_offset, +length) of page i
/// of the decode rank's buffer `dst_buffer`, for every page pair of a room.
/// Buffers are K and V of each layer in order: buffer 2 * (layer -
/// first_layer) + kv (MLA: one latent buffer per layer, buffer layer -
/// first_layer).
struct slice_write {
  prefill_place src;
  int32_t layer = 0;
  uint32_t src_buffer = 0;
  uint32_t dst_buffer = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
};

/// What one decode rank receives.
struct decode_mapping {
  /// In the decode rank's memory order, coalesced: slices contiguous on both
  /// sides are one write.
  std::vector<slice_write> writes;
  /// The prefill ranks that write into it (sorted).
  std::vector<prefill_place> sources;
  /// The one source that also sends the room's aux data (and state).
  prefill_place aux_source;
};

/// What a whole room moves: one mapping per decode TP rank, and for each
/// prefill rank the decode TP ranks it writes (empty: a dummy, which moves
/// no bytes and still concludes with the room).
struct room_mapping {
  std::vector<decode_mapping> decode;
  std::vector<prefill_place> prefill;           // every rank of the group
  std::vector<std::vector<int32_t>> targets;    // parallel to `prefill`
};

/// The mapping of one decode rank, given every rank of the prefill group
/// (any order). Refuses, with the reason, layouts that cannot be mapped: a
/// group that is not one full TP x PP grid, stages that do not split the
/// layers, decode PP > 1, or a different model shape (heads, head_dim, bytes
/// per element, tokens per page, MLA) on the two sides.
caf::expected<decode_mapping> map_decode_rank(const std::vector<parallel_layout>& prefill_group,
                                              const parallel_layout& decode);

/// The same mapping, shared: a rank's rooms map the same layouts room after
/// room, so each distinct (group, decode) pair is computed once and kept
/// (at most `mapping_cache_entries`, the oldest dropped first; a refusal is
/// not kept). Safe from any thread; a look-up holds a mutex for a scan.
caf::expected<std::shared_ptr<const decode_mapping>>
shared_decode_mapping(const std::vector<parallel_layout>& prefill_group,
                      const parallel_layout& decode);

/// How many mappings `shared_decode_mapping` keeps: far more than the
/// distinct pairs of one deployment (a decode rank sees one per prefill
/// group), few enough that memory does not follow the ranks ever seen.
constexpr size_t mapping_cache_entries = 64;

/// The mapping of a whole room between a prefill group and the decode
/// group (one layout per decode TP rank).
caf::expected<room_mapping> map_room(const std::vector<parallel_layout>& prefill_group,
                                     const std::vector<parallel_layout>& decode_group);

/// Empty when ranks with layouts `a` and `b` can be in one deployment, else
/// why not: on one side, the same TP and PP sizes and model shape (and one
/// stage's layers on one PP rank); across sides, what `map_decode_rank`
/// needs of the two (decode PP 1, the same heads, head_dim, bytes per
/// element, tokens per page and MLA; the decode rank holding the prefill
/// stage's layers). `prefill_a`/`prefill_b`: the side of each.
std::string parallel_conflict(const parallel_layout& a, bool prefill_a, const parallel_layout& b,
                              bool prefill_b);

/// The layout of decode TP rank `tp_rank` of `tp_size` for a model whose
/// prefill side holds `prefill` (one rank of its group; `total_layers`: all
/// stages together): the same model shape, every layer, one stage. The heads
/// a decode rank needs follow from that alone; its page order does not
/// change who writes it.
parallel_layout decode_layout_like(const parallel_layout& prefill, int32_t total_layers,
                                   int32_t tp_size, int32_t tp_rank);

/// The layout a rank that declares none holds, implied by a rank of the
/// same model that declares one: the same model shape at the undeclared
/// rank's TP size and rank, one PP stage holding every layer its KV
/// buffers hold. Only when those buffers are that model's pages (their
/// count and page bytes), else why not. SGLang's decode ranks name no head
/// counts outside its staging path; at equal TP they need none.
caf::expected<parallel_layout> implied_layout(const parallel_layout& declared, int32_t tp_size,
                                              int32_t tp_rank,
                                              const std::vector<paged_buffer>& kv);

/// The decode TP ranks (of `decode_tp`) that prefill rank `me` of `group`
/// writes in a room; empty: a dummy, which moves nothing and concludes with
/// the room. The same refusals as `map_decode_rank`.
caf::expected<std::vector<int32_t>> prefill_targets(const std::vector<parallel_layout>& group,
                                                    const parallel_layout& me, int32_t decode_tp);

/// The writes prefill rank `src` moves into one decode rank for a chunk:
/// its slices of `m` for every page pair (src_pages[i] -> dst_pages[i]), as
/// addresses in the two registered memories. Writes that meet on both sides
/// coalesce (whole-page slices of consecutive pages become one). Every
/// buffer and index is checked first (page sizes must be what the layouts
/// say); nothing is planned partially.
///
/// With `strided` (for a data plane with `backend_caps::strided_writes`),
/// a buffer whose page slices are several of one length at fixed strides
/// (an NHD page's token rows) goes there instead: one strided write a page,
/// merged across pages whose rows continue the stride. What it stands for
/// is exactly the writes planned without it (rank_mapping_test).
caf::expected<std::vector<write_op>>
plan_mapped_writes(const decode_mapping& m, const prefill_place& src,
                   const parallel_layout& src_layout, const parallel_layout& dst_layout,
                   const memory_layout& src_mem, const memory_layout& dst_mem,
                   const std::vector<int64_t>& src_pages, const std::vector<int64_t>& dst_pages,
                   std::vector<strided_write>* strided = nullptr);

/// One part of a room: what one prefill rank writes into one decode rank.
/// Prefill plans each chunk's batch with it; decode plans the whole part
/// with it to hash what landed (any valid source pages will do: where the
/// bytes land depends on the decode side alone).
struct part_spec {
  const memory_layout* src_mem = nullptr;
  const memory_layout* dst_mem = nullptr;
  /// Declared layouts on both sides: the decode rank's mapping, the
  /// source's place in it and both layouts. Null: the one source of the
  /// decode rank's TP slot writes whole pages.
  const decode_mapping* mapping = nullptr;
  prefill_place src_place;
  const parallel_layout* src_parallel = nullptr;
  const parallel_layout* dst_parallel = nullptr;
  /// The source writes the room's aux slot and state pages (the mapping's
  /// aux source; always without a mapping).
  bool sends_aux() const noexcept {
    return mapping == nullptr || mapping->aux_source == src_place;
  }
};

/// The writes of `part` for the KV page pairs src_pages[i] -> dst_pages[i]
/// and, with `tail` (the last chunk) and when the source sends them, its
/// state pages (src_state[i] -> dst_state[i]) and aux slot (src_aux ->
/// dst_aux), which stay last: `aux_ops` says how many of the last writes
/// carry aux data. Nothing is planned partially; the error names the input.
/// `strided`: as for `plan_mapped_writes` (KV writes only; cleared first).
caf::expected<std::vector<write_op>>
plan_part(const part_spec& part, const std::vector<int64_t>& src_pages,
          const std::vector<int64_t>& dst_pages, bool tail, int64_t src_aux, int64_t dst_aux,
          const std::vector<int64_t>& src_state, const std::vector<int64_t>& dst_state,
          uint32_t& aux_ops, std::vector<strided_write>* strided = nullptr);

} // namespace kvroom
