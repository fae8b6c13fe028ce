#include "kvroom/transport/log.hpp"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include <spdlog/spdlog.h>

namespace kvroom::detail {

void transport_warning(const std::string& text) {
  if (auto lg = spdlog::get("kvroom"))
    lg->warn("{}", text);
  else
    spdlog::warn("{}", text);
}

void transport_warning_limited(const char* kind, const std::string& text) {
  struct window {
    uint64_t start_ms = 0;
    uint64_t suppressed = 0;
  };
  static std::mutex mtx;
  static std::unordered_map<std::string, window> windows;
  using namespace std::chrono;
  auto now = static_cast<uint64_t>(
    duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
  uint64_t suppressed = 0;
  {
    // Called from connection threads: the table is shared, hence the lock.
    std::lock_guard<std::mutex> guard{mtx};
    auto& w = windows[kind];
    if (w.start_ms != 0 && now - w.start_ms < 1000) {
      ++w.suppressed;
      return;
    }
    suppressed = w.suppressed;
    w = window{now, 0};
  }
  if (suppressed == 0)
    transport_warning(text);
  else
    transport_warning(text + " (and " + std::to_string(suppressed)
                      + " more like it in the last second)");
}

} // namespace kvroom::detail
