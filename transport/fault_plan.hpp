#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvroom/messages/ids.hpp"

namespace kvroom {

/// Where the fault-injecting backend breaks a batch.
enum class fault_point : uint8_t {
  before_post,  ///< post() refuses the batch; nothing moves
  after_post,   ///< the bytes move, then the completion reports failure
  on_aux,       ///< only batches carrying aux data fail (before post)
  bad_completion,  ///< the bytes move, the completion carries an error
  stall,        ///< the batch never completes (a hung NIC or peer)
  slow,         ///< no failure: the bytes move only `slow_ms` after post, then
                ///< the batch completes (a slow link; exercises the fence)
  flip,         ///< no failure reported: one byte arrives changed (silent
                ///< corruption on the way; the integrity check's prey). The
                ///< source byte is changed while the batch is posted and
                ///< restored after: transports that read the source inside
                ///< `post` (local, shm, tcp) carry the change
};

std::string to_string(fault_point x);
bool from_string(const std::string& str, fault_point& x);

/// One room's batches failing at one point.
struct room_fault {
  room_id room = 0;
  fault_point point = fault_point::before_post;
};

/// Which batches the fault-injecting backend fails: those tagged with one of
/// `rooms` (at `point`) or named in `targeted` (at their own point), plus
/// each other batch with `probability` (at `point`), drawn from `seed` so
/// the same seed reproduces the same faults; and batches on broken
/// `paths`.
struct fault_plan {
  std::vector<room_id> rooms;
  std::vector<room_fault> targeted;
  double probability = 0.0;
  uint64_t seed = 1;
  fault_point point = fault_point::before_post;
  /// How long a `slow` batch waits before its bytes move.
  uint32_t slow_ms = 30;
  /// Broken paths: a batch sent on one of these fails at `path_point`
  /// with `path_probability` (1: the link is down), whatever room it
  /// carries. An entry is a transport name or the start of an endpoint
  /// address ("127.0.0.2:" is every port of that host). The faults above
  /// apply on every path.
  std::vector<std::string> paths;
  double path_probability = 1.0;
  fault_point path_point = fault_point::before_post;

  bool empty() const noexcept {
    return rooms.empty() && targeted.empty() && probability <= 0.0 && paths.empty();
  }
};

} // namespace kvroom
