#include "kvroom/api/descriptors.hpp"

namespace kvroom {

std::string to_string(mem_kind x) {
  return x == mem_kind::host ? "host" : "device";
}

bool mem_desc::overlaps(const mem_desc& other) const noexcept {
  if (other.device_id != device_id || size_bytes == 0
      || other.size_bytes == 0)
    return false;
  return other.addr < addr + size_bytes && addr < other.addr + other.size_bytes;
}

uint64_t write_batch::total_bytes() const noexcept {
  uint64_t sum = 0;
  for (auto& op : ops)
    sum += op.size_bytes;
  return sum;
}

uint64_t read_batch::total_bytes() const noexcept {
  uint64_t sum = 0;
  for (auto& op : ops)
    sum += op.size_bytes;
  return sum;
}

int32_t kv_device_id(const memory_layout& x) noexcept {
  return x.kv.empty() ? -1 : x.kv.front().mem.device_id;
}

int32_t aux_device_id(const memory_layout& x) noexcept {
  return x.aux.empty() ? kv_device_id(x) : x.aux.front().mem.device_id;
}

} // namespace kvroom
