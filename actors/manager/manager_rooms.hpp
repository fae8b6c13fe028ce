#pragma once

// The kv_manager's room traffic: rooms opening and concluding, destinations,
// parts, commits, failures and fences routed to the room they are for
// (open, dead, cleared or not opened yet: `room_directory::route`), rooms
// whose actor died carried on by their protocol, and the routing to a
// room's decider. The decisions are the room protocol's and the tables'
// (room_directory, parking, failure_log, peer_directory); this is wiring.
// Part of the kv_manager actor, in a file of its own; not an API.

#include "caf/atom.hpp"

#include "kvroom/actors/manager/manager_send.hpp"

namespace kvroom::detail {

/// The manager's timer for proposals parked for rooms not opened here.
using decide_atom = caf::atom_constant<caf::atom("decide")>;

void on_opened(manager_ptr self, room_opened& msg);
void on_concluded(manager_ptr self, const room_concluded& msg);
/// A room actor went down: cleared, or died mid-room (carried on here).
void on_room_down(manager_ptr self, room_id room, const caf::error& reason);

void on_dst(manager_ptr self, dst_info& info);
void on_dst_sent(manager_ptr self, const dst_sent& msg);
void on_failed(manager_ptr self, room_failed& msg);
void on_part(manager_ptr self, part_done& part);
void on_committed(manager_ptr self, room_committed& msg);
void on_fenced(manager_ptr self, room_fenced& msg);
void on_transfer_started(manager_ptr self, transfer_started& msg);
void on_transfer_done(manager_ptr self, transfer_done& msg);
void on_source_ready(manager_ptr self, source_ready& msg);
void on_reads_done(manager_ptr self, reads_done& msg);
void on_chunk_landed(manager_ptr self, chunk_landed& msg);

/// Sends to the decider of `group`, or parks until the directory lists it.
void route_to_decider(manager_ptr self, const decider_ref& group, caf::message payload);
/// Sends what waited for a decider or a rank the directory now lists.
void send_parked(manager_ptr self);

/// Decides the proposals parked longer than the grace (the `decide` timer).
void decide_unopened(manager_ptr self);

/// What a room needs of the directory to know its counterparts (a decode
/// room its prefill group; a prefill room with a declared layout its own
/// group and the decode TP size); nothing while the directory lacks it.
void push_group(manager_ptr self, const room_directory::entry& e);
/// Hands the open room the destinations parked for it whose decode rank
/// the directory knows.
void deliver_parked(manager_ptr self, room_id room);

/// A rank is lost: every open and dead room hears (the protocol decides
/// whether it depends on it).
void rooms_lost(manager_ptr self, const peer_lost& why);

/// The sweep's part for rooms: ticks live rooms and dead ones, and answers
/// destinations parked past their window.
void sweep_rooms(manager_ptr self, uint64_t now);

} // namespace kvroom::detail
