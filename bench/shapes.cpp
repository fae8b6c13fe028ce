#include "shapes.hpp"

#include <algorithm>
#include <cstring>

namespace kvroom::bench {

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Llama-3-8B-like: 32 layers x K/V, pages of 16 tokens x 8 KV heads / tp x
/// 128 dims x bf16.
kv_shape realistic_shape(int tp, int64_t slots, int64_t pages_per_room) {
  kv_shape s;
  s.num_buffers = 64;
  s.page_size_bytes = static_cast<uint64_t>(16 * (8 / tp) * 128 * 2);
  s.num_pages = static_cast<uint64_t>(slots * pages_per_room);
  s.num_aux = 1;
  s.aux_slots = static_cast<uint64_t>(slots);
  s.aux_item_bytes = 256;
  return s;
}

kv_shape tiny_shape(int64_t slots, int64_t layers) {
  kv_shape s;
  s.num_buffers = static_cast<uint32_t>(2 * layers);
  s.page_size_bytes = 256;
  s.num_pages = static_cast<uint64_t>(slots);
  s.num_aux = 1;
  s.aux_slots = static_cast<uint64_t>(slots);
  s.aux_item_bytes = 64;
  return s;
}

/// Mean seconds of one single-thread memcpy of `ops`' bytes, repeated for
/// `seconds` (the same method the transport is measured with).
uint64_t clock_stride(uint64_t bytes) {
  constexpr uint64_t between_reads = 1 << 20;
  return bytes == 0 ? 1 : std::max<uint64_t>(1, between_reads / bytes);
}

double memcpy_seconds(const std::vector<write_op>& ops, double seconds) {
  uint64_t bytes = 0;
  for (auto& op : ops)
    bytes += op.size_bytes;
  auto stride = clock_stride(bytes);
  uint64_t reps = 0;
  auto t0 = clock_type::now();
  do {
    for (uint64_t i = 0; i < stride; ++i)
      for (auto& op : ops)
        std::memcpy(reinterpret_cast<void*>(op.dst_addr),
                    reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
    reps += stride;
  } while (since(t0) < seconds);
  return since(t0) / static_cast<double>(reps);
}

} // namespace kvroom::bench
