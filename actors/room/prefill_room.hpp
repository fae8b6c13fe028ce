#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/actors/room/chunk_ledger.hpp"
#include "kvroom/actors/room/landing_ledger.hpp"
#include "kvroom/actors/room/room_core.hpp"
#include "kvroom/transport/rank_mapping.hpp"

namespace kvroom {

/// One decode rank a prefill room writes.
struct prefill_target {
  /// Its TP rank in the decode group.
  int32_t tp_rank = 0;
  /// Its destination, once its manager handed it over.
  bool has_dst = false;
  dst_info dst;
  std::shared_ptr<const rank_entry> peer;
  /// How this room reaches it, chosen once per room: the nearest path, and
  /// the other paths to the same rank (the path layer's to use).
  endpoint_desc endpoint;
  std::vector<endpoint_desc> alternates;
  /// Where either side's aux sits apart from its KV (host aux beside a GPU
  /// KV cache): the aux writes move in a batch of their own, on paths that
  /// carry the aux's memory kinds.
  bool aux_apart = false;
  endpoint_desc aux_endpoint;
  std::vector<endpoint_desc> aux_alternates;
  /// Declared layouts: what the rank mapping says it gets (from every
  /// source; this room moves its own slices). Shared with the rank's other
  /// rooms of the same layouts.
  std::shared_ptr<const decode_mapping> map;
  /// With the integrity check on: every write of its part so far, and the
  /// part's digest once all of it landed.
  std::vector<write_op> written;
  uint64_t digest = 0;
};

/// State of the sender side of one room on one prefill rank.
struct prefill_room_state {
  room_core core;
  // The flags side by side, not each in its own 8-byte slot: with them the
  // actor fits CAF's allocation in 1,792 bytes with its control block, not
  // 2,048 (256 bytes a room on every prefill rank).
  bool initialized = false;
  /// Both sides declared parallel layouts: the decode ranks this rank writes
  /// follow from the rank mapping (none: a dummy). Otherwise the one decode
  /// rank of its own TP slot, whichever sends a destination first.
  bool mapped = false;
  /// `targets` is final (mapped: the group and the decode TP size known).
  bool role_known = false;
  bool last_received = false;
  bool last_in_flight = false;
  /// A job failed: the room sends nothing more, and its part is never
  /// whole (whatever else lands).
  bool broken = false;
  bool started = false;
  /// The deployment checks integrity: each part is hashed once it landed.
  bool hashing = false;
  int32_t decode_tp = 0;
  uint64_t declared_pages = 0;
  int64_t aux_index = 0;
  /// Hybrid models: the request's state pages, from the last chunk.
  std::vector<int64_t> state_indices;
  std::vector<prefill_target> targets;
  /// Mapped: this rank's prefill group, from the manager.
  std::vector<std::shared_ptr<const rank_entry>> group;
  /// Mapped: destinations that came before the role was known (at most one
  /// per decode TP rank).
  std::vector<dst_ready> early;
  /// Chunks received and not yet handed to the worker (bounded), each with
  /// where its pages start among the room's.
  struct queued_chunk {
    sender_chunk chunk;
    uint64_t offset = 0;
  };
  /// A first-in first-out queue that holds nothing until a chunk comes: a
  /// vector and the index of its front. Not `std::deque`, which in
  /// libstdc++ allocates a 512-byte node and its map as it is constructed,
  /// ~550 B on every prefill room for a queue that mostly holds one chunk
  /// for a moment.
  class chunk_queue {
  public:
    bool empty() const noexcept {
      return head_ == items_.size();
    }
    size_t size() const noexcept {
      return items_.size() - head_;
    }
    queued_chunk& front() noexcept {
      return items_[head_];
    }
    void push_back(queued_chunk q) {
      items_.push_back(std::move(q));
    }
    void pop_front() {
      if (++head_ == items_.size())
        clear();
    }
    void clear() noexcept {
      items_.clear();
      head_ = 0;
    }

  private:
    std::vector<queued_chunk> items_;
    size_t head_ = 0;
  };
  chunk_queue queued;
  /// What the scheduler sent of each KV buffer (made by init).
  std::optional<chunk_ledger> ledger;
  /// Pages of every buffer handed to the data plane.
  uint64_t planned_pages = 0;
  /// The jobs in flight, one per target and chunk (a few chunks at once:
  /// `max_chunks_in_flight`).
  std::vector<uint64_t> jobs;
  /// The target of each job in `jobs` (index into `targets`).
  std::vector<size_t> job_targets;
  /// Pushed chunks of some buffers (a layer's) in flight, by job id: what
  /// each puts in its decode rank's buffers, told to it once it landed
  /// (`chunk_landed`), so its scheduler can start that layer.
  std::vector<std::pair<uint64_t, buffer_bytes>> job_lands;
  uint64_t next_job = 1;
  uint64_t bytes_moved = 0;

  /// Where job `id` stands in `jobs` (-1: not in flight, a stale result).
  ptrdiff_t job_index(uint64_t id) const {
    auto i = std::find(jobs.begin(), jobs.end(), id);
    return i == jobs.end() ? -1 : i - jobs.begin();
  }

  /// Job `index` is over: it leaves `jobs`, and its target's index returns.
  size_t take_job(ptrdiff_t index) {
    auto target = job_targets[static_cast<size_t>(index)];
    jobs.erase(jobs.begin() + index);
    job_targets.erase(job_targets.begin() + index);
    return target;
  }

  /// What job `id` lands, if it was kept; it is no longer kept.
  buffer_bytes take_lands(uint64_t id) {
    for (auto i = job_lands.begin(); i != job_lands.end(); ++i)
      if (i->first == id) {
        auto out = std::move(i->second);
        job_lands.erase(i);
        return out;
      }
    return {};
  }

  static inline const char* name = "kvroom.prefill_room";
};

/// The sender room actor: plans each chunk into one write batch per decode
/// destination, hands it to the rank's transfer worker, sends aux data with
/// the last chunk and confirms to the decode room once every byte landed.
caf::behavior prefill_room(counted_actor<prefill_room_state>* self,
                           room_params params);

} // namespace kvroom
