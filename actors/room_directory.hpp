#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"

#include "kvroom/messages/ids.hpp"
#include "kvroom/messages/kv_poll.hpp"
#include "kvroom/messages/kv_transfer_error.hpp"

namespace kvroom {

/// One rank's open rooms, by id and by actor, and the ids of rooms cleared
/// recently (tombstones), so a late message for one changes nothing and a
/// late question about one still gets its answer. Tombstones are bounded by
/// count: memory never grows with the rooms that passed.
class room_directory {
public:
  struct entry {
    caf::actor actor;
    /// Set by `open`: the key of the by-actor index.
    caf::actor_id actor_id = 0;
    kv_poll state = kv_poll::bootstrapping;
    /// The room's prefill group, whose TP rank 0 decides it.
    int32_t prefill_dp = 0;
    uint64_t opened_ms = 0;
    /// The root cause once concluded Failed.
    kv_transfer_error error;
    /// Prefill: decode ranks that handed this room a destination. Decode:
    /// prefill ranks this room handed its destination to.
    std::vector<rank_id> dst_ranks;
    /// Decode: prefill ranks that confirmed their fence.
    std::vector<rank_id> fences;
    /// Prefill: the fence of this Failed room completed.
    bool fence_done = false;
  };

  struct tombstone {
    bool failed = false;
    kv_transfer_error error;
  };

  explicit room_directory(size_t max_tombstones) : max_tombstones_(max_tombstones) {
    // nop
  }

  /// Opens `room`; a scheduler may reuse a cleared id, whose tombstone goes.
  entry& open(room_id room, caf::actor_id actor, entry e);

  entry* find(room_id room);

  /// The open room whose actor has this id (room actors are local).
  std::optional<room_id> room_of(caf::actor_id actor) const;

  /// Removes an open room and hands back its entry.
  std::optional<entry> close(room_id room);

  /// Remembers a cleared room; the oldest tombstone goes beyond the bound.
  void bury(room_id room, bool failed, kv_transfer_error error);

  const tombstone* tombstone_of(room_id room) const;

  template <class F>
  void for_each(F&& f) {
    for (auto& kvp : rooms_)
      f(kvp.first, kvp.second);
  }

  size_t size() const noexcept {
    return rooms_.size();
  }

  size_t tombstones() const noexcept {
    return tombstones_.size();
  }

private:
  size_t max_tombstones_;
  std::unordered_map<room_id, entry> rooms_;
  std::unordered_map<caf::actor_id, room_id> by_actor_;
  std::unordered_map<room_id, tombstone> tombstones_;
  std::deque<room_id> tombstone_order_;
};

} // namespace kvroom
