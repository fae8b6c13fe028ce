#include "kvroom/transport/paths/path_health.hpp"

#include <algorithm>

namespace kvroom {

std::string to_string(path_state x) {
  switch (x) {
    case path_state::healthy: return "healthy";
    case path_state::resting: return "resting";
    case path_state::probing: return "probing";
  }
  return "path_state(?)";
}

path_state path_health::state(uint64_t now_ms) const noexcept {
  if (now_ms < rest_until_)
    return path_state::resting;
  return unproven_ ? path_state::probing : path_state::healthy;
}

bool path_health::available(uint64_t now_ms) const noexcept {
  switch (state(now_ms)) {
    case path_state::healthy: return true;
    case path_state::probing: return !probe_out_;
    default: return false;
  }
}

void path_health::take(uint64_t now_ms) noexcept {
  if (state(now_ms) == path_state::probing)
    probe_out_ = true;
}

void path_health::succeeded(uint64_t now_ms) noexcept {
  if (unproven_ && now_ms >= rest_until_) {
    unproven_ = false;
    if (after_rest_)
      healthy_since_ = now_ms;
    after_rest_ = false;
  }
  probe_out_ = false;
}

bool path_health::failed(uint64_t now_ms, const path_rules& rules, std::string reason) {
  ++total_errors_;
  last_error_ = std::move(reason);
  probe_out_ = false;
  auto st = state(now_ms);
  if (st == path_state::resting)
    return false; // a batch sent as the last resort: the rest stands
  // A probe after a rest that fails rests the path again at once. Else
  // errors gather in the window; below the limit the path is on probation
  // (one batch at a time until one lands), so a dead link costs one batch
  // per path while its errors gather, not every batch sent meanwhile.
  if (!after_rest_) {
    recent_.push_back(now_ms);
    while (!recent_.empty() && recent_.front() + rules.error_window_ms <= now_ms)
      recent_.pop_front();
    if (recent_.size() < std::max<uint32_t>(rules.errors_to_rest, 1)) {
      unproven_ = true;
      return false;
    }
  }
  recent_.clear();
  // Doubling while it keeps failing: a path healthy for the longest rest
  // starts over from the first.
  bool again = rest_ms_ > 0 && (after_rest_ || now_ms < healthy_since_ + rules.max_rest_ms);
  rest_ms_ = again ? std::min<uint32_t>(rest_ms_ * 2, rules.max_rest_ms) : rules.first_rest_ms;
  rest_until_ = now_ms + rest_ms_;
  unproven_ = true;
  after_rest_ = true;
  return true;
}

} // namespace kvroom
