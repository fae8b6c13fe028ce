#include "kvroom/actors/manager/manager_peers.hpp"

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/manager/manager_links.hpp"
#include "kvroom/actors/manager/manager_rooms.hpp"

namespace kvroom::detail {

namespace {

void count_peers(manager_ptr self) {
  auto& st = self->state;
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  st.metrics->set_suspected(st.suspects->size());
}

/// The usable peers changed: what waited for one goes out.
void peers_changed(manager_ptr self) {
  auto& st = self->state;
  count_peers(self);
  send_parked(self);
  for (auto room : st.parked->dst_rooms())
    deliver_parked(self, room);
  // Rooms that opened before their group registered learn it now (a room
  // that has it ignores the push); directory updates are rare.
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    if (!is_terminal(e.state))
      push_group(self, e);
  });
}

/// How long a probe waits for a connect's answer: a live process's kernel
/// answers in microseconds on a host, a round trip across hosts.
constexpr int64_t probe_timeout_ms = 300;

} // namespace

/// A rank never linked here is lost, by the registry's word (checked, or a
/// rank that left in order): remembered as lost, so a room that names it
/// fails at once, and the rooms with it fail now. Only the incarnation that
/// went: a replacement listed meanwhile is not lost, and one listed later
/// erases the loss (the registry answers a replacement once every listed
/// rank applied its listing).
static void lose_unlinked(manager_ptr self, const rank_ref& rank, uint64_t incarnation,
                          const std::string& reason) {
  auto& st = self->state;
  auto listed = st.peers->listed(rank.id);
  if (!listed || listed->incarnation == incarnation) {
    st.peers->unlist(rank.id);
    unwant(self, rank.id);
  }
  logger()->debug("{}: rank {} left the directory: {}", to_string(me(self)), to_string(rank),
                  reason);
  peer_lost why{rank, "rank " + to_string(rank) + " lost: " + reason
                        + " (seen by the bootstrap registry)"};
  st.peers->lose(why, room_timing::now(), incarnation);
  count_peers(self);
  rooms_lost(self, why);
}

void distrust(manager_ptr self, const rank_entry& gone) {
  if (!gone.manager || gone.manager.node() == self->node())
    return;
  self->send(self->state.control, link_dropped{gone.rank.id, gone.manager});
}

void unwant(manager_ptr self, rank_id id) {
  self->send(self->state.control, unwant_atom::value, id);
}

void on_peer_usable(manager_ptr self, const std::shared_ptr<const rank_entry>& peer) {
  self->monitor(peer->manager);
  logger()->debug("{}: linked to {} at {}:{}", to_string(me(self)), to_string(peer->rank),
                  peer->control_host, peer->control_port);
  peers_changed(self);
}

void on_directory(manager_ptr self, directory_update& msg) {
  // A suspect the registry lists again registered again: it lives (or, as
  // another incarnation, the one reported is gone).
  if (self->state.suspects->size() != 0)
    for (auto& e : msg.ranks)
      on_rank_seen(self, e.rank.id, e.incarnation);
  auto changes = self->state.peers->update(msg.ranks);
  for (auto& e : changes.usable)
    self->monitor(e->manager);
  // Links only where something waits: messages parked for a rank or a
  // decider before its listing came; open rooms ask in peers_changed.
  auto& st = self->state;
  for (auto id : st.parked->waiting_ranks())
    want_link(self, st.peers->listed(id));
  for (auto& group : st.parked->waiting_deciders())
    want_link(self, st.peers->listed_decider(group));
  peers_changed(self);
}

void on_rank_down(manager_ptr self, rank_down& msg) {
  auto& st = self->state;
  auto e = st.peers->find(msg.rank.id);
  bool same = e && (msg.incarnation == 0 || e->incarnation == msg.incarnation);
  // etcd's word is final: the rank's lease is gone, and with it its claim
  // to its id and place, whatever our link says.
  if (msg.final) {
    auto listed = st.peers->listed(msg.rank.id);
    bool listed_same = listed && (msg.incarnation == 0 || listed->incarnation == msg.incarnation);
    if (listed_same) {
      st.peers->unlist(msg.rank.id);
      unwant(self, msg.rank.id);
    }
    if (same) {
      if (auto peer = st.peers->take_peer(msg.rank.id))
        self->demonitor(peer->manager);
      on_peer_down(self, *e, msg.reason, msg.orderly);
    } else if (!e && (!listed || listed_same)) {
      // Never linked: remembered as lost all the same, so a room that
      // names it fails at once instead of at its timeout (unless a newer
      // incarnation is listed already: it replaces the one gone).
      logger()->debug("{}: rank {} left the directory: {}", to_string(me(self)),
                      to_string(msg.rank), msg.reason);
      st.peers->lose(peer_lost{msg.rank, "rank " + to_string(msg.rank) + " lost: " + msg.reason},
                     room_timing::now(), msg.incarnation);
      count_peers(self);
    }
    return;
  }
  // A peer we linked to directly: our own monitor of that link decides.
  // The registry losing its connection to a rank says nothing about ours
  // (a restarting registry, a registry node's flaky network).
  if (e && e->control_port != 0) {
    logger()->debug("{}: the registry lost {}; our link to it decides", to_string(me(self)),
                    to_string(msg.rank));
    return;
  }
  // Listed, never linked: nothing to wait for any more (unless what is
  // listed is a newer incarnation, which replaces the one gone).
  auto listed = st.peers->listed(msg.rank.id);
  bool listed_gone = listed && (msg.incarnation == 0 || listed->incarnation == msg.incarnation);
  // In this process: handled once, whichever of this and our own monitor's
  // down message comes first.
  if (auto peer = st.peers->take_peer(msg.rank.id)) {
    if (listed_gone || !listed) {
      st.peers->unlist(msg.rank.id);
      unwant(self, msg.rank.id);
    }
    self->demonitor(peer->manager);
    on_peer_down(self, *peer, msg.reason + " (seen by the bootstrap registry)", msg.orderly);
    return;
  }
  if (!listed) {
    unwant(self, msg.rank.id);
    return;
  }
  if (!listed_gone)
    return; // a newer incarnation is listed: it replaces the one gone
  if (msg.incarnation == 0) {
    // Which incarnation went is not known: nothing to remember as lost.
    st.peers->unlist(msg.rank.id);
    unwant(self, msg.rank.id);
    return;
  }
  // The registry's word is all we have of a rank we never linked to. A
  // prefill rank's KV went with it, so no room waiting on it can succeed,
  // not even with a replacement on its id (which holds none of it); a
  // decode rank's part of a room in flight went with it too (a replacement
  // serves new rooms, never one its predecessor held: a scheduler knows
  // nothing of the requests a dead process held). Those rooms fail now
  // instead of at their deadlines, or when the scheduler initialises them
  // (measured: a vLLM consumer's loads from a producer SIGKILLed before it
  // answered any link waited out their timeout; `kvroom-bench detect`, the
  // rooms of decode TP 0 waited for their init, 100 ms there, once decode
  // TP ranks stopped linking to each other).
  //
  // A rank that left in order said so itself. Any other report is checked
  // first: a registry stalled past its connection timeout reports live
  // ranks lost (registry_suspects.hpp).
  if (msg.orderly) {
    lose_unlinked(self, msg.rank, msg.incarnation, msg.reason);
    return;
  }
  auto& suspects = *st.suspects;
  if (!suspects.reported(msg.rank, msg.incarnation, msg.reason, room_timing::now()))
    return;
  count_peers(self);
  logger()->debug("{}: the registry lost {} ({}), never linked here: checking it before its "
                  "rooms fail",
                  to_string(me(self)), to_string(msg.rank), msg.reason);
  spawn_probe(self->home_system(), caf::actor_cast<caf::actor>(self), msg.rank.id,
              msg.incarnation, listed->control_host, listed->control_port,
              std::chrono::milliseconds(probe_timeout_ms));
  want_link(self, listed);
  self->delayed_send(self, std::chrono::milliseconds(suspects.window_ms()),
                     suspects_atom::value);
}

void on_probe_done(manager_ptr self, const probe_done& msg) {
  auto gone = self->state.suspects->probed(msg.id, msg.incarnation, msg.outcome);
  if (!gone) {
    logger()->debug("{}: rank {}'s control endpoint: {}; waiting for it to link",
                    to_string(me(self)), msg.id, to_string(msg.outcome));
    return;
  }
  lose_unlinked(self, gone->rank, gone->incarnation,
                gone->reason + "; its control endpoint refuses connections");
}

void on_suspects_due(manager_ptr self) {
  for (auto& gone : self->state.suspects->expired(room_timing::now()))
    lose_unlinked(self, gone.rank, gone.incarnation,
                  gone.reason + "; it did not link to us within "
                    + std::to_string(self->state.suspects->window_ms()) + " ms");
}

void on_rank_seen(manager_ptr self, rank_id id, uint64_t incarnation) {
  auto& suspects = *self->state.suspects;
  if (suspects.size() == 0)
    return;
  if (suspects.answered(id, incarnation)) {
    self->state.metrics->report_refuted();
    count_peers(self);
    logger()->info("{}: the bootstrap registry reported rank {} lost, but it answers: nothing "
                   "fails",
                   to_string(me(self)), id);
    return;
  }
  if (auto gone = suspects.replaced(id, incarnation))
    lose_unlinked(self, gone->rank, gone->incarnation,
                  gone->reason + "; a new incarnation holds its id");
}

void on_peer_down(manager_ptr self, const rank_entry& lost, const std::string& reason,
                  bool orderly) {
  auto& st = self->state;
  auto& peer = lost.rank;
  std::string where;
  for (auto& e : lost.endpoints)
    if (e.transport == "tcp")
      where = " at " + e.address;
  auto text = "rank " + to_string(peer) + where + " lost: " + reason;
  distrust(self, lost);
  // Its open rooms: another group's rooms in flight do not make a rank
  // that left in order a loss.
  size_t open = 0;
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    open += !is_terminal(e.state) && e.involves(peer) ? 1 : 0;
  });
  // One line per lost peer; each room logs its own failure at debug. A rank
  // shutting down in order with nothing of ours in flight is no news.
  if (orderly && open == 0)
    logger()->debug("{}: rank {} left", to_string(me(self)), to_string(peer));
  else
    logger()->warn("{}: {} ({} rooms in flight checked)", to_string(me(self)), text, open);
  peer_lost why{peer, text};
  st.peers->lose(why, room_timing::now(), lost.incarnation);
  count_peers(self);
  rooms_lost(self, why);
}

} // namespace kvroom::detail
