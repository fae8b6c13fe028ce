#pragma once

// The manager's control plane: registration with the bootstrap registry
// (and again whenever it returns), direct links to peer managers with the
// membership handshake, and the check that gates every control message.
// Part of the kv_manager actor, in a file of its own; not an API.

#include <memory>
#include <vector>

#include "kvroom/actors/manager/kv_manager.hpp"

namespace kvroom::detail {

/// The manager's wake-up for a link whose pause ended.
using links_atom = caf::atom_constant<caf::atom("links")>;

using manager_ptr = counted_actor<kv_manager_state>*;

/// True when the message being handled comes from this process or from a
/// node whose rank proved membership; otherwise counts it, logs at most once
/// a second, and returns false (the caller drops the message).
bool from_member(manager_ptr self, const char* what);

/// True when the message being handled comes from the registry's node (or
/// this process).
bool from_registry(manager_ptr self);

/// Registers with the registry (challenge, proof); on the first success the
/// pending `join_atom` request is answered.
void start_registration(manager_ptr self);

/// The registry went down: keep the cached directory, reconnect with backoff.
void on_registry_down(manager_ptr self, const caf::error& reason);

/// One reconnect attempt (from `reconnect_atom`).
void reconnect_registry(manager_ptr self);

/// Starts links to listed ranks that something here needs (a room with
/// them, a message waiting for them), unless one is under way. Links are
/// lazy: a rank links only to the peers it has rooms with, when the first
/// room needs one, so N ranks starting (or restarting) at once do not dial
/// N^2 links.
void want_links(manager_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& xs);

/// `want_links` for one listed rank (null: nothing).
void want_link(manager_ptr self, const std::shared_ptr<const rank_entry>& x);

/// Attempts the links that are due: their pause ended, or their attempt
/// stalled or ran past its deadline (from the sweep and the link timer).
void retry_links(manager_ptr self, uint64_t now_ms);

/// `links_atom`: the link timer fired; attempts what is due and sets the
/// timer for what comes next.
void on_link_timer(manager_ptr self);

/// A control message to or from another process: its link is in use.
void note_traffic(manager_ptr self, const caf::node_id& node);

/// Asks the linked peers of each process whose link carried nothing for
/// `idle_link_ms`, and that no room here involves, to close it (sweep).
void close_idle_links(manager_ptr self, uint64_t now_ms);

void on_link_close(manager_ptr self, link_close& msg);
void on_link_closed(manager_ptr self, link_closed& msg);

void on_link_hello(manager_ptr self, link_hello& msg);
void on_link_reply(manager_ptr self, link_reply& msg);
void on_link_finish(manager_ptr self, link_finish& msg);
void on_link_ack(manager_ptr self, link_ack& msg);

/// Defined by manager_peers.cpp: a peer became usable (linked, or listed in
/// this process); monitor it and hand it to what waits for it.
void on_peer_usable(manager_ptr self, const std::shared_ptr<const rank_entry>& peer);

} // namespace kvroom::detail
