#pragma once

#include "kvroom/transport/grants.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"

namespace kvroom {

/// Upper bound on the writes one chunk may plan; a chunk needing more is
/// refused (a limit on everything, and the backends' batch limits are below
/// it anyway).
constexpr size_t max_planned_writes = 1u << 20;

/// Plans the writes that move one chunk of a room: for every KV buffer
/// (layer), the (src page, dst page) pairs are coalesced into runs that are
/// contiguous on both sides, and all buffers go into one list. Aux slots are
/// appended last when `with_aux`.
///
/// Every index is checked against both layouts before anything is planned;
/// the first violation returns `errc::out_of_range` (or `invalid_argument`
/// for layouts that do not match) with a reason naming the index, buffer and
/// bound. Nothing is planned partially.
caf::expected<std::vector<write_op>>
plan_writes(const memory_layout& src, const memory_layout& dst,
            const std::vector<int64_t>& src_pages,
            const std::vector<int64_t>& dst_pages);

/// Plans the aux writes of a room: slot `src_index` of every src aux buffer
/// into slot `dst_index` of the matching dst aux buffer.
caf::expected<std::vector<write_op>>
plan_aux_writes(const memory_layout& src, const memory_layout& dst,
                int64_t src_index, int64_t dst_index);

/// Plans the state writes of a room (hybrid models): page `src_indices[i]`
/// of every src state buffer into page `dst_indices[i]` of the matching dst
/// state buffer. The two lists must be equally long; every index is checked
/// first.
caf::expected<std::vector<write_op>>
plan_state_writes(const memory_layout& src, const memory_layout& dst,
                  const std::vector<int64_t>& src_indices,
                  const std::vector<int64_t>& dst_indices);

/// Empty when `indices` fit every state buffer of `x` (and are given
/// exactly when it has state buffers), else why not.
std::string check_state_indices(const memory_layout& x, const std::vector<int64_t>& indices);

/// What a decode room grants the prefill rank that writes it: the pages
/// `kv_indices` of every KV buffer, slot `aux_index` of every aux buffer and
/// pages `state_indices` of every state buffer of `dst` (the same bytes
/// `plan_writes`/`plan_aux_writes`/`plan_state_writes` target), merged.
/// Indices outside the layout are skipped (init refused them).
std::vector<byte_range> room_grant(const memory_layout& dst, const std::vector<int64_t>& kv_indices,
                                   int64_t aux_index,
                                   const std::vector<int64_t>& state_indices = {});

} // namespace kvroom
