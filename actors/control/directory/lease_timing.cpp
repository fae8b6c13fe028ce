#include "kvroom/actors/control/directory/lease_timing.hpp"

#include <algorithm>

namespace kvroom {

lease_timing::lease_timing(uint32_t ttl_ms, uint32_t request_timeout_ms) noexcept
  : ttl_s_(std::max<int64_t>(2, (static_cast<int64_t>(ttl_ms) + 999) / 1000)),
    request_timeout_ms_(request_timeout_ms) {
  // nop
}

uint32_t lease_timing::call_timeout_ms() const noexcept {
  auto sixth = static_cast<uint32_t>(ttl_s_ * 1000 / 6);
  return std::max<uint32_t>(200, std::min(sixth, request_timeout_ms_));
}

lease_renewal::lease_renewal(lease_timing timing, uint64_t now_ms) noexcept
  : timing_(timing), due_ms_(now_ms + timing.renew_every_ms()), confirmed_ms_(now_ms) {
  // nop
}

lease_renewal::outcome lease_renewal::answered(int64_t ttl_s, uint64_t now_ms) noexcept {
  failures_ = 0;
  if (ttl_s <= 0) {
    // Until a new lease replaces it: try soon, the grant may fail too.
    due_ms_ = now_ms + timing_.retry_ms();
    return outcome::lost;
  }
  confirmed_ms_ = now_ms;
  due_ms_ = now_ms + timing_.renew_every_ms();
  return outcome::renewed;
}

bool lease_renewal::failed(uint64_t now_ms) noexcept {
  ++failures_;
  due_ms_ = now_ms + timing_.retry_ms();
  auto ttl_ms = static_cast<uint64_t>(timing_.ttl_s()) * 1000;
  if (failures_ == 1 || now_ms - warned_ms_ >= ttl_ms) {
    warned_ms_ = now_ms;
    return true;
  }
  return false;
}

void lease_renewal::replaced(uint64_t now_ms) noexcept {
  failures_ = 0;
  confirmed_ms_ = now_ms;
  due_ms_ = now_ms + timing_.renew_every_ms();
}

} // namespace kvroom
