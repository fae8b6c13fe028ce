#pragma once

// The rules of admission to a deployment's directory, one owner for both
// directories (the built-in registry and etcd): who may register, in which
// place, with which layout. Plain functions over the ranks registered.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvroom/api/errors.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// Why `candidate` cannot join a deployment of `ranks`, or "" when it fits:
/// the same KV buffers (count, page size), aux buffers (count, item size)
/// and, today, equal TP sizes across the whole deployment (each decode TP
/// rank is written by the prefill TP rank of the same index).
std::string layout_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate);

/// Why `candidate` cannot take its place (side, DP group, TP rank, PP
/// stage), or "" when the place is free or already its own: a live rank of
/// another id holds it. Two ranks in one place would each be sent the same
/// rooms' pages; the second is a misconfiguration or a replacement that came
/// before the directory saw the old rank go.
std::string place_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate);

struct admission_refused {
  errc code = errc::invalid_config;
  std::string why;
  /// A live rank holds the id or the place: on a directory with leases it
  /// is free once that rank's lease expires, so waiting may clear it.
  bool held = false;
  /// That rank's id (when `held`).
  rank_id holder = -1;
};

/// Whether `candidate` may register beside the live `ranks`, in this
/// order: its id held by another incarnation (invalid_config), its place
/// held (invalid_config), a layout that does not fit (incompatible), the
/// directory full (limit_reached; a rank registering again does not count).
std::optional<admission_refused> admission_refusal(const std::vector<rank_entry>& ranks,
                                                   const rank_entry& candidate,
                                                   uint32_t max_ranks);

} // namespace kvroom
