#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "kvroom/api/config.hpp"
#include "kvroom/api/metrics.hpp"

namespace kvroom {

/// One data path's health (a path: one endpoint of one peer). Plain logic:
/// time is passed in, the owner locks. Errors gather in a window and rest
/// the path (`path_rules`); after any error, and after a rest, it is on
/// probation (`probing`: one batch at a time until one lands). A path is
/// never refused outright: a peer's last path carries batches even while
/// it rests (the sender asks for the least bad one), so a single path
/// behaves as if this did not exist.
class path_health {
public:
  path_state state(uint64_t now_ms) const noexcept;

  /// True when it may carry a batch now without being the last resort:
  /// healthy, or probing with no probe out. `take` sends that batch (a probe
  /// while probing: the next waits for its outcome).
  bool available(uint64_t now_ms) const noexcept;
  void take(uint64_t now_ms) noexcept;

  /// A batch on it landed: a probe makes it healthy again.
  void succeeded(uint64_t now_ms) noexcept;

  /// A batch on it failed for the path's sake (not refused by the peer);
  /// true when this error sent it to rest.
  bool failed(uint64_t now_ms, const path_rules& rules, std::string reason);

  /// When its current (or last) rest ends; 0 when it never rested.
  uint64_t rest_until() const noexcept {
    return rest_until_;
  }
  /// Length of the last rest, 0 when it never rested.
  uint32_t rest_ms() const noexcept {
    return rest_ms_;
  }
  const std::string& last_error() const noexcept {
    return last_error_;
  }
  uint64_t errors() const noexcept {
    return total_errors_;
  }

private:
  std::deque<uint64_t> recent_;  ///< error times within the window (bounded)
  uint64_t rest_until_ = 0;
  uint32_t rest_ms_ = 0;
  /// On probation (an error, or a rest that ended) until a batch lands.
  bool unproven_ = false;
  /// Its probation follows a rest: a failed probe rests it again.
  bool after_rest_ = false;
  bool probe_out_ = false;
  uint64_t healthy_since_ = 0;
  uint64_t total_errors_ = 0;
  std::string last_error_;
};

} // namespace kvroom
