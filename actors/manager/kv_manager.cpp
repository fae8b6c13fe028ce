#include "kvroom/actors/manager/kv_manager.hpp"

#include <cstring>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
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
  retry_links(self, now);
  close_idle_links(self, now);
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
  st.members = params.members ? params.members : std::make_shared<const membership>();
  st.trust = params.trust ? params.trust : std::make_shared<trust_table>();
  st.registry = params.registry;
  st.data_plane = params.data_plane;
  st.registry_host = params.registry_host;
  st.registry_port = params.registry_port;
  st.registration_wait_ms = params.registration_wait_ms;
  st.link_keeper = params.link_keeper;
  st.links.emplace(params.self.id, st.members,
                   link_timing{st.limits.query_timeout_ms, st.limits.idle_link_ms},
                   std::random_device{}());
  st.peers.emplace(params.self.id, st.timing.lost_window_ms());
  st.rooms.emplace(st.limits.max_tombstones);
  st.failures.emplace(params.self);
  st.parked.emplace(st.limits.max_parked, st.timing.parking_ms());
  if (st.worker)
    self->send(st.worker, attach_atom::value, caf::actor_cast<caf::actor>(self));
  st.chaos_rng.seed(params.chaos.seed ^ static_cast<uint64_t>(params.self.id));
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
    self->state.rooms->for_each([&](room_id, const room_directory::entry& e) {
      self->send_exit(e.actor, msg.reason);
    });
    self->quit(msg.reason);
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
    if (st.registry && msg.source == st.registry.address()) {
      on_registry_down(self, msg.reason);
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
      // The rank's own start: where its manager is published, then register.
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return make_error(errc::unauthorized, "not a member");
      auto& st = self->state;
      auto e = std::make_shared<rank_entry>(*st.self_entry);
      e->control_host = std::move(host);
      e->control_port = port;
      st.self_entry = std::move(e);
      st.joining_rank = self->make_response_promise();
      st.join_deadline_ms = room_timing::now() + st.registration_wait_ms;
      start_registration(self);
      return *st.joining_rank;
    },
    [=](reconnect_atom) { reconnect_registry(self); },
    [=](rejoin_atom) {
      if (self->state.joining_rank)
        start_registration(self);
    },
    [=](link_hello& msg) { on_link_hello(self, msg); },
    [=](link_reply& msg) { on_link_reply(self, msg); },
    [=](link_finish& msg) { on_link_finish(self, msg); },
    [=](link_ack& msg) { on_link_ack(self, msg); },
    members_only<link_close>(self, "link_close", on_link_close),
    members_only<link_closed>(self, "link_closed", on_link_closed),
    [=](decide_atom) { decide_unopened(self); },
    [=](links_atom) { on_link_timer(self); },
    [=](sweep_atom) {
      sweep(self);
      self->delayed_send(self, sweep_interval, sweep_atom::value);
    },
    // A pull's messages and a layer's landing (CAF matches in order: the
    // room messages every transfer has come first).
    members_only<source_ready>(self, "source_ready", on_source_ready),
    members_only<reads_done>(self, "reads_done", on_reads_done),
    members_only<chunk_landed>(self, "chunk_landed", on_chunk_landed),
  };
}

} // namespace kvroom
