#pragma once

// The parts of a rank's control actor (rank_control.hpp), in files of their
// own: registration (control_registration.cpp) and links
// (control_links.cpp). Not an API.

#include <string>
#include <vector>

#include "caf/io/middleman_actor.hpp"

#include "kvroom/actors/control/rank_control.hpp"

namespace kvroom::detail {

using control_ptr = caf::stateful_actor<rank_control_state>*;

/// The control's wake-up for a link whose pause ended.
using links_atom = caf::atom_constant<caf::atom("links")>;

inline const rank_ref& me(control_ptr self) {
  return self->state.self_entry->rank;
}

/// Counts a stranger's message, and logs it at most once a second.
void log_stranger(control_ptr self, const std::string& text);

/// How this process dials a peer's or the registry's control endpoint.
caf::io::middleman_actor dialer(control_ptr self);

/// Whether something of ours is at process `node`: a linked peer, or the
/// registry (its trust stays while it is).
bool node_holds_ours(control_ptr self, const caf::node_id& node);

// -- registration (control_registration.cpp) ----------------------------------

/// `join_atom`: the rank's control endpoint; registers, and answers the
/// rank once the first registration succeeded or its window closed.
caf::response_promise join(control_ptr self, std::string host, uint16_t port);

/// Registers with the registry (challenge, proof).
void start_registration(control_ptr self);

/// The registry went down: keep the cached directory, reconnect with backoff.
void on_registry_down(control_ptr self, const caf::error& reason);

/// One reconnect attempt (from `reconnect_atom`).
void reconnect_registry(control_ptr self);

// -- links (control_links.cpp) -----------------------------------------------

/// Starts the link to a listed rank that something here needs, unless one
/// is under way. Links are lazy: a rank links only to the peers it has
/// rooms with, when the first room needs one, so N ranks starting (or
/// restarting) at once do not dial N^2 links.
void want_link(control_ptr self, const std::shared_ptr<const rank_entry>& e);

/// The manager's sweep: `active` sent control messages since the last one.
/// Attempts the links that are due and asks idle processes to close.
void on_sweep(control_ptr self, const std::vector<caf::node_id>& active);

/// `links_atom`: the link timer fired.
void on_link_timer(control_ptr self);

/// A linked peer is gone (the manager saw it lost or unlisted).
void on_link_dropped(control_ptr self, const link_dropped& msg);

// The handshake and the idle close, from peers through the manager (the
// current sender is the peer's manager).
void on_link_hello(control_ptr self, link_hello& msg);
void on_link_reply(control_ptr self, link_reply& msg);
void on_link_finish(control_ptr self, link_finish& msg);
void on_link_ack(control_ptr self, link_ack& msg);
void on_link_close(control_ptr self, link_close& msg);
void on_link_closed(control_ptr self, link_closed& msg);

} // namespace kvroom::detail
