#pragma once

#include "caf/message.hpp"

#include "kvroom/actors/room/room_protocol.hpp"

namespace kvroom {

/// Where a room's effects go. Two places carry a room: its actor
/// (`room_core`) and, once that actor died mid-room, its manager. Each
/// implements the few ways a room reaches the world; `carry_out` is the one
/// reading of the protocol's effects, so both places do the same thing for
/// the same effect.
class room_port {
public:
  virtual ~room_port();

  /// The scheduler (and a listener) hears the room's state; `error` when it
  /// is Failed.
  virtual void publish(kv_poll state, kv_transfer_error error) = 0;

  /// The manager records the conclusion (failure record, metrics, fan-out).
  virtual void concluded(const room_effect& fx) = 0;

  /// For the decider of `group`, wherever it runs.
  virtual void to_decider(const decider_ref& group, caf::message msg) = 0;

  /// For rank `rank`'s manager (its room actor may be gone: that manager
  /// settles for it).
  virtual void to_rank(rank_id rank, caf::message msg) = 0;

  /// Room `room` committed: tell rank `rank`'s room. By default through the
  /// managers; a room actor that holds the other room's handle (same
  /// process) tells it directly.
  virtual void commit(room_id room, rank_id rank);

  /// `report_part` and `tell_done`: a part's word travels between room
  /// actors. Only a live room has parts to tell of; by default they go
  /// nowhere.
  virtual void part_word(const room_effect& fx);
};

/// Carries out `effects`, which the protocol of room `room` on rank `self`
/// decided (or one of its static decisions), through `port`.
void carry_out(room_id room, const rank_ref& self, room_effects& effects, room_port& port);

} // namespace kvroom
