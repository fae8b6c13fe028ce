#pragma once

// The manager's side of the control plane: the check that gates every
// control message, and what it tells (and answers) the rank's control
// actor, which carries out registration and links (rank_control.hpp).
// Part of the kv_manager actor, in a file of its own; not an API.

#include <memory>
#include <vector>

#include "kvroom/actors/control/rank_control.hpp"
#include "kvroom/actors/manager/kv_manager.hpp"

namespace kvroom::detail {

using manager_ptr = counted_actor<kv_manager_state>*;

/// True when the message being handled comes from this process or from a
/// node whose rank proved membership; otherwise counts it, logs at most once
/// a second, and returns false (the caller drops the message).
bool from_member(manager_ptr self, const char* what);

/// True when the message being handled comes from the registry's node (or
/// this process).
bool from_registry(manager_ptr self);

/// True when the message being handled comes from this process (what only
/// the rank's own actors may say).
bool from_here(manager_ptr self);

/// Asks the control actor to link to listed ranks that something here
/// needs (a room with them, a message waiting for them); null entries are
/// skipped.
void want_links(manager_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& xs);

/// `want_links` for one listed rank (null: nothing).
void want_link(manager_ptr self, const std::shared_ptr<const rank_entry>& x);

/// The sweep's word to the control actor: the peer processes heard from
/// since the last one (its idle links), and its clock for retries.
void sweep_links(manager_ptr self);

/// A link is made: the peer is usable (or will be once listed).
void on_link_made(manager_ptr self, link_made& msg);

/// May a link go (see `release_link`)? Unlinks the peer when it may.
bool on_release_link(manager_ptr self, const release_link& msg);

/// Of `nodes`, the peer processes no room here needs.
std::vector<caf::node_id> unused_nodes(manager_ptr self, const std::vector<caf::node_id>& nodes);

/// Defined by manager_peers.cpp: a peer became usable (linked, or listed in
/// this process); monitor it and hand it to what waits for it.
void on_peer_usable(manager_ptr self, const std::shared_ptr<const rank_entry>& peer);

} // namespace kvroom::detail
