#include "actors/host_kv_cache.hpp"

#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "messages/assert.hpp"

namespace kvroom {

namespace {

constexpr uint64_t alignment = 4096;

uint64_t round_up(uint64_t x) {
  return (x + alignment - 1) / alignment * alignment;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Byte `offset` of the room's `index`-th page (or aux item) in `buffer`.
uint8_t pattern(room_id room, uint64_t buffer, uint64_t index,
                uint64_t offset) {
  auto word = splitmix64(room * 0x100000001b3ULL ^ (buffer << 48)
                         ^ (index << 20) ^ (offset >> 3));
  return static_cast<uint8_t>(word >> ((offset & 7) * 8));
}

uint8_t* allocate(uint64_t bytes) {
  if (bytes == 0)
    return nullptr;
  auto* ptr = static_cast<uint8_t*>(std::aligned_alloc(alignment, round_up(bytes)));
  KVROOM_ASSERT(ptr != nullptr);
  return ptr;
}

} // namespace

host_kv_cache::host_kv_cache(const kv_shape& shape) : shape_(shape) {
  kv_bytes_ = shape.num_buffers * shape.num_pages * shape.page_size_bytes;
  aux_bytes_ = shape.num_aux * shape.aux_slots * shape.aux_item_bytes;
  KVROOM_ASSERT(kv_bytes_ > 0);
  kv_ = allocate(kv_bytes_);
  aux_ = allocate(aux_bytes_);
  fill(0);
}

host_kv_cache::~host_kv_cache() {
  std::free(kv_);
  std::free(aux_);
}

memory_layout host_kv_cache::layout() const {
  memory_layout out;
  auto per_buffer = shape_.num_pages * shape_.page_size_bytes;
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    out.kv.push_back(paged_buffer{
      mem_desc{reinterpret_cast<uint64_t>(kv_ + b * per_buffer), per_buffer, -1},
      shape_.page_size_bytes});
  auto per_aux = shape_.aux_slots * shape_.aux_item_bytes;
  for (uint32_t b = 0; b < shape_.num_aux; ++b)
    out.aux.push_back(paged_buffer{
      mem_desc{reinterpret_cast<uint64_t>(aux_ + b * per_aux), per_aux, -1},
      shape_.aux_item_bytes});
  return out;
}

uint8_t* host_kv_cache::page(uint32_t buffer, uint64_t index) noexcept {
  return kv_ + (buffer * shape_.num_pages + index) * shape_.page_size_bytes;
}

uint8_t* host_kv_cache::aux(uint32_t buffer, uint64_t slot) noexcept {
  return aux_ + (buffer * shape_.aux_slots + slot) * shape_.aux_item_bytes;
}

void host_kv_cache::fill(uint8_t byte) {
  std::memset(kv_, byte, kv_bytes_);
  if (aux_)
    std::memset(aux_, byte, aux_bytes_);
}

void host_kv_cache::write_room(room_id room, const std::vector<int64_t>& pages,
                               int64_t aux_slot) {
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    for (size_t i = 0; i < pages.size(); ++i) {
      auto* p = page(b, static_cast<uint64_t>(pages[i]));
      for (uint64_t j = 0; j < shape_.page_size_bytes; ++j)
        p[j] = pattern(room, b, i, j);
    }
  for (uint32_t b = 0; b < shape_.num_aux; ++b) {
    auto* p = aux(b, static_cast<uint64_t>(aux_slot));
    for (uint64_t j = 0; j < shape_.aux_item_bytes; ++j)
      p[j] = pattern(room, 1000 + b, 0, j);
  }
}

bool host_kv_cache::check_room(room_id room, const std::vector<int64_t>& pages,
                               int64_t aux_slot, std::string* why) const {
  auto* self = const_cast<host_kv_cache*>(this);
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    for (size_t i = 0; i < pages.size(); ++i) {
      auto* p = self->page(b, static_cast<uint64_t>(pages[i]));
      for (uint64_t j = 0; j < shape_.page_size_bytes; ++j)
        if (p[j] != pattern(room, b, i, j)) {
          if (why)
            *why = "room " + std::to_string(room) + ": buffer "
                   + std::to_string(b) + " page " + std::to_string(pages[i])
                   + " byte " + std::to_string(j) + " differs";
          return false;
        }
    }
  for (uint32_t b = 0; b < shape_.num_aux; ++b) {
    auto* p = self->aux(b, static_cast<uint64_t>(aux_slot));
    for (uint64_t j = 0; j < shape_.aux_item_bytes; ++j)
      if (p[j] != pattern(room, 1000 + b, 0, j)) {
        if (why)
          *why = "room " + std::to_string(room) + ": aux buffer "
                 + std::to_string(b) + " slot " + std::to_string(aux_slot)
                 + " byte " + std::to_string(j) + " differs";
        return false;
      }
  }
  return true;
}

uint64_t host_kv_cache::count_changed_outside(const std::vector<int64_t>& pages,
                                              int64_t aux_slot,
                                              uint8_t byte) const {
  std::unordered_set<int64_t> mine(pages.begin(), pages.end());
  auto* self = const_cast<host_kv_cache*>(this);
  uint64_t changed = 0;
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    for (uint64_t i = 0; i < shape_.num_pages; ++i) {
      if (mine.count(static_cast<int64_t>(i)) > 0)
        continue;
      auto* p = self->page(b, i);
      for (uint64_t j = 0; j < shape_.page_size_bytes; ++j)
        changed += p[j] != byte;
    }
  for (uint32_t b = 0; b < shape_.num_aux; ++b)
    for (uint64_t s = 0; s < shape_.aux_slots; ++s) {
      if (static_cast<int64_t>(s) == aux_slot)
        continue;
      auto* p = self->aux(b, s);
      for (uint64_t j = 0; j < shape_.aux_item_bytes; ++j)
        changed += p[j] != byte;
    }
  return changed;
}

} // namespace kvroom
