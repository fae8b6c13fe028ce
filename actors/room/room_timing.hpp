#pragma once

#include <chrono>
#include <cstdint>

#include "kvroom/actors/room_fsm.hpp"
#include "kvroom/messages/clock.hpp"

namespace kvroom {

/// Every time rule of a room and of the manager's room tables, derived from
/// the rank's timeouts in one place. The room protocol and the tables take
/// time as an argument (tests pass it in); the actors read `now()` here and
/// nowhere else.
class room_timing {
public:
  // Implicit: a configuration's timeouts are all a room's timing needs.
  room_timing(room_timeouts t) : timeouts_(t) { // NOLINT
    // nop
  }

  room_timing() = default;

  const room_timeouts& timeouts() const noexcept {
    return timeouts_;
  }

  static uint64_t now() noexcept {
    return monotonic_ms();
  }

  /// How often a live room checks its deadlines (the manager's sweep): an
  /// eighth of the shortest timeout, within [1 ms, 2 s], so a timeout fires
  /// at most 12.5 % late while 10,000 long-lived rooms cost a few thousand
  /// messages a second.
  std::chrono::milliseconds tick() const noexcept;

  /// How long a rank that proposed a failure waits for the decider's answer
  /// before concluding alone.
  uint64_t decision_ms() const noexcept {
    return timeouts_.transferring_ms;
  }

  /// How long a prepared rank (its part done) waits for the commit: two
  /// transferring timeouts, so the rank that really hangs times out first.
  uint64_t prepared_ms() const noexcept {
    return 2ull * timeouts_.transferring_ms;
  }

  /// Longest a decode room holds its terminal state for a sender's fence.
  uint64_t fence_ms() const noexcept {
    return 2ull * timeouts_.transferring_ms;
  }

  /// How long a proposal waits for its room to open on the decider before
  /// that rank's manager decides it for the room. A room announces itself
  /// to its manager as its first act, so a room being opened is heard of
  /// within microseconds; the grace covers that with room to spare under
  /// load, and no more: the rank that proposed waits it out before its
  /// scheduler sees Failed.
  uint64_t unopened_grace_ms() const noexcept;

  /// How long a lost rank is remembered for rooms that open (or learn their
  /// counterpart) later.
  uint64_t lost_window_ms() const noexcept;

  /// How long a message for a room not opened yet stays parked.
  uint64_t parking_ms() const noexcept {
    return timeouts_.bootstrap_ms;
  }

  /// How long a decode room waits for the manager's answer when it asks for
  /// its prefill group (it asks again on a later tick).
  std::chrono::milliseconds group_query() const noexcept {
    return tick() * 4;
  }

private:
  room_timeouts timeouts_;
};

} // namespace kvroom
