#include "kvroom/transport/host_id.hpp"

#include <fstream>
#include <functional>
#include <string>

namespace kvroom::detail {

uint64_t host_domain() {
  static uint64_t value = [] {
    std::ifstream in{"/proc/sys/kernel/random/boot_id"};
    std::string id;
    std::getline(in, id);
    return static_cast<uint64_t>(std::hash<std::string>{}(id.empty() ? "unknown" : id));
  }();
  return value;
}

} // namespace kvroom::detail
