#pragma once

// Messages that never leave the process: they carry shared pointers to
// immutable data so a room does not copy a rank's whole memory layout.

#include <memory>
#include <vector>

#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/atom.hpp"
#include "caf/message.hpp"

#include "kvroom/actors/control/side_shape.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// Manager -> a room that has lived at least one tick interval: check your
/// deadline. One sweep per rank replaces a receive timeout per room, which
/// CAF 0.17 re-arms through its clock thread on every message.
using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// Manager -> its rank's transfer worker, once: where the worker sends the
/// backend's connection messages for other ranks (`transport_control`).
using attach_atom = caf::atom_constant<caf::atom("attach")>;

/// rank -> its manager at start (`join_atom`, control host, control port):
/// where the manager is published; the manager hands it to its control
/// actor, which registers and answers `ok_atom` or an error.
using join_atom = caf::atom_constant<caf::atom("join")>;
/// control actor -> itself: reconnect to the registry.
using reconnect_atom = caf::atom_constant<caf::atom("reconnect")>;
/// control actor -> itself: try the rank's first registration again.
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
/// manager -> itself, behind the messages in its mailbox: send the
/// control messages held for other processes (control_outbox.hpp).
using flush_atom = caf::atom_constant<caf::atom("flush")>;

/// Manager -> prefill room: a decode destination together with the decode
/// rank's registry entry (layout and data-plane endpoint).
struct dst_ready {
  dst_info info;
  std::shared_ptr<const rank_entry> peer;
};

/// Decode room -> its manager: prefill rank `prefill_rank` got the room's
/// destination and may write into its pages until it fences (or is lost).
struct dst_sent {
  room_id room = 0;
  rank_id prefill_rank = -1;
};

/// Decode room -> its manager: which ranks serve prefill group `dp_rank`.
struct resolve_group {
  role side = role::prefill;
  int32_t dp_rank = 0;
};

/// Manager's answer to `resolve_group`, ordered by tp rank; empty while the
/// registry has not seen that group. Pushed to prefill rooms of ranks that
/// declared a parallel layout too: their own group, and `decode_tp`, the
/// decode side's TP size (one per deployment; 0 while no decode rank is
/// known), from which a room knows which decode ranks it writes.
struct group_reply {
  std::vector<std::shared_ptr<const rank_entry>> ranks;
  int32_t decode_tp = 0;
};

/// Room -> its manager: deliver `payload` to the manager of the room's
/// decider, TP rank 0 of group (`side`, `dp_rank`) (see `is_decider`).
struct to_decider {
  role side = role::decode;
  int32_t dp_rank = 0;
  caf::message payload;
};

/// Manager -> its rank's transfer worker: room `room` concluded Failed (or
/// its actor died); drop its queued jobs and answer `room_fenced` once none
/// of its posted batches is still moving.
struct fence_room {
  room_id room = 0;
};

/// Room -> its manager: deliver `payload` to the manager of rank `rank`
/// (its room actor may be gone; the manager settles for it).
struct to_rank {
  rank_id rank = -1;
  caf::message payload;
};

/// Room -> its manager: deliver `payload` to `dest`, a manager in another
/// process, with the manager's other messages for it (control_outbox.hpp).
struct to_peer {
  caf::actor dest;
  caf::message payload;
};

/// Rank -> its manager: what the directory lists of side `side` (answered
/// with a `side_shape`).
struct get_side_shape {
  role side = role::prefill;
};

/// Manager -> every open room: a rank of the deployment is gone.
struct peer_lost {
  rank_ref rank;
  std::string reason;
};

} // namespace kvroom

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::dst_ready)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::dst_sent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::resolve_group)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::group_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::peer_lost)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::to_decider)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::fence_room)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::to_rank)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::to_peer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::get_side_shape)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::side_shape)
