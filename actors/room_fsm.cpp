#include "kvroom/actors/room_fsm.hpp"

#include "kvroom/messages/assert.hpp"

namespace kvroom {

std::string to_string(fsm_result x) {
  switch (x) {
    case fsm_result::changed: return "changed";
    case fsm_result::unchanged: return "unchanged";
    case fsm_result::ignored_backward: return "ignored_backward";
    case fsm_result::ignored_terminal: return "ignored_terminal";
    case fsm_result::ignored_cleared: return "ignored_cleared";
  }
  return "fsm_result(?)";
}

room_fsm::room_fsm(room_id room, rank_ref self, room_timeouts timeouts,
                   uint64_t now_ms)
  : room_(room), self_(self), timeouts_(timeouts), entered_ms_(now_ms) {
  KVROOM_ASSERT(timeouts.bootstrap_ms > 0 && timeouts.waiting_ms > 0
                && timeouts.transferring_ms > 0);
  deadline_ms_ = now_ms + timeouts_.bootstrap_ms;
}

uint32_t room_fsm::timeout_of(kv_poll x) const noexcept {
  switch (x) {
    case kv_poll::bootstrapping: return timeouts_.bootstrap_ms;
    case kv_poll::waiting_for_input: return timeouts_.waiting_ms;
    case kv_poll::transferring: return timeouts_.transferring_ms;
    default: return 0;
  }
}

fsm_result room_fsm::advance(kv_poll next, uint64_t now_ms) {
  KVROOM_ASSERT(!is_terminal(next));
  if (cleared_)
    return fsm_result::ignored_cleared;
  if (concluded())
    return fsm_result::ignored_terminal;
  if (next == state_)
    return fsm_result::unchanged;
  if (next < state_)
    return fsm_result::ignored_backward;
  state_ = next;
  entered_ms_ = now_ms;
  deadline_ms_ = now_ms + timeout_of(next);
  return fsm_result::changed;
}

fsm_result room_fsm::succeed() {
  if (cleared_)
    return fsm_result::ignored_cleared;
  if (concluded())
    return fsm_result::ignored_terminal;
  state_ = kv_poll::success;
  deadline_ms_ = 0;
  return fsm_result::changed;
}

fsm_result room_fsm::conclude_failed(kv_transfer_error err) {
  if (cleared_)
    return fsm_result::ignored_cleared;
  if (concluded())
    return fsm_result::ignored_terminal;
  state_ = kv_poll::failed;
  deadline_ms_ = 0;
  failure_ = std::move(err);
  return fsm_result::changed;
}

fsm_result room_fsm::fail_local(std::string reason, failure_cause cause) {
  return conclude_failed(
    kv_transfer_error{room_, std::move(reason), false, self_.id, cause});
}

failure_cause room_fsm::timeout_cause() const noexcept {
  switch (state_) {
    case kv_poll::bootstrapping:
      return failure_cause::timeout_bootstrapping;
    case kv_poll::waiting_for_input:
      return failure_cause::timeout_waiting;
    default:
      return failure_cause::timeout_transferring;
  }
}

fsm_result room_fsm::fail_remote(const kv_transfer_error& err) {
  auto copy = err;
  copy.bootstrap_room = room_;
  copy.is_from_another_rank = true;
  return conclude_failed(std::move(copy));
}

std::string room_fsm::timeout_reason(uint64_t now_ms) const {
  std::string reason = to_string(self_.side);
  reason += " room timed out in ";
  reason += to_string(state_);
  reason += " after ";
  reason += std::to_string(now_ms - entered_ms_);
  reason += " ms (limit ";
  reason += std::to_string(timeout_of(state_));
  reason += " ms)";
  switch (state_) {
    case kv_poll::bootstrapping:
      reason += self_.side == role::prefill
                  ? ": no decode destination registered"
                  : ": prefill ranks not resolved";
      break;
    case kv_poll::waiting_for_input:
      reason += self_.side == role::prefill ? ": no KV indices sent"
                                            : ": no data arrived";
      break;
    default:
      reason += ": transfer did not complete";
      break;
  }
  return reason;
}

fsm_result room_fsm::tick(uint64_t now_ms) {
  if (cleared_)
    return fsm_result::ignored_cleared;
  if (concluded())
    return fsm_result::ignored_terminal;
  if (!expired(now_ms))
    return fsm_result::unchanged;
  return fail_local(timeout_reason(now_ms), timeout_cause());
}

fsm_result room_fsm::clear() {
  if (cleared_)
    return fsm_result::ignored_cleared;
  cleared_ = true;
  deadline_ms_ = 0;
  return fsm_result::changed;
}

} // namespace kvroom
