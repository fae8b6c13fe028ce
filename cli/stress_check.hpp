#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::stress {

/// What a stress schedule did to one room.
enum class fault_kind : uint8_t {
  none,
  transfer,   ///< the data plane failed a batch (fault-injecting backend)
  abort,      ///< a scheduler aborted the room in some state
  kill_room,  ///< a room actor was killed mid-room
  outage,     ///< a rank process was lost: any single origin is fine
  // The same fault on every rank of a side at once: any single origin.
  bad_indices_all,  ///< every decode rank hands the same out-of-range index
  stall_all,        ///< every prefill rank's batches stall (timeouts together)
  abort_both,       ///< a prefill and a decode scheduler abort together
  /// Slow batches on every prefill rank and a decode abort while they move:
  /// the fence must keep the late bytes out of pages reused after Failed.
  late_write,
  /// One byte of a prefill slot's batch changed on its way (silent
  /// corruption): the integrity check fails the room, or without it the
  /// decode pages are wrong.
  flip,
};

std::string to_string(fault_kind x);

/// The fault a room got, and whether it actually fired (an abort or a kill
/// scheduled for a state the room never reached does not).
struct injected_fault {
  fault_kind kind = fault_kind::none;
  rank_id rank = -1;  ///< the expected origin; -1: any single origin
  std::string detail;
  bool fired = false;
};

/// One rank's view of one room at the end of a run.
struct rank_outcome {
  rank_ref rank;
  kv_poll state = kv_poll::bootstrapping;
  std::optional<kv_transfer_error> error;
};

/// Everything the checker needs about one room.
struct room_record {
  room_id room = 0;
  injected_fault fault;
  std::vector<rank_outcome> outcomes;
  /// For rooms that succeeded on decode: empty when the data is byte-exact,
  /// else where it is not.
  std::string data_error;
  /// Rank ids whose faults hit this room independently and at once (a lost
  /// process and a data-plane fault): each rank keeps the first it saw, so
  /// any of these may be the root cause, but only these.
  std::vector<rank_id> concurrent_origins;
};

/// A broken invariant, naming the room and the rank.
struct violation {
  room_id room = 0;
  rank_id rank = -1;
  std::string what;
};

std::string to_string(const violation& x);

/// Checks one room against kvroom's invariants:
/// - every rank reached a terminal state;
/// - no side has Success on one rank and Failed on another;
/// - a failed room has exactly one origin (`is_from_another_rank == false`)
///   among its ranks, and every other rank holds the same reason and origin
///   rank, propagated;
/// - the origin is the rank the fault was injected on; a room without a fired
///   fault does not fail;
/// - a room that succeeded on decode has byte-exact data.
std::vector<violation> check_room(const room_record& rec);

} // namespace kvroom::stress
