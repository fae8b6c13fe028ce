#pragma once

// A rank's control plane as an actor of its own, beside its KV manager:
// registration with the directory (and again whenever it returns), the
// direct links to peer managers with the membership handshake, lazy dials,
// retries and idle closes, and the trust those links earn. It tells the
// manager what became of its peers (`link_made`, the registry to believe)
// and asks it only what rooms decide (may a link go?). The manager keeps
// rooms; the link table (link_table.hpp) decides; this actor carries out.
//
// The manager stays the rank's one face: it is what the control endpoint
// publishes, what the directory lists and what peers send to. It hands the
// link handshake on here with its sender kept (`caf::send_as`), and this
// actor sends to peers as the manager, so a peer never sees this actor's
// address. Not an API.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"
#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/atom.hpp"
#include "caf/node_id.hpp"
#include "caf/response_promise.hpp"
#include "caf/stateful_actor.hpp"

#include "kvroom/actors/control/link_table.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/control/stranger_log.hpp"
#include "kvroom/actors/rank_metrics.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

// -- manager -> control ------------------------------------------------------

/// A listed rank that something here needs (a room with it, a message
/// waiting for it): link to it unless a link is under way.
struct link_wanted {
  std::shared_ptr<const rank_entry> entry;
};

/// A linked peer is gone (lost, or left the directory): the link no longer
/// counts, and its process is no longer trusted once nothing else of ours
/// is there.
struct link_dropped {
  rank_id id = -1;
  /// The peer's manager, as it was linked (a newer incarnation's link
  /// under the same id stays).
  caf::actor peer;
};

/// (unwant_atom, rank_id): no link to that rank is wanted any more (it left
/// the directory).
using unwant_atom = caf::atom_constant<caf::atom("unwant")>;

/// (traffic_atom, processes): once per manager sweep, the peer processes
/// that sent the manager a control message since the last one. Also the
/// control's own clock for retries and idle links.
using traffic_atom = caf::atom_constant<caf::atom("traffic")>;

// -- control -> manager ------------------------------------------------------

/// A link is made: rank `id` of `incarnation` is reached through `peer`
/// (its manager). The manager counts it usable.
struct link_made {
  rank_id id = -1;
  uint64_t incarnation = 0;
  caf::actor peer;
};

/// A request, answered with a bool. Without `peer_agreed`: may the link to
/// rank `id` through `peer` close? The manager answers true, and counts the
/// rank listed again, unless a room here still needs it. With
/// `peer_agreed`: the peer let go already; the rank goes back to listed
/// whatever, and the answer says whether no room here needs it (so the
/// connection may close).
struct release_link {
  rank_id id = -1;
  caf::actor peer;
  bool peer_agreed = false;
};

/// (idle_atom, processes): a request, answered with those of the processes
/// no room here needs; the others are in use.
using idle_atom = caf::atom_constant<caf::atom("idle")>;

/// (registry_atom, registry): directory messages come from this actor's
/// process from now (null: from none but this process).
using registry_atom = caf::atom_constant<caf::atom("registry")>;

// -- the actor -----------------------------------------------------------------

struct rank_control_params {
  /// The rank's entry as the manager built it (incarnation included); the
  /// control endpoint is filled in at `join_atom`.
  std::shared_ptr<const rank_entry> self_entry;
  caf::actor manager;
  std::shared_ptr<rank_metrics> metrics;
  std::shared_ptr<const membership> members;
  /// Nodes whose ranks proved membership: written here only, read by the
  /// manager and the rooms.
  std::shared_ptr<trust_table> trust;
  caf::actor registry;
  /// Where to reach the registry again (port 0: in this process, no retry).
  std::string registry_host;
  uint16_t registry_port = 0;
  uint32_t registration_wait_ms = 0;
  link_timing timing;
  /// The process's link keeper (null: idle links are never closed).
  caf::actor link_keeper;
};

/// What it was spawned with, kept current (the entry gains its control
/// endpoint at `join_atom`; the registry follows reconnects), and what it
/// keeps of registration and links.
struct rank_control_state : rank_control_params {
  // -- registration (control_registration.cpp) --
  /// Until when the rank's first registration may be tried again after a
  /// registry that did not answer in time (many ranks starting at once).
  uint64_t join_deadline_ms = 0;
  /// Set while rank::start waits for the first registration.
  std::optional<caf::response_promise> joining_rank;
  uint32_t reconnect_ms = 0;

  // -- links (control_links.cpp) --
  /// Links this rank dials, handshakes others started, idle processes.
  std::optional<link_table> links;
  /// A link made: the peer's manager and the incarnation it was made with.
  struct link_end {
    caf::actor peer;
    uint64_t incarnation = 0;
  };
  /// The peers linked through this actor, by rank: whom an idle close asks,
  /// whether a process still holds a link of ours, and which wants are
  /// stale (the manager's want can arrive after the link it asked for).
  std::unordered_map<rank_id, link_end> linked;
  /// When the pending link timer fires (0: none pending).
  uint64_t link_timer_ms = 0;
  stranger_log strangers;

  static inline const char* name = "kvroom.rank_control";
};

/// Spawned by the manager at its start; ends with it.
caf::behavior rank_control(caf::stateful_actor<rank_control_state>* self,
                           rank_control_params params);

} // namespace kvroom

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::link_wanted)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::link_dropped)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::link_made)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::release_link)
