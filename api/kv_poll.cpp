#include "kvroom/api/kv_poll.hpp"

namespace kvroom {

namespace {

constexpr const char* names[] = {"failed", "bootstrapping", "waiting_for_input",
                                 "transferring", "success"};

} // namespace

std::string to_string(kv_poll x) {
  auto i = static_cast<size_t>(x);
  return i < 5 ? names[i] : "kv_poll(" + std::to_string(i) + ")";
}

bool from_string(const std::string& str, kv_poll& x) {
  for (size_t i = 0; i < 5; ++i) {
    if (str == names[i]) {
      x = static_cast<kv_poll>(i);
      return true;
    }
  }
  return false;
}

} // namespace kvroom
