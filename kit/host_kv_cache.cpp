#include "kvroom/kit/host_kv_cache.hpp"
#include "kvroom/api/secret.hpp"

#include <cerrno>

#include <cstdlib>
#include <algorithm>
#include <atomic>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstring>
#include <unordered_set>

#include "kvroom/messages/assert.hpp"

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

/// Word `w` (bytes 8w..8w+7) of the room's `index`-th page (or aux item) in
/// `buffer`.
uint64_t pattern_word(room_id room, uint64_t buffer, uint64_t index,
                      uint64_t w) {
  return splitmix64(room * 0x100000001b3ULL ^ (buffer << 48) ^ (index << 32)
                    ^ w);
}

void write_pattern(uint8_t* dst, uint64_t len, room_id room, uint64_t buffer,
                   uint64_t index) {
  for (uint64_t off = 0, w = 0; off < len; off += 8, ++w) {
    auto word = pattern_word(room, buffer, index, w);
    std::memcpy(dst + off, &word, std::min<uint64_t>(8, len - off));
  }
}

/// Offset of the first byte that differs from the pattern, or `len`.
uint64_t check_pattern(const uint8_t* src, uint64_t len, room_id room,
                       uint64_t buffer, uint64_t index) {
  for (uint64_t off = 0, w = 0; off < len; off += 8, ++w) {
    auto word = pattern_word(room, buffer, index, w);
    auto n = std::min<uint64_t>(8, len - off);
    if (std::memcmp(src + off, &word, n) != 0)
      for (uint64_t j = 0; j < n; ++j)
        if (src[off + j] != reinterpret_cast<const uint8_t*>(&word)[j])
          return off + j;
  }
  return len;
}

uint8_t* allocate(uint64_t bytes) {
  if (bytes == 0)
    return nullptr;
  auto* ptr = static_cast<uint8_t*>(std::aligned_alloc(alignment, round_up(bytes)));
  KVROOM_ASSERT(ptr != nullptr);
  return ptr;
}

uint8_t* allocate_shared(uint64_t bytes, std::vector<std::string>& names) {
  if (bytes == 0)
    return nullptr;
  static std::atomic<int> counter{0};
  // The pid lets operators (and tests) remove a killed rank's segments; the
  // random part makes the name unguessable to other local users.
  static const char hex[] = "0123456789abcdef";
  std::string salt;
  for (unsigned char c : make_nonce().substr(0, 8)) {
    salt.push_back(hex[c >> 4]);
    salt.push_back(hex[c & 15]);
  }
  auto name = "/kvroom-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-"
              + salt;
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {
    // The name carries this process's id, so whoever made it is dead (a
    // killed process cannot unlink its segments): it is stale, replace it.
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  KVROOM_ASSERT(fd >= 0);
  KVROOM_ASSERT(::ftruncate(fd, static_cast<off_t>(round_up(bytes))) == 0);
  void* ptr = ::mmap(nullptr, round_up(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  KVROOM_ASSERT(ptr != MAP_FAILED);
  names.push_back(name);
  return static_cast<uint8_t*>(ptr);
}

} // namespace

host_kv_cache::host_kv_cache(const kv_shape& shape, bool shared)
  : shape_(shape), shared_(shared) {
  kv_bytes_ = shape.num_buffers * shape.num_pages * shape.page_size_bytes;
  aux_bytes_ = shape.num_aux * shape.aux_slots * shape.aux_item_bytes;
  KVROOM_ASSERT(kv_bytes_ > 0);
  kv_ = shared ? allocate_shared(kv_bytes_, segments_) : allocate(kv_bytes_);
  aux_ = shared ? allocate_shared(aux_bytes_, segments_) : allocate(aux_bytes_);
  state_bytes_ = shape.num_state * shape.state_pages * shape.state_page_bytes;
  if (state_bytes_ > 0)
    state_ = shared ? allocate_shared(state_bytes_, segments_) : allocate(state_bytes_);
  fill(0);
}

host_kv_cache::~host_kv_cache() {
  if (shared_) {
    ::munmap(kv_, round_up(kv_bytes_));
    if (aux_)
      ::munmap(aux_, round_up(aux_bytes_));
    if (state_)
      ::munmap(state_, round_up(state_bytes_));
    for (auto& name : segments_)
      ::shm_unlink(name.c_str());
    return;
  }
  std::free(kv_);
  std::free(aux_);
  std::free(state_);
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
  auto per_state = shape_.state_pages * shape_.state_page_bytes;
  for (uint32_t b = 0; b < shape_.num_state; ++b)
    out.state.push_back(paged_buffer{
      mem_desc{reinterpret_cast<uint64_t>(state_ + b * per_state), per_state, -1},
      shape_.state_page_bytes});
  return out;
}

uint8_t* host_kv_cache::state(uint32_t buffer, uint64_t index) noexcept {
  return state_ + (buffer * shape_.state_pages + index) * shape_.state_page_bytes;
}

void host_kv_cache::write_state(room_id room, const std::vector<int64_t>& indices) {
  for (uint32_t b = 0; b < shape_.num_state; ++b)
    for (size_t i = 0; i < indices.size(); ++i)
      write_pattern(state(b, static_cast<uint64_t>(indices[i])), shape_.state_page_bytes, room,
                    2000 + b, i);
}

bool host_kv_cache::check_state(room_id room, const std::vector<int64_t>& indices,
                                std::string* why) const {
  auto* self = const_cast<host_kv_cache*>(this);
  for (uint32_t b = 0; b < shape_.num_state; ++b)
    for (size_t i = 0; i < indices.size(); ++i) {
      auto len = shape_.state_page_bytes;
      auto at = check_pattern(self->state(b, static_cast<uint64_t>(indices[i])), len, room,
                              2000 + b, i);
      if (at != len) {
        if (why)
          *why = "room " + std::to_string(room) + ": state buffer " + std::to_string(b)
                 + " page " + std::to_string(indices[i]) + " byte " + std::to_string(at)
                 + " differs";
        return false;
      }
    }
  return true;
}

uint64_t host_kv_cache::count_state_changed_outside(const std::vector<int64_t>& indices,
                                                    uint8_t byte) const {
  std::unordered_set<int64_t> mine(indices.begin(), indices.end());
  auto* self = const_cast<host_kv_cache*>(this);
  uint64_t changed = 0;
  for (uint32_t b = 0; b < shape_.num_state; ++b)
    for (uint64_t i = 0; i < shape_.state_pages; ++i) {
      if (mine.count(static_cast<int64_t>(i)) > 0)
        continue;
      auto* p = self->state(b, i);
      for (uint64_t j = 0; j < shape_.state_page_bytes; ++j)
        changed += p[j] != byte;
    }
  return changed;
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
  if (state_)
    std::memset(state_, byte, state_bytes_);
}

void host_kv_cache::write_room(room_id room, const std::vector<int64_t>& pages,
                               int64_t aux_slot) {
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    for (size_t i = 0; i < pages.size(); ++i)
      write_pattern(page(b, static_cast<uint64_t>(pages[i])),
                    shape_.page_size_bytes, room, b, i);
  for (uint32_t b = 0; b < shape_.num_aux; ++b)
    write_pattern(aux(b, static_cast<uint64_t>(aux_slot)),
                  shape_.aux_item_bytes, room, 1000 + b, 0);
}

bool host_kv_cache::check_room_buffers(room_id room, const std::vector<int64_t>& pages,
                                       const std::vector<int32_t>& buffers,
                                       std::string* why) const {
  auto* self = const_cast<host_kv_cache*>(this);
  for (auto buffer : buffers) {
    if (buffer < 0 || static_cast<uint32_t>(buffer) >= shape_.num_buffers) {
      if (why)
        *why = "no KV buffer " + std::to_string(buffer);
      return false;
    }
    auto b = static_cast<uint32_t>(buffer);
    for (size_t i = 0; i < pages.size(); ++i) {
      auto len = shape_.page_size_bytes;
      auto at = check_pattern(self->page(b, static_cast<uint64_t>(pages[i])),
                              len, room, b, i);
      if (at != len) {
        if (why)
          *why = "room " + std::to_string(room) + ": buffer "
                 + std::to_string(b) + " page " + std::to_string(pages[i])
                 + " byte " + std::to_string(at) + " differs";
        return false;
      }
    }
  }
  return true;
}

bool host_kv_cache::check_room(room_id room, const std::vector<int64_t>& pages,
                               int64_t aux_slot, std::string* why) const {
  auto* self = const_cast<host_kv_cache*>(this);
  std::vector<int32_t> every(shape_.num_buffers);
  for (uint32_t b = 0; b < shape_.num_buffers; ++b)
    every[b] = static_cast<int32_t>(b);
  if (!check_room_buffers(room, pages, every, why))
    return false;
  for (uint32_t b = 0; b < shape_.num_aux; ++b) {
    auto len = shape_.aux_item_bytes;
    auto at = check_pattern(self->aux(b, static_cast<uint64_t>(aux_slot)), len,
                            room, 1000 + b, 0);
    if (at != len) {
      if (why)
        *why = "room " + std::to_string(room) + ": aux buffer "
               + std::to_string(b) + " slot " + std::to_string(aux_slot)
               + " byte " + std::to_string(at) + " differs";
      return false;
    }
  }
  return true;
}

namespace {

/// Visits every head slice of the pages of a room as `x` holds them: (its
/// address in this cache, the seed of its pattern).
template <class F>
void for_each_head(host_kv_cache& cache, const std::vector<int64_t>& pages,
                   const parallel_layout& x, F f) {
  for (int32_t l = 0; l < x.layers; ++l)
    for (int32_t kv = 0; kv < x.buffers_per_layer(); ++kv) {
      auto n = x.buffers_per_layer();
      auto b = static_cast<uint32_t>(n * l + kv);
      auto global = static_cast<uint64_t>(n * (x.first_layer + l) + kv);
      for (size_t i = 0; i < pages.size(); ++i)
        for (int32_t h = 0; h < x.local_heads(); ++h)
          for (int32_t t = 0; t < x.tokens_per_page; ++t) {
            auto head = static_cast<uint64_t>(x.first_head() + h);
            // Hashed whole into the pattern's room word (its buffer word
            // keeps 16 bits only).
            auto seed = splitmix64((global << 40) ^ (head << 20) ^ static_cast<uint64_t>(t));
            f(cache.page(b, static_cast<uint64_t>(pages[i])) + x.offset(t, h), seed, i);
          }
    }
}

} // namespace

void host_kv_cache::write_room(room_id room, const std::vector<int64_t>& pages, int64_t aux_slot,
                               const parallel_layout& x) {
  for_each_head(*this, pages, x, [&](uint8_t* at, uint64_t seed, size_t i) {
    write_pattern(at, x.head_bytes(), room ^ seed, 0, i);
  });
  for (uint32_t b = 0; b < shape_.num_aux; ++b)
    write_pattern(aux(b, static_cast<uint64_t>(aux_slot)), shape_.aux_item_bytes, room, 1000 + b,
                  0);
}

bool host_kv_cache::check_room(room_id room, const std::vector<int64_t>& pages, int64_t aux_slot,
                               const parallel_layout& x, std::string* why) const {
  auto* self = const_cast<host_kv_cache*>(this);
  bool ok = true;
  for_each_head(*self, pages, x, [&](uint8_t* at, uint64_t seed, size_t i) {
    if (!ok)
      return;
    auto n = check_pattern(at, x.head_bytes(), room ^ seed, 0, i);
    if (n != x.head_bytes()) {
      ok = false;
      if (why)
        *why = "room " + std::to_string(room) + ": page " + std::to_string(pages[i])
               + " a head slice, byte " + std::to_string(n)
               + " differs";
    }
  });
  if (!ok)
    return false;
  for (uint32_t b = 0; b < shape_.num_aux; ++b) {
    auto len = shape_.aux_item_bytes;
    auto at = check_pattern(self->aux(b, static_cast<uint64_t>(aux_slot)), len, room, 1000 + b, 0);
    if (at != len) {
      if (why)
        *why = "room " + std::to_string(room) + ": aux buffer " + std::to_string(b) + " slot "
               + std::to_string(aux_slot) + " byte " + std::to_string(at) + " differs";
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
