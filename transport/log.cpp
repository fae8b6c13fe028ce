#include "kvroom/transport/log.hpp"

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

void transport_warning(const std::string& text) {
  if (auto lg = spdlog::get("kvroom"))
    lg->warn("{}", text);
  else
    spdlog::warn("{}", text);
}

namespace {

struct window {
  uint64_t start_ms = 0;
  uint64_t suppressed = 0;
  uint64_t total = 0;
};

std::mutex& limited_mutex() {
  static std::mutex mtx;
  return mtx;
}

std::unordered_map<std::string, window>& limited_windows() {
  static std::unordered_map<std::string, window> windows;
  return windows;
}

} // namespace

std::vector<std::pair<std::string, uint64_t>> limited_warning_counts() {
  std::lock_guard<std::mutex> guard{limited_mutex()};
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& kvp : limited_windows())
    out.emplace_back(kvp.first, kvp.second.total);
  return out;
}

void transport_warning_limited(const char* kind, const std::string& text) {
  auto& mtx = limited_mutex();
  auto& windows = limited_windows();
  auto now = monotonic_ms();
  uint64_t suppressed = 0;
  {
    // Called from connection threads: the table is shared, hence the lock.
    std::lock_guard<std::mutex> guard{mtx};
    auto& w = windows[kind];
    ++w.total;
    if (w.start_ms != 0 && now - w.start_ms < 1000) {
      ++w.suppressed;
      return;
    }
    suppressed = w.suppressed;
    w.start_ms = now;
    w.suppressed = 0;
  }
  if (suppressed == 0)
    transport_warning(text);
  else
    transport_warning(text + " (and " + std::to_string(suppressed)
                      + " more like it in the last second)");
}

} // namespace kvroom::detail
