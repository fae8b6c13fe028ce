#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"

#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/actors/room/room_protocol.hpp"

namespace kvroom {

/// Every room a rank knows, behind one look-up (`route`): open rooms (by id
/// and by actor), rooms whose actor died mid-room and whose protocol the
/// manager carries on (dead), and the ids of rooms cleared recently
/// (tombstones), so a late message for one changes nothing and a late
/// question about one still gets its answer. Beside them, prefill rooms
/// whose worker fence is pending. Tombstones are bounded by count, dead and
/// fencing rooms by the rooms that were open: memory never grows with the
/// rooms that passed.
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

    /// Whether losing `peer` touches this room: a rank it handed or took a
    /// destination from, or a rank of its prefill group (its decider and
    /// the group's parts).
    bool involves(const rank_ref& peer) const noexcept;
  };

  struct tombstone {
    bool failed = false;
    kv_transfer_error error;
  };

  explicit room_directory(size_t max_tombstones) : max_tombstones_(max_tombstones) {
    // nop
  }

  /// Where a message for a room goes.
  struct route_t {
    enum where_t { open, dead, tombstone, unknown } where = unknown;
    entry* room = nullptr;          ///< open
    room_protocol* protocol = nullptr; ///< dead: the room's protocol here
    const struct tombstone* grave = nullptr; ///< tombstone
  };

  /// The one look-up: open, dead, cleared recently, or unknown here.
  route_t route(room_id room);

  /// Opens `room`; a scheduler may reuse a cleared id, whose tombstone goes.
  entry& open(room_id room, caf::actor_id actor, entry e);

  entry* find(room_id room);

  /// Whether an open room here (of rank `self`) may still need `peer`: its
  /// prefill group is the room's, it was handed or handed a destination,
  /// or it is of this rank's own group (failures fan out there).
  bool involves(const rank_ref& self, const rank_ref& peer) const;

  /// The open room whose actor has this id (room actors are local).
  std::optional<room_id> room_of(caf::actor_id actor) const;

  /// Removes an open room and hands back its entry.
  std::optional<entry> close(room_id room);

  /// Remembers a cleared room; the oldest tombstone goes beyond the bound.
  void bury(room_id room, bool failed, kv_transfer_error error);

  const tombstone* tombstone_of(room_id room) const;

  // -- rooms whose actor died ---------------------------------------------

  /// Carries `room` on with `p` (its actor died before it concluded).
  room_protocol& carry(room_id room, room_protocol p);
  room_protocol* dead(room_id room);
  /// The dead room's state reached the scheduler: it is buried, with its
  /// root cause when it Failed.
  void bury_dead(room_id room);
  std::vector<room_id> dead_rooms() const;
  size_t dead_size() const noexcept {
    return dead_.size();
  }

  // -- the prefill fence ----------------------------------------------------

  /// Room `room` stops: once the worker moves nothing of it, each of
  /// `decode` hears so (added to a fence in progress).
  void fence(room_id room, const std::vector<rank_id>& decode);
  /// A decode rank handed its pages to a room whose fence is in progress:
  /// it hears with the others (true), or no fence is pending (false: tell
  /// it now).
  bool join_fence(room_id room, rank_id decode);
  /// The worker's fence completed: the decode ranks to tell (none when no
  /// fence was pending).
  std::vector<rank_id> end_fence(room_id room);
  size_t fencing() const noexcept {
    return fencing_.size();
  }

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
  std::unordered_map<room_id, room_protocol> dead_;
  std::unordered_map<room_id, std::vector<rank_id>> fencing_;
};

} // namespace kvroom
