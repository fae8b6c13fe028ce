#include "kvroom/actors/manager/kv_manager.hpp"

#include <cstring>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/nodes.hpp"
#include "kvroom/actors/control/rank_control.hpp"
#include "kvroom/actors/manager/manager_links.hpp"
#include "kvroom/actors/manager/manager_peers.hpp"
#include "kvroom/actors/manager/manager_rooms.hpp"
#include "kvroom/api/errors.hpp"

// The manager's behaviour: every handler checks who sent the message and
// hands it to the part of the manager that deals with it (rooms:
// manager_rooms.cpp; peers: manager_peers.cpp; links and registration:
// manager_links.cpp). The tables those parts read decide.

namespace kvroom {

namespace {

using namespace detail;

using self_ptr = counted_actor<kv_manager_state>*;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;

void sweep(self_ptr self) {
  auto& st = self->state;
  auto now = room_timing::now();
  // Gauges for the rank's metrics, once per sweep (cheap, and no room's
  // path pays for them).
  st.metrics->set_in_flight(st.rooms->size());
  st.metrics->set_parked(st.parked->size() + st.rooms->dead_size() + st.rooms->fencing(),
                         st.rooms->tombstones());
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  sweep_rooms(self, now);
  // Parked proposals are decided by their own timer (decide_atom).
  sweep_links(self);
  st.peers->expire(now);
}

/// A handler that acts on `T` only from this process or from a node whose
/// rank proved membership.
template <class T, class Fn>
auto members_only(self_ptr self, const char* what, Fn fn) {
  return [=](T& msg) {
    if (from_member(self, what))
      fn(self, msg);
  };
}

/// Ends the manager and what follows it: its rooms (they do not monitor it)
/// and its control actor.
void end(self_ptr self, const caf::error& reason) {
  // What this drain decided still leaves (a failure's fan-out above all).
  flush_outbox(self);
  self->state.rooms->for_each([&](room_id, const room_directory::entry& e) {
    self->send_exit(e.actor, reason);
  });
  self->send_exit(self->state.control, reason);
  self->quit(reason);
}

/// A handler that hands `T` on to the rank's control actor with its sender
/// kept: the link handshake is the control's, but peers know the manager.
/// With `members`, only from members (an idle close is between linked
/// peers; a handshake is how a stranger becomes one).
template <class T>
auto to_control(self_ptr self, const char* what, bool members) {
  return [=](T& msg) {
    auto& sender = self->current_sender();
    if (!sender || (members && !from_member(self, what)))
      return;
    caf::send_as(caf::actor_cast<caf::actor>(sender), self->state.control, std::move(msg));
  };
}

} // namespace

caf::behavior kv_manager(counted_actor<kv_manager_state>* self,
                         kv_manager_params params) {
  auto& st = self->state;
  {
    rank_entry e{params.self, caf::actor_cast<caf::actor>(self), std::move(params.layout),
                 std::move(params.endpoints)};
    e.has_parallel = params.parallel.has_value();
    if (params.parallel)
      e.parallel = *params.parallel;
    e.integrity = params.integrity;
    // Random per process start: peers tell a replaced rank from the old one.
    auto n = make_nonce();
    std::memcpy(&e.incarnation, n.data(), sizeof(e.incarnation));
    st.self_entry = std::make_shared<const rank_entry>(std::move(e));
  }
  st.limits = params.limits;
  st.metrics = params.metrics ? std::move(params.metrics)
                              : std::make_shared<rank_metrics>(params.self);
  st.timeouts = params.timeouts;
  st.timing = room_timing{params.timeouts};
  st.inbox = std::move(params.inbox);
  st.chaos = params.chaos;
  st.worker = params.worker;
  st.trust = params.trust ? params.trust : std::make_shared<trust_table>();
  st.registry = params.registry;
  st.data_plane = params.data_plane;
  st.peers.emplace(params.self.id, st.timing.lost_window_ms());
  // Two link attempts' deadlines: a live peer links well within it, even
  // on a loaded machine; a frozen one fails its rooms then (4 s by default).
  st.suspects.emplace(
    2 * link_timing{st.limits.query_timeout_ms, st.limits.idle_link_ms}.attempt_ms());
  st.rooms.emplace(st.limits.max_tombstones);
  st.failures.emplace(params.self);
  st.parked.emplace(st.limits.max_parked, st.timing.parking_ms());
  if (st.worker)
    self->send(st.worker, attach_atom::value, caf::actor_cast<caf::actor>(self));
  st.chaos_rng.seed(params.chaos.seed ^ static_cast<uint64_t>(params.self.id));
  // Registration and links are carried out beside the manager, by an actor
  // of their own; it ends with the manager, and the manager with it.
  st.control = self->spawn(
    rank_control,
    rank_control_params{st.self_entry, caf::actor_cast<caf::actor>(self), st.metrics,
                        params.members ? params.members : std::make_shared<const membership>(),
                        st.trust, params.registry, params.registry_host, params.registry_port,
                        params.registration_wait_ms,
                        link_timing{st.limits.query_timeout_ms, st.limits.idle_link_ms},
                        params.link_keeper});
  self->monitor(st.control);
  auto sweep_interval = st.timing.tick();
  self->delayed_send(self, sweep_interval, sweep_atom::value);
  // CAF's own replies from peers' middlemen land here too: not ours to print.
  self->set_default_handler(caf::drop);
  // Rooms do not monitor their manager (see room_core::init): it ends them.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Only this process stops a rank (a stranger's exit message is dropped).
    // The rank sends its exit as an actor: a remote anonymous exit arrives
    // without a sender, and its source may name this very manager.
    auto& sender = self->current_sender();
    if (!sender || sender->node() != self->node() || msg.source.node() != self->node()) {
      from_member(self, "an exit message");
      return;
    }
    end(self, msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    // Room actors are local: their actor id names them.
    if (msg.source.node() == self->node()) {
      if (auto room = st.rooms->room_of(msg.source.id())) {
        on_room_down(self, *room, msg.reason);
        return;
      }
    }
    if (msg.source == st.control.address()) {
      // Without its control plane the rank can neither link nor register.
      logger()->error("{}: control actor exited: {}", to_string(me(self)),
                      caf::to_string(msg.reason));
      end(self, msg.reason);
      return;
    }
    if (auto peer = st.peers->take_peer(msg.source))
      on_peer_down(self, *peer, caf::to_string(msg.reason),
                   msg.reason == caf::exit_reason::user_shutdown
                     || msg.reason == caf::exit_reason::normal);
  });
  return {
    // Every handler acts only on messages from this process or from a node
    // whose rank proved membership (see manager_links.hpp).
    members_only<room_opened>(self, "room_opened", on_opened),
    members_only<room_concluded>(self, "room_concluded", on_concluded),
    members_only<dst_info>(self, "a destination", on_dst),
    members_only<dst_sent>(self, "dst_sent", on_dst_sent),
    members_only<room_failed>(self, "room_failed", on_failed),
    members_only<part_done>(self, "part_done", on_part),
    members_only<room_committed>(self, "room_committed", on_committed),
    members_only<room_fenced>(self, "room_fenced", on_fenced),
    members_only<transfer_started>(self, "transfer_started", on_transfer_started),
    members_only<transfer_done>(self, "transfer_done", on_transfer_done),
    members_only<to_decider>(self, "to_decider",
                             [](self_ptr self, to_decider& msg) {
                               route_to_decider(self, decider_ref{msg.side, msg.dp_rank},
                                                std::move(msg.payload));
                             }),
    members_only<to_rank>(self, "to_rank",
                          [](self_ptr self, to_rank& msg) {
                            send_to_rank(self, msg.rank, std::move(msg.payload));
                          }),
    [=](directory_update& msg) {
      if (from_registry(self))
        on_directory(self, msg);
    },
    [=](rank_down& msg) {
      if (from_registry(self))
        on_rank_down(self, msg);
    },
    [=](transport_control& msg) {
      if (!from_member(self, "a connection message"))
        return;
      // The data plane's connection set-up rides the control plane: from
      // this rank's worker to the peer's manager, from there to its worker.
      auto& st = self->state;
      if (msg.from == me(self).id) {
        if (auto target = st.peers->find(msg.to))
          self->send(target->manager, std::move(msg));
        else
          logger()->debug("{}: no rank {} in the directory for a {} connection message",
                          to_string(me(self)), msg.to, msg.transport);
      } else if (msg.to == me(self).id && st.worker) {
        self->send(st.worker, std::move(msg));
      }
    },
    [=](const resolve_group& msg) -> caf::result<group_reply> {
      if (!from_member(self, "resolve_group"))
        return make_error(errc::unauthorized, "not a member");
      return group_reply{self->state.peers->group(msg.side, msg.dp_rank)};
    },
    [=](const get_side_shape& msg) -> caf::result<side_shape> {
      if (!from_member(self, "get_side_shape"))
        return make_error(errc::unauthorized, "not a member");
      return self->state.peers->shape(msg.side);
    },
    [=](const take_failure& msg) -> caf::result<failure_reply> {
      if (!from_member(self, "take_failure"))
        return make_error(errc::unauthorized, "not a member");
      // For actor-based schedulers: the cause also came with the event.
      auto& st = self->state;
      failure_reply out;
      if (auto* err = st.failures->find(msg.room)) {
        out.found = true;
        out.error = *err;
      }
      return out;
    },
    [=](const get_stats&) -> caf::result<manager_stats> {
      if (!from_member(self, "get_stats"))
        return make_error(errc::unauthorized, "not a member");
      auto& st = self->state;
      auto out = st.counters;
      out.stranger_messages = st.metrics->strangers();
      out.live_rooms = st.rooms->size();
      out.failure_records = st.failures->size();
      out.successes = st.failures->successes();
      out.origin_failures = st.failures->origin_failures();
      out.propagated_failures = st.failures->propagated_failures();
      // Early failures are counted apart: they expire on their own.
      out.parked = st.parked->size() - st.parked->failures() + st.rooms->dead_size()
                   + st.rooms->fencing();
      out.early_failures = st.parked->failures();
      out.tombstones = st.rooms->tombstones();
      return out;
    },
    [=](join_atom, std::string& host, uint16_t port) -> caf::result<caf::ok_atom> {
      // The rank's own start: where its manager is published, then register
      // (the control actor answers the rank).
      if (!from_here(self))
        return make_error(errc::unauthorized, "not a member");
      auto rp = self->make_response_promise();
      rp.delegate(self->state.control, join_atom::value, std::move(host), port);
      return rp;
    },
    // From the control actor: what became of links and the registry.
    [=](link_made& msg) {
      if (from_here(self))
        on_link_made(self, msg);
    },
    [=](const release_link& msg) -> caf::result<bool> {
      if (!from_here(self))
        return make_error(errc::unauthorized, "not a member");
      return on_release_link(self, msg);
    },
    [=](idle_atom, const std::vector<caf::node_id>& nodes)
      -> caf::result<std::vector<caf::node_id>> {
      if (!from_here(self))
        return make_error(errc::unauthorized, "not a member");
      return unused_nodes(self, nodes);
    },
    [=](registry_atom, caf::actor& registry) {
      if (from_here(self))
        self->state.registry = std::move(registry);
    },
    to_control<link_hello>(self, "link_hello", false),
    to_control<link_reply>(self, "link_reply", false),
    to_control<link_finish>(self, "link_finish", false),
    to_control<link_ack>(self, "link_ack", false),
    to_control<link_close>(self, "link_close", true),
    to_control<link_closed>(self, "link_closed", true),
    // Its own timers only: the manager is published, and a timer a peer
    // could start would start another each time it fires.
    [=](decide_atom) {
      if (self->current_sender() == self->ctrl())
        decide_unopened(self);
    },
    [=](flush_atom) {
      if (self->current_sender() == self->ctrl())
        flush_outbox(self);
    },
    members_only<control_bundle>(self, "a bundle of control messages", on_bundle),
    [=](to_peer& msg) {
      // Only a room of this rank has the manager send for it.
      if (from_here(self) && msg.dest && !detail::same_node(msg.dest, self))
        send_ctrl(self, msg.dest, std::move(msg.payload));
    },
    [=](sweep_atom) {
      if (self->current_sender() != self->ctrl())
        return;
      sweep(self);
      self->delayed_send(self, sweep_interval, sweep_atom::value);
    },
    // A pull's messages and a layer's landing (CAF matches in order: the
    // room messages every transfer has come first).
    members_only<source_ready>(self, "source_ready", on_source_ready),
    members_only<reads_done>(self, "reads_done", on_reads_done),
    members_only<chunk_landed>(self, "chunk_landed", on_chunk_landed),
    // The registry's word checked (rare: last, after what every room sends).
    [=](probe_done& msg) {
      if (from_here(self))
        on_probe_done(self, msg);
    },
    [=](suspects_atom) {
      if (self->current_sender() == self->ctrl())
        on_suspects_due(self);
    },
  };
}

} // namespace kvroom
