#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/parallel_layout.hpp"

namespace kvroom {

/// The shape of a paged KV cache on one rank.
struct kv_shape {
  /// KV buffers: K and V of every layer (e.g. 2 x 32 for Llama-3-8B).
  uint32_t num_buffers = 2;
  uint64_t num_pages = 64;
  /// Bytes of one page in one buffer, e.g. 16 tokens x 8 heads x 128 dims x
  /// 2 bytes (bf16) = 32 KiB; at most that of one TP rank's heads.
  uint64_t page_size_bytes = 4096;
  /// Aux buffers (SGLang: output ids, logprobs, hidden states, ...).
  uint32_t num_aux = 1;
  uint64_t aux_slots = 64;
  uint64_t aux_item_bytes = 64;
  /// State buffers of a hybrid model (Mamba conv/SSM slots, SWA window
  /// pages): `num_state` buffers of `state_pages` pages of
  /// `state_page_bytes`; none by default.
  uint32_t num_state = 0;
  uint64_t state_pages = 0;
  uint64_t state_page_bytes = 0;

  uint64_t total_bytes() const noexcept {
    return num_buffers * num_pages * page_size_bytes
           + num_aux * aux_slots * aux_item_bytes + num_state * state_pages * state_page_bytes;
  }
};

/// Host memory shaped as a paged KV cache, for the demo, benchmarks and
/// tests; a real scheduler registers its own buffers instead. Writes and
/// checks a per-room seeded pattern so a transfer can be verified byte-exact.
class host_kv_cache {
public:
  /// `shared`: allocate in named POSIX shm segments (/dev/shm/kvroom-PID-N),
  /// so peers on the same host can reach it through the shm data plane. The
  /// segments are unlinked on destruction; a killed process leaves them.
  explicit host_kv_cache(const kv_shape& shape, bool shared = false);
  ~host_kv_cache();

  host_kv_cache(const host_kv_cache&) = delete;
  host_kv_cache& operator=(const host_kv_cache&) = delete;

  const kv_shape& shape() const noexcept {
    return shape_;
  }

  /// The buffers as a rank registers them.
  memory_layout layout() const;

  uint8_t* page(uint32_t buffer, uint64_t index) noexcept;
  uint8_t* aux(uint32_t buffer, uint64_t slot) noexcept;
  uint8_t* state(uint32_t buffer, uint64_t index) noexcept;

  /// Writes room `room`'s state pattern into pages `indices` of every state
  /// buffer (the i-th index: the room's i-th state page).
  void write_state(room_id room, const std::vector<int64_t>& indices);

  /// Checks pages `indices` hold room `room`'s state pattern.
  bool check_state(room_id room, const std::vector<int64_t>& indices,
                   std::string* why = nullptr) const;

  /// Bytes of state pages outside `indices` that differ from `byte`.
  uint64_t count_state_changed_outside(const std::vector<int64_t>& indices, uint8_t byte) const;

  /// Fills every byte with `byte` (e.g. to detect writes outside a room).
  void fill(uint8_t byte);

  /// Writes room `room`'s pattern: its i-th page goes to `pages[i]` of every
  /// buffer, its aux item to slot `aux_slot` of every aux buffer.
  void write_room(room_id room, const std::vector<int64_t>& pages,
                  int64_t aux_slot);

  /// Checks that `pages` and `aux_slot` hold room `room`'s pattern; on a
  /// mismatch returns false and says where in `why`.
  bool check_room(room_id room, const std::vector<int64_t>& pages,
                  int64_t aux_slot, std::string* why = nullptr) const;

  /// The same for the pages of some KV buffers only (a layer's K and V),
  /// without the aux slot.
  bool check_room_buffers(room_id room, const std::vector<int64_t>& pages,
                          const std::vector<int32_t>& buffers, std::string* why = nullptr) const;

  /// The same for a rank holding part of the model (`x`, its buffers K and
  /// V of each layer of its stage): every head of every token carries the
  /// model's pattern for that room, page of the room, layer, K or V, head
  /// (global) and token, so ranks of any two parallel layouts can be checked
  /// against each other byte-exact.
  void write_room(room_id room, const std::vector<int64_t>& pages, int64_t aux_slot,
                  const parallel_layout& x);
  bool check_room(room_id room, const std::vector<int64_t>& pages, int64_t aux_slot,
                  const parallel_layout& x, std::string* why = nullptr) const;

  /// Counts bytes that differ from `byte` outside the given pages and slot:
  /// proof that nothing wrote where it should not.
  uint64_t count_changed_outside(const std::vector<int64_t>& pages,
                                 int64_t aux_slot, uint8_t byte) const;

private:
  kv_shape shape_;
  uint8_t* kv_ = nullptr;
  uint8_t* aux_ = nullptr;
  uint8_t* state_ = nullptr;
  uint64_t kv_bytes_ = 0;
  uint64_t aux_bytes_ = 0;
  uint64_t state_bytes_ = 0;
  bool shared_ = false;
  std::vector<std::string> segments_;
};

} // namespace kvroom
