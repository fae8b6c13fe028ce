#pragma once

#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "caf/response_promise.hpp"
#include "caf/stateful_actor.hpp"

#include "kvroom/api/config.hpp"
#include "kvroom/actors/manager/control_outbox.hpp"
#include "kvroom/actors/manager/failure_log.hpp"
#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/local_messages.hpp"
#include "kvroom/actors/rank_metrics.hpp"
#include "kvroom/actors/control/stranger_log.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/manager/parking.hpp"
#include "kvroom/actors/manager/peer_directory.hpp"
#include "kvroom/actors/manager/room_directory.hpp"
#include "kvroom/actors/room/room_protocol.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/actors/manager/registry_suspects.hpp"
#include "kvroom/api/backend.hpp"

namespace kvroom {

/// State of one rank's KV manager: the owner of `failure_records` (in
/// `failures`) and of the rank's tables. Its mailbox serialises every access; there is no lock. The
/// tables are plain classes (tested without an actor system); the manager
/// wires messages to them.
struct kv_manager_state {
  std::shared_ptr<const rank_entry> self_entry;
  std::shared_ptr<rank_metrics> metrics;
  rank_limits limits;
  room_timeouts timeouts;
  /// Every window the manager's tables use, from `timeouts`.
  room_timing timing;
  /// The scheduler's inbox: receives the states of rooms whose actor died.
  caf::actor inbox;
  caf::actor worker;

  std::optional<peer_directory> peers;
  /// Ranks the registry reported lost that we never linked to, until a
  /// check confirms or clears the report (registry_suspects.hpp).
  std::optional<registry_suspects> suspects;
  std::optional<room_directory> rooms;
  std::optional<parking> parked;
  /// `failure_records`: room -> root cause until the room is cleared, and
  /// the one place a conclusion is logged.
  std::optional<failure_log> failures;
  /// A `decide_unopened` timer is pending (one at a time, whatever the
  /// number of proposals parked).
  bool deciding = false;

  manager_stats counters;
  control_chaos chaos;
  std::mt19937_64 chaos_rng;

  // -- the control plane (manager_links.cpp) --
  /// Nodes whose ranks proved membership: the rank's control actor writes
  /// it; the manager and the rooms read it.
  std::shared_ptr<trust_table> trust;
  /// The rank's control actor: registration and links (rank_control.hpp).
  caf::actor control;
  /// Directory messages come from this registry's process (the control
  /// actor says which).
  caf::actor registry;
  /// Peer processes a control message went to or came from since the last
  /// sweep: their links are in use (the control actor's idle check).
  std::unordered_set<caf::node_id> busy_nodes;
  /// Control messages for other processes until this drain ends
  /// (manager_outbox.cpp), and whether the flush is queued.
  detail::control_outbox outbox;
  bool flush_queued = false;
  stranger_log strangers;
  /// Decode: revokes the grants of rooms whose actor died.
  std::shared_ptr<backend> data_plane;

  static inline const char* name = "kvroom.kv_manager";
};

/// What a manager is spawned with.
struct kv_manager_params {
  rank_ref self;
  memory_layout layout;
  std::vector<endpoint_desc> endpoints;
  rank_limits limits;
  room_timeouts timeouts;
  caf::actor inbox;
  control_chaos chaos;
  /// The rank's transfer worker: receives peers' connection messages.
  caf::actor worker;
  std::shared_ptr<const membership> members;
  std::shared_ptr<trust_table> trust;
  caf::actor registry;
  std::string registry_host;
  uint16_t registry_port = 0;
  /// Decode: revokes the grants of rooms whose actor died (see run_dead).
  std::shared_ptr<backend> data_plane;
  std::optional<parallel_layout> parallel;
  /// What the rank counts for operators (the manager writes it; its control
  /// actor the readiness and the strangers it refused).
  std::shared_ptr<rank_metrics> metrics;
  /// The rank's integrity check ("off", "xxh3"), as its entry says.
  std::string integrity = "off";
  /// How long a registration may take, tries included (0: one try within
  /// the link timeout): a registry over the network may be slow to answer
  /// when many ranks start at once, and a directory on etcd makes a
  /// replacement wait for its predecessor's lease.
  uint32_t registration_wait_ms = 0;
  /// The process's link keeper (null: idle links are never closed).
  caf::actor link_keeper;
};

/// One rank's KV manager: routes destinations, parts and failures to room
/// actors (or parks them until the room opens), records failures, fans a
/// decided failure out to every other rank of the room as
/// `room_failed{propagated=true}`, fences a failed sender's worker, carries
/// on rooms whose actor died, and fails the rooms that depend on a rank that
/// went down. Its control actor (registration and links, rank_control.hpp)
/// is spawned with it and learns from it what the rooms need.
caf::behavior kv_manager(counted_actor<kv_manager_state>* self,
                         kv_manager_params params);

} // namespace kvroom
