#pragma once

#include <cstdint>
#include <unordered_map>

#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

/// One rank's `failure_records` (room -> root cause, until the scheduler
/// clears the room) and the one place a conclusion is logged: once, where
/// the failure started (an error on decode, where the request is lost to
/// the user; a warning on prefill; info when the scheduler asked for it),
/// and at debug on every rank that learned it from another. Owned by the
/// rank's manager, whose mailbox serialises every access.
class failure_log {
public:
  explicit failure_log(rank_ref self) : self_(self) {
    // nop
  }

  /// Room `room` concluded `state` (`error`: its root cause when Failed;
  /// `requested`: the scheduler asked for it). Records and logs a failure.
  void concluded(room_id room, kv_poll state, const kv_transfer_error& error,
                 bool requested);

  /// The root cause of a Failed room not cleared yet.
  const kv_transfer_error* find(room_id room) const;

  /// The room was cleared: its record must not outlive it.
  void forget(room_id room) {
    records_.erase(room);
  }

  size_t size() const noexcept {
    return records_.size();
  }

  uint64_t successes() const noexcept {
    return successes_;
  }

  /// Failures that started on this rank.
  uint64_t origin_failures() const noexcept {
    return origins_;
  }

  /// Failures learned from another rank.
  uint64_t propagated_failures() const noexcept {
    return propagated_;
  }

private:
  rank_ref self_;
  std::unordered_map<room_id, kv_transfer_error> records_;
  uint64_t successes_ = 0;
  uint64_t origins_ = 0;
  uint64_t propagated_ = 0;
};

} // namespace kvroom
