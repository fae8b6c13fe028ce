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

bool strided_write::span(bool src, uint64_t& out) const noexcept {
  if (count == 0 || size_bytes == 0)
    return false;
  uint64_t reach = 0;
  if (__builtin_mul_overflow(count - 1, src ? src_stride : dst_stride, &reach)
      || __builtin_add_overflow(reach, size_bytes, &out))
    return false;
  uint64_t end = 0;
  return !__builtin_add_overflow(src ? src_addr : dst_addr, out, &end);
}

uint64_t write_batch::total_bytes() const noexcept {
  uint64_t sum = 0;
  for (auto& op : ops)
    sum += op.size_bytes;
  for (auto& w : strided)
    sum += w.total_bytes();
  return sum;
}

write_batch expand_strided(const write_batch& batch) {
  // Every other field as it is, including any added later; the writes anew.
  write_batch out = batch;
  out.strided.clear();
  out.ops.clear();
  size_t n = batch.ops.size();
  for (auto& w : batch.strided)
    n += w.count;
  out.ops.reserve(n);
  for (auto& w : batch.strided)
    for (uint64_t k = 0; k < w.count; ++k)
      out.ops.push_back(
        write_op{w.src_addr + k * w.src_stride, w.dst_addr + k * w.dst_stride, w.size_bytes});
  out.ops.insert(out.ops.end(), batch.ops.begin(), batch.ops.end());
  return out;
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
