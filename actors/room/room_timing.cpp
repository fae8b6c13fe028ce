#include "kvroom/actors/room/room_timing.hpp"

#include <algorithm>

namespace kvroom {

std::chrono::milliseconds room_timing::tick() const noexcept {
  auto& t = timeouts_;
  auto shortest = std::min({t.bootstrap_ms, t.waiting_ms, t.transferring_ms});
  return std::chrono::milliseconds{std::clamp<uint32_t>(shortest / 8, 1, 2000)};
}

uint64_t room_timing::unopened_grace_ms() const noexcept {
  auto ticks = 4 * static_cast<uint64_t>(tick().count());
  return std::min<uint64_t>(ticks, 500);
}

uint64_t room_timing::lost_window_ms() const noexcept {
  return std::min<uint64_t>(timeouts_.bootstrap_ms, 3000);
}

} // namespace kvroom
