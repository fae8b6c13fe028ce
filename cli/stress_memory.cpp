#include "stress_memory.hpp"

#include <cstring>

namespace kvroom::cli {

namespace {

/// Freed decode pages and aux slots hold a canary until reused: a byte that
/// lands in them meanwhile is a late write of an earlier room.
uint8_t canary_of(int64_t index) {
  return static_cast<uint8_t>(0xA5 ^ (index * 31));
}

} // namespace

std::vector<int64_t> state_of(const kv_shape& sh, int64_t aux) {
  std::vector<int64_t> out;
  if (sh.num_state == 0 || aux < 0)
    return out;
  auto w = static_cast<int64_t>(sh.state_pages / sh.aux_slots);
  for (int64_t i = 0; i < w; ++i)
    out.push_back(aux * w + (w - 1 - i));
  return out;
}

void write_canary(host_kv_cache& mem, int64_t page, int64_t aux) {
  auto& sh = mem.shape();
  for (auto s : state_of(sh, aux))
    for (uint32_t b = 0; b < sh.num_state; ++b)
      std::memset(mem.state(b, static_cast<uint64_t>(s)), canary_of(aux), sh.state_page_bytes);
  if (page >= 0)
    for (uint32_t b = 0; b < sh.num_buffers; ++b)
      std::memset(mem.page(b, static_cast<uint64_t>(page)), canary_of(page),
                  sh.page_size_bytes);
  if (aux >= 0)
    for (uint32_t b = 0; b < sh.num_aux; ++b)
      std::memset(mem.aux(b, static_cast<uint64_t>(aux)), canary_of(aux),
                  sh.aux_item_bytes);
}

uint64_t canary_damage(host_kv_cache& mem, int64_t page, int64_t aux) {
  auto& sh = mem.shape();
  uint64_t n = 0;
  auto count = [&](const uint8_t* p, uint64_t len, uint8_t c) {
    for (uint64_t i = 0; i < len; ++i)
      n += p[i] != c ? 1 : 0;
  };
  if (page >= 0)
    for (uint32_t b = 0; b < sh.num_buffers; ++b)
      count(mem.page(b, static_cast<uint64_t>(page)), sh.page_size_bytes, canary_of(page));
  if (aux >= 0)
    for (uint32_t b = 0; b < sh.num_aux; ++b)
      count(mem.aux(b, static_cast<uint64_t>(aux)), sh.aux_item_bytes, canary_of(aux));
  for (auto s : state_of(sh, aux))
    for (uint32_t b = 0; b < sh.num_state; ++b)
      count(mem.state(b, static_cast<uint64_t>(s)), sh.state_page_bytes, canary_of(aux));
  return n;
}

room_id key(room_id room, int tp) {
  return room ^ (static_cast<room_id>(tp + 1) << 40);
}

} // namespace kvroom::cli
