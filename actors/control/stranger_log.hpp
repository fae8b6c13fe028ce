#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvroom/actors/control/link_timing.hpp"

namespace kvroom {

/// How often a rank's control plane writes about strangers: at most one
/// line per `link_timing::stranger_log_ms`, the messages dropped in between
/// counted into the next line. A flood of bad messages costs a counter
/// each, not a log line each. Time is passed in.
class stranger_log {
public:
  /// A stranger's message was dropped at `now_ms`: how many went unlogged
  /// since the last line when this one is to be written, else nothing.
  std::optional<uint64_t> note(uint64_t now_ms) noexcept {
    if (logged_ && now_ms - last_ms_ < link_timing::stranger_log_ms) {
      ++unlogged_;
      return std::nullopt;
    }
    auto before = unlogged_;
    logged_ = true;
    last_ms_ = now_ms;
    unlogged_ = 0;
    return before;
  }

  /// The line's tail for `unlogged` messages not written about.
  static std::string more(uint64_t unlogged) {
    return unlogged == 0 ? std::string{}
                         : " (and " + std::to_string(unlogged) + " more since the last such line)";
  }

private:
  bool logged_ = false;
  uint64_t last_ms_ = 0;
  uint64_t unlogged_ = 0;
};

} // namespace kvroom
