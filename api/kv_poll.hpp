#pragma once

#include <cstdint>
#include <string>

namespace kvroom {

/// State of one bootstrap room as the scheduler sees it.
///
/// The numbers are SGLang's `KVPoll`, so a MIN over ranks lets one Failed
/// win and a scheduler written against SGLang reads them unchanged.
enum class kv_poll : uint8_t {
  failed = 0,
  bootstrapping = 1,
  waiting_for_input = 2,
  transferring = 3,
  success = 4,
};

/// True for Failed and Success: states a room never leaves.
constexpr bool is_terminal(kv_poll x) noexcept {
  return x == kv_poll::failed || x == kv_poll::success;
}

/// Lowercase name, e.g. "waiting_for_input".
std::string to_string(kv_poll x);

/// Parses what `to_string(kv_poll)` prints; false for anything else.
bool from_string(const std::string& str, kv_poll& x);

} // namespace kvroom
