#pragma once

#include <cstdint>
#include <string>

#include "kvroom/api/config.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"

namespace kvroom {

/// What one call did to the room; lets the actor log late messages at debug
/// and decide whether to notify anyone.
enum class fsm_result : uint8_t {
  changed,           ///< the state moved (or the room concluded)
  unchanged,         ///< already in that state
  ignored_backward,  ///< a non-terminal state behind the current one
  ignored_terminal,  ///< the room concluded already; first conclusion stays
  ignored_cleared,   ///< the room was cleared; nothing resurrects it
};

std::string to_string(fsm_result x);

/// The decision logic of one bootstrap room on one rank, with no actor
/// runtime: the room actor feeds it messages and timer ticks.
///
/// Invariants (docs/DESIGN.md): non-terminal states only move forward; Failed
/// overrides any non-terminal state; the first conclusion wins and keeps its
/// first root cause; a cleared room ignores everything; every non-terminal
/// state has a deadline. Time is passed in (`now_ms`, any monotonic origin)
/// so tests need no clock.
class room_fsm {
public:
  room_fsm(room_id room, rank_ref self, room_timeouts timeouts,
           uint64_t now_ms);

  room_id room() const noexcept {
    return room_;
  }

  kv_poll state() const noexcept {
    return state_;
  }

  bool cleared() const noexcept {
    return cleared_;
  }

  bool concluded() const noexcept {
    return is_terminal(state_);
  }

  /// The root cause; meaningful only when `state() == kv_poll::failed`.
  const kv_transfer_error& failure() const noexcept {
    return failure_;
  }

  /// When the current state times out; 0 once terminal or cleared.
  uint64_t deadline_ms() const noexcept {
    return deadline_ms_;
  }

  /// Moves forward to a non-terminal state (asserts `next` is non-terminal).
  fsm_result advance(kv_poll next, uint64_t now_ms);

  /// Concludes as Success.
  fsm_result succeed();

  /// Concludes as Failed with this rank as the origin, of class `cause`.
  fsm_result fail_local(std::string reason, failure_cause cause);

  /// The class of a timeout in the current state.
  failure_cause timeout_cause() const noexcept;

  /// Concludes as Failed with a root cause from another rank; the origin's
  /// reason and rank are kept and `is_from_another_rank` is set.
  fsm_result fail_remote(const kv_transfer_error& err);

  /// True when the current non-terminal state ran past its deadline.
  bool expired(uint64_t now_ms) const noexcept {
    return deadline_ms_ != 0 && now_ms >= deadline_ms_;
  }

  /// What a timeout at `now_ms` would say: the state, how long, the limit
  /// and what the room waited for.
  std::string timeout_reason(uint64_t now_ms) const;

  /// Fails the room if its deadline has passed; a tick before the deadline,
  /// or after conclusion, changes nothing.
  fsm_result tick(uint64_t now_ms);

  /// Releases the room for good.
  fsm_result clear();

private:
  fsm_result conclude_failed(kv_transfer_error err);
  uint32_t timeout_of(kv_poll x) const noexcept;

  room_id room_;
  rank_ref self_;
  room_timeouts timeouts_;
  kv_poll state_ = kv_poll::bootstrapping;
  bool cleared_ = false;
  uint64_t entered_ms_ = 0;
  uint64_t deadline_ms_ = 0;
  kv_transfer_error failure_;
};

} // namespace kvroom
