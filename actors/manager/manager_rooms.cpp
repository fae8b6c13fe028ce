#include "kvroom/actors/manager/manager_rooms.hpp"

#include <algorithm>
#include <optional>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/nodes.hpp"
#include "kvroom/actors/manager/manager_links.hpp"
#include "kvroom/actors/room/room_port.hpp"
#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

namespace {

using route_t = room_directory::route_t;

// -- failure fan-out and the fence ------------------------------------------------

/// Sends a decided failure to every other rank of the room (see
/// peer_directory::fan_out_targets).
void fan_out(manager_ptr self, const kv_transfer_error& err,
             const std::vector<rank_ref>& counterparts) {
  auto& st = self->state;
  for (auto& e : st.peers->fan_out_targets(me(self), counterparts)) {
    if (st.chaos.drop_fan_out) {
      logger()->debug("{}: sabotage: fan-out of room {} to {} dropped",
                      to_string(me(self)), err.bootstrap_room, to_string(e->rank));
      continue;
    }
    send_ctrl(self, e->manager, room_failed{err.bootstrap_room, err, true, me(self).id});
  }
  // Listed, not linked yet: parked for them, and their links wanted.
  if (!st.chaos.drop_fan_out)
    for (auto id : st.peers->fan_out_unlinked(me(self), counterparts))
      send_to_rank(self, id, room_failed{err.bootstrap_room, err, true, me(self).id});
}

/// Tells decode rank `decode` that this prefill rank writes nothing more of
/// `room` into its pages.
void send_fenced(manager_ptr self, room_id room, rank_id decode) {
  send_to_rank(self, decode, room_fenced{room, me(self).id, decode});
}

/// Prefill: room `room` failed or its actor died; once the worker moves
/// nothing of it, every decode rank in `targets` hears so.
void start_fence(manager_ptr self, room_id room, const std::vector<rank_id>& targets) {
  self->state.rooms->fence(room, targets);
  self->send(self->state.worker, fence_room{room});
}

/// The rank's metrics hear of a concluded room.
void count_conclusion(manager_ptr self, const room_concluded& msg, uint64_t opened_ms) {
  auto now = monotonic_ms();
  auto secs = [&](uint64_t since) { return static_cast<double>(now - since) / 1000.0; };
  bool ok = msg.state == kv_poll::success;
  self->state.metrics->concluded(ok, !ok && msg.error.is_from_another_rank,
                                 ok ? failure_cause::other : msg.error.cause,
                                 opened_ms > 0 ? secs(opened_ms) : 0.0,
                                 msg.transfer_from_ms > 0 ? secs(msg.transfer_from_ms) : -1.0,
                                 msg.bytes, transport_index(msg.transport));
}

// -- the decider -------------------------------------------------------------------

/// Sends to the decider of `group`; false when the directory does not list
/// it yet.
bool send_to_decider(manager_ptr self, const decider_ref& group, caf::message& payload) {
  if (is_decider(me(self), group)) {
    self->send(self, std::move(payload));
    return true;
  }
  auto e = self->state.peers->decider(group);
  if (!e)
    return false;
  // Room handles in a part stay in this process: one sent to another makes
  // CAF create, announce and later kill a proxy there.
  if (!detail::same_node(e->manager, self) && payload.match_elements<part_done>()) {
    auto part = payload.get_as<part_done>(0);
    part.decode_room = nullptr;
    part.prefill_room = nullptr;
    payload = caf::make_message(std::move(part));
  }
  send_ctrl(self, e->manager, std::move(payload));
  return true;
}

/// Arms the one timer that decides parked proposals (the sweep's period
/// follows the timeouts and can be seconds).
void schedule_deciding(manager_ptr self) {
  auto& st = self->state;
  if (st.deciding)
    return;
  st.deciding = true;
  self->delayed_send(self, std::chrono::milliseconds{st.timing.unopened_grace_ms()},
                     decide_atom::value);
}

// -- rooms whose actor died ----------------------------------------------------------

/// Where the effects of a room with no actor go: the manager carries them
/// out itself (a room whose actor died, an answer from a tombstone).
class manager_port final : public room_port {
public:
  /// `p`: the room's protocol here (null for an answer from a tombstone).
  manager_port(manager_ptr self, room_id room, const room_protocol* p)
    : self_(self), room_(room), protocol_(p) {
    // nop
  }

  /// The terminal state reached the scheduler.
  bool published = false;

  void publish(kv_poll state, kv_transfer_error error) override {
    if (!is_terminal(state))
      return;
    auto& st = self_->state;
    if (st.data_plane)
      st.data_plane->revoke(room_);
    if (st.inbox)
      self_->send(st.inbox, room_event{room_, state, std::move(error)});
    published = true;
  }

  void concluded(const room_effect& fx) override {
    on_concluded(self_, room_concluded{room_, fx.state, fx.error,
                                       protocol_ ? protocol_->counterparts()
                                                 : std::vector<rank_ref>{},
                                       fx.fan_out, fx.requested});
  }

  void to_decider(const decider_ref& group, caf::message msg) override {
    route_to_decider(self_, group, std::move(msg));
  }

  void to_rank(rank_id rank, caf::message msg) override {
    send_to_rank(self_, rank, std::move(msg));
  }

private:
  manager_ptr self_;
  room_id room_;
  const room_protocol* protocol_;
};

/// Carries out what the protocol decided for a room whose actor is gone.
void run_dead(manager_ptr self, room_id room, room_effects& effects) {
  auto& st = self->state;
  auto* p = st.rooms->dead(room);
  if (!p)
    return;
  manager_port port{self, room, p};
  carry_out(room, me(self), effects, port);
  if (!port.published)
    return;
  // No room is left to clear: the event carried the cause, the tombstone
  // keeps it for late peers, and no record outlives the room.
  st.failures->forget(room);
  st.rooms->bury_dead(room);
}

/// A room actor died before its room concluded: its protocol carries the
/// room on here (room_protocol::orphaned), with this rank as the origin of
/// its failure.
void carry_on_dead(manager_ptr self, room_id room, const room_directory::entry& entry,
                   const caf::error& reason) {
  auto& st = self->state;
  auto& mine = me(self);
  auto now = monotonic_ms();
  room_protocol::options opts;
  opts.fence = !st.chaos.no_fence;
  opts.one_decider = !st.chaos.local_decisions;
  std::vector<rank_ref> decode_ranks;
  for (auto d : entry.dst_ranks)
    if (auto peer = st.peers->find(d))
      decode_ranks.push_back(peer->rank);
  auto& p = st.rooms->carry(room, room_protocol::orphaned(room, mine, entry.prefill_dp, st.timing,
                                                          now, opts, entry.dst_ranks,
                                                          entry.fences, decode_ranks));
  if (mine.side == role::decode && st.worker) {
    // A pulling room's reads may still be at the worker: its Failed waits
    // until the worker says none of them moves any more (on_fenced).
    run_dead(self, room, p.reading(true, now));
    self->send(st.worker, fence_room{room});
  }
  run_dead(self, room, p.fail_local("room actor on " + to_string(mine) + " exited: "
                                      + caf::to_string(reason),
                                    failure_cause::other, now));
}

// -- destinations ----------------------------------------------------------------------

/// Tells a room about every rank lost and not back; the room decides
/// whether it depends on one.
void tell_lost(manager_ptr self, const caf::actor& room) {
  for (auto& kvp : self->state.peers->lost())
    self->send(room, kvp.second.why);
}

/// Hands an open prefill room a destination, remembering which decode rank
/// it may now write to (the fence tells that rank once it stopped).
void hand_dst(manager_ptr self, room_directory::entry& entry, dst_info info,
              std::shared_ptr<const rank_entry> peer) {
  auto& st = self->state;
  auto room = info.room;
  auto decode = info.decode_rank.id;
  if (std::find(entry.dst_ranks.begin(), entry.dst_ranks.end(), decode)
      == entry.dst_ranks.end())
    entry.dst_ranks.push_back(decode);
  // A Failed room posts nothing for a late destination: fence it now, or
  // with the fence in progress.
  if (entry.state == kv_poll::failed && !st.rooms->join_fence(room, decode))
    send_fenced(self, room, decode);
  self->send(entry.actor, dst_ready{std::move(info), std::move(peer)});
  tell_lost(self, entry.actor);
}

/// A destination this rank will never write to: the decode rank's room
/// fails with `err`, and is fenced.
void refuse_dst(manager_ptr self, const dst_info& info, kv_transfer_error err) {
  auto room = info.room;
  if (info.decode_room)
    self->send(info.decode_room, room_failed{room, std::move(err), true, me(self).id});
  else
    send_to_rank(self, info.decode_rank.id, room_failed{room, std::move(err), true, me(self).id});
  send_fenced(self, room, info.decode_rank.id);
}

/// A room decided Failed here before it opened: the destinations parked for
/// it are never written (should the room open, it finds the decision and
/// concludes at once), so their decode ranks hear so now, fence included,
/// instead of when the parking expires (a decode that aborted a request
/// waiting for its prefill held its pages for the prefill's whole hold).
void refuse_parked_dsts(manager_ptr self, room_id room, const kv_transfer_error& err) {
  for (auto& info : self->state.parked->take_dsts(room, [](const dst_info&) { return true; }))
    refuse_dst(self, info, err);
}

} // namespace

// -- opening and concluding --------------------------------------------------------

void on_opened(manager_ptr self, room_opened& msg) {
  auto& st = self->state;
  auto room = msg.room;
  self->monitor(msg.room_actor);
  room_directory::entry e;
  e.actor = msg.room_actor;
  e.prefill_dp = msg.prefill_dp;
  e.opened_ms = monotonic_ms();
  auto& entry = st.rooms->open(room, msg.room_actor.id(), std::move(e));
  // A decode room needs its prefill group first: pushed now, not asked for;
  // a prefill room with a declared layout its group and the decode TP size.
  push_group(self, entry);
  deliver_parked(self, room);
  tell_lost(self, entry.actor);
  for (auto& part : st.parked->take_parts(room))
    self->send(entry.actor, std::move(part));
  if (auto early = st.parked->take_failure(room))
    self->send(entry.actor, std::move(*early));
  if (st.parked->take_commit(room))
    self->send(entry.actor, room_committed{room});
}

void on_concluded(manager_ptr self, const room_concluded& msg) {
  auto& st = self->state;
  auto* entry = st.rooms->find(msg.room);
  if (entry) {
    entry->state = msg.state;
    entry->error = msg.error;
  }
  count_conclusion(self, msg, entry ? entry->opened_ms : 0);
  // A failed sender stops: its queued batches go, and the decode ranks that
  // gave it pages hear once nothing of it still moves.
  if (msg.state == kv_poll::failed && me(self).side == role::prefill)
    start_fence(self, msg.room, entry ? entry->dst_ranks : std::vector<rank_id>{});
  st.failures->concluded(msg.room, msg.state, msg.error, msg.requested);
  if (msg.state == kv_poll::failed && msg.fan_out)
    fan_out(self, msg.error, msg.counterparts);
  // The room's actor ended with this word and sends no down message.
  if (msg.ended)
    on_room_down(self, msg.room, caf::exit_reason::normal);
}

void on_room_down(manager_ptr self, room_id room, const caf::error& reason) {
  auto& st = self->state;
  auto closed = st.rooms->close(room);
  if (!closed)
    return;
  auto& entry = *closed;
  if (!is_terminal(entry.state) && reason != caf::exit_reason::normal) {
    // A room actor killed mid-room. Prefill: its worker may still hold
    // batches of it; stop them before decode reuses the pages.
    if (me(self).side == role::prefill)
      start_fence(self, room, entry.dst_ranks);
    carry_on_dead(self, room, entry, reason);
    return;
  }
  // Cleared: the scheduler is done with the room; the record must not
  // outlive it. The tombstone keeps the root cause for peers that ask late.
  bool failed = entry.state == kv_poll::failed;
  st.failures->forget(room);
  st.rooms->bury(room, failed, failed ? entry.error : kv_transfer_error{});
}

// -- destinations, parts, commits, failures, fences --------------------------------------

void on_dst(manager_ptr self, dst_info& info) {
  auto& st = self->state;
  auto room = info.room;
  auto peer = st.peers->find(info.decode_rank.id);
  auto to = st.rooms->route(room);
  if (to.where == route_t::open && peer) {
    hand_dst(self, *to.room, std::move(info), std::move(peer));
    return;
  }
  // Every answer below means this rank never writes for that destination.
  if (to.where == route_t::tombstone) {
    auto& grave = *to.grave;
    refuse_dst(self, info,
               grave.failed ? grave.error
                            : kv_transfer_error{room,
                                                "room already cleared on prefill rank "
                                                  + to_string(me(self)),
                                                true, me(self).id});
    return;
  }
  if (auto* early = st.parked->failure(room); early && early->propagated) {
    refuse_dst(self, info, early->error);
    return;
  }
  if (!st.parked->park_dst(info, monotonic_ms()))
    refuse_dst(self, info,
               kv_transfer_error{room,
                                 to_string(me(self)) + " holds "
                                   + std::to_string(st.parked->size())
                                   + " messages for rooms not opened yet (limit "
                                   + std::to_string(st.limits.max_parked) + ")",
                                 true, me(self).id});
}

void on_dst_sent(manager_ptr self, const dst_sent& msg) {
  // Decode: remember where the room's pages went.
  if (auto* entry = self->state.rooms->find(msg.room)) {
    auto& xs = entry->dst_ranks;
    if (std::find(xs.begin(), xs.end(), msg.prefill_rank) == xs.end())
      xs.push_back(msg.prefill_rank);
  }
}

namespace {

/// Answers rank `asking`'s decision request for a room whose actor ended
/// (a bounced request, see `ask_room`) with what the room concluded: its
/// entry still open here (its `room_concluded` came first, its close not
/// yet: a Success the fence held ends by its down message) or its
/// tombstone. A room killed before it concluded needs no
/// answer: its carried protocol decides as the decider and fans out.
void answer_for_ended(manager_ptr self, room_id room, rank_id asking) {
  auto& st = self->state;
  auto to = st.rooms->route(room);
  std::optional<room_effect> answer;
  if (to.where == route_t::open && is_terminal(to.room->state))
    answer = room_protocol::answer_cleared(to.room->state == kv_poll::failed, to.room->error,
                                           asking);
  else if (to.where == route_t::tombstone)
    answer = room_protocol::answer_cleared(to.grave->failed, to.grave->error, asking);
  if (!answer)
    return;
  room_effects answers{std::move(*answer)};
  manager_port port{self, room, nullptr};
  carry_out(room, me(self), answers, port);
}

/// Hands an open room a decision request as a CAF request: a room ends on
/// its own once it finished (room_protocol::finished), possibly with this
/// request already on its way, and CAF bounces a request to an ended actor
/// where it drops a plain message. The asker then hears from here what the
/// room concluded instead of waiting out its decision window and
/// concluding alone (a second origin). Requests are the failure path only.
void ask_room(manager_ptr self, const caf::actor& room_actor, room_failed msg) {
  auto room = msg.room;
  auto asking = msg.from;
  self->request(room_actor, caf::infinite, std::move(msg))
    .then([] { /* the room took it: its answer goes through the managers */ },
          [self, room, asking](const caf::error&) { answer_for_ended(self, room, asking); });
}

} // namespace

void on_failed(manager_ptr self, room_failed& msg) {
  auto& st = self->state;
  auto room = msg.room;
  auto to = st.rooms->route(room);
  switch (to.where) {
    case route_t::open:
      if (msg.propagated)
        self->send(to.room->actor, std::move(msg));
      else
        ask_room(self, to.room->actor, std::move(msg));
      return;
    case route_t::dead:
      run_dead(self, room,
               to.protocol->on_failure(msg.error, !msg.propagated, msg.from, monotonic_ms()));
      return;
    case route_t::tombstone:
      if (!msg.propagated) {
        // A rank asks the decider of a room cleared here: answer with what
        // the room concluded.
        room_effects answer{
          room_protocol::answer_cleared(to.grave->failed, to.grave->error, msg.from)};
        manager_port port{self, room, nullptr};
        carry_out(room, me(self), answer, port);
      } else {
        logger()->debug("{}: failure for cleared room {} ignored", to_string(me(self)), room);
      }
      return;
    case route_t::unknown:
      break;
  }
  if (!msg.propagated) {
    // A proposal for a room this decider has not opened: decided already
    // (see `decide_unopened`), or kept for the room, which may be opening
    // this very moment and must see it as the proposal it is.
    if (auto* early = st.parked->failure(room); early && early->propagated) {
      send_to_rank(self, msg.from, *early);
      return;
    }
  }
  // Kept whole, for the room should it open here.
  bool proposal = !msg.propagated;
  if (!proposal)
    refuse_parked_dsts(self, room, msg.error);
  if (!st.parked->park_failure(std::move(msg), monotonic_ms())) {
    logger()->debug("{}: early failure for room {} dropped (parking full)",
                    to_string(me(self)), room);
    return;
  }
  if (proposal)
    schedule_deciding(self);
}

void on_part(manager_ptr self, part_done& part) {
  auto& st = self->state;
  auto to = st.rooms->route(part.room);
  if (to.where == route_t::open) {
    self->send(to.room->actor, std::move(part));
    return;
  }
  auto room = part.room;
  if (to.where == route_t::tombstone || !st.parked->park_part(std::move(part), monotonic_ms()))
    logger()->debug("{}: part confirmation for room {} dropped", to_string(me(self)), room);
}

void on_committed(manager_ptr self, room_committed& msg) {
  auto& st = self->state;
  auto to = st.rooms->route(msg.room);
  switch (to.where) {
    case route_t::open:
      self->send(to.room->actor, msg);
      break;
    case route_t::dead:
      run_dead(self, msg.room, to.protocol->committed(monotonic_ms()));
      break;
    case route_t::tombstone:
      break;
    case route_t::unknown:
      if (!st.parked->park_commit(msg.room, monotonic_ms()))
        logger()->debug("{}: early commit for room {} dropped (parking full)",
                        to_string(me(self)), msg.room);
      break;
  }
}

void on_fenced(manager_ptr self, room_fenced& msg) {
  auto& st = self->state;
  if (msg.prefill_rank < 0) {
    // The worker's answer to `fence_room`: prefill, the decode ranks to
    // tell; decode, a dead room's reads are over.
    for (auto decode : st.rooms->end_fence(msg.room))
      send_fenced(self, msg.room, decode);
    if (auto* dead = st.rooms->dead(msg.room); dead && me(self).side == role::decode)
      run_dead(self, msg.room, dead->reading(false, monotonic_ms()));
    return;
  }
  auto to = st.rooms->route(msg.room);
  if (to.where == route_t::open) {
    to.room->fences.push_back(msg.prefill_rank);
    self->send(to.room->actor, msg);
  } else if (to.where == route_t::dead) {
    run_dead(self, msg.room, to.protocol->fenced(msg.prefill_rank, monotonic_ms()));
  }
}

void on_transfer_started(manager_ptr self, transfer_started& msg) {
  // Decode: a prefill room in another process reports progress by room id.
  if (auto* entry = self->state.rooms->find(msg.room))
    self->send(entry->actor, msg);
}

void on_transfer_done(manager_ptr self, transfer_done& msg) {
  auto to = self->state.rooms->route(msg.room);
  if (to.where == route_t::open)
    self->send(to.room->actor, msg);
  else if (to.where == route_t::dead)
    run_dead(self, msg.room, to.protocol->source_done(msg.src_rank, monotonic_ms()));
}

void on_source_ready(manager_ptr self, source_ready& msg) {
  // Decode, pulling: a prefill room in another process offers reads by
  // room id; a room gone here needs nothing (its source hears otherwise).
  if (auto* entry = self->state.rooms->find(msg.room))
    self->send(entry->actor, std::move(msg));
}

void on_reads_done(manager_ptr self, reads_done& msg) {
  // Prefill: a pulling decode rank in another process answers by room id.
  if (auto* entry = self->state.rooms->find(msg.room))
    self->send(entry->actor, std::move(msg));
}

void on_chunk_landed(manager_ptr self, chunk_landed& msg) {
  // Decode: a pushing prefill room in another process tells, by room id,
  // that a layer landed; a room gone here needs nothing.
  if (auto* entry = self->state.rooms->find(msg.room))
    self->send(entry->actor, std::move(msg));
}

// -- the decider -------------------------------------------------------------------------

void route_to_decider(manager_ptr self, const decider_ref& group, caf::message payload) {
  if (send_to_decider(self, group, payload))
    return;
  // Not registered yet (or gone): kept for the next directory update, at
  // most a bootstrap timeout; the waiting room's own deadline fails it.
  want_link(self, self->state.peers->listed_decider(group));
  if (!self->state.parked->park_for_decider(group, std::move(payload), monotonic_ms()))
    logger()->debug("{}: message for the decider of {} dp{} dropped (parking full)",
                    to_string(me(self)), to_string(group.side), group.dp_rank);
}

void send_parked(manager_ptr self) {
  auto& st = self->state;
  st.parked->flush_deciders(
    [&](const decider_ref& to, caf::message& m) { return send_to_decider(self, to, m); });
  st.parked->flush_ranks([&](rank_id to, caf::message& m) {
    auto peer = st.peers->find(to);
    if (peer)
      send_ctrl(self, peer->manager, std::move(m));
    // A rank lost meanwhile gets nothing: dropped here.
    return peer != nullptr || st.peers->lost().count(to) != 0;
  });
}

void park_for_rank(manager_ptr self, rank_id id, caf::message msg) {
  auto& st = self->state;
  if (id == me(self).id || st.peers->lost().count(id) != 0) {
    logger()->debug("{}: message for rank {} dropped (lost, or this rank)", to_string(me(self)),
                    id);
    return;
  }
  want_link(self, st.peers->listed(id));
  if (!st.parked->park_for_rank(id, std::move(msg), monotonic_ms()))
    logger()->debug("{}: message for rank {} dropped (parking full)", to_string(me(self)), id);
}

void decide_unopened(manager_ptr self) {
  auto& st = self->state;
  st.deciding = false;
  // Proposals for rooms that did not open here within the grace are decided
  // by this manager for the room, so the asking rank is not left waiting:
  // the first failure heard of is the decision, fanned out to this group
  // and the whole other side, and kept should the room open.
  auto now = monotonic_ms();
  for (auto& proposal : st.parked->take_proposals(now, st.timing.unopened_grace_ms())) {
    auto decision = std::move(proposal);
    decision.propagated = true;
    decision.from = me(self).id;
    decision.error = room_protocol::decide_unopened(std::move(decision.error));
    fan_out(self, decision.error, {});
    refuse_parked_dsts(self, decision.room, decision.error);
    st.parked->set_failure(std::move(decision), now);
  }
  if (st.parked->has_proposals())
    schedule_deciding(self);
}

// -- what rooms need of the directory ------------------------------------------------------

void push_group(manager_ptr self, const room_directory::entry& e) {
  auto& st = self->state;
  auto& mine = me(self);
  // The links this room needs, made now if they are not (lazy links): a
  // decode room its prefill group (the decider among them), a prefill
  // room its group's decider, and with a declared layout its whole group.
  if (mine.side == role::decode) {
    want_links(self, st.peers->listed_group(role::prefill, e.prefill_dp));
  } else {
    want_link(self, st.peers->listed_decider(decider_ref{role::prefill, mine.dp_rank}));
    if (st.self_entry->has_parallel)
      want_links(self, st.peers->listed_group(role::prefill, mine.dp_rank));
  }
  if (mine.side == role::decode) {
    auto group = st.peers->group(role::prefill, e.prefill_dp);
    if (!group.empty())
      self->send(e.actor, group_reply{std::move(group)});
  } else if (st.self_entry->has_parallel) {
    auto group = st.peers->group(role::prefill, mine.dp_rank);
    if (!group.empty())
      self->send(e.actor, group_reply{std::move(group), st.peers->decode_tp()});
  }
}

void deliver_parked(manager_ptr self, room_id room) {
  auto& st = self->state;
  auto* entry = st.rooms->find(room);
  if (!entry)
    return;
  // A destination can outrun the registry's update: only those whose
  // decode rank the directory knows go.
  auto ready = st.parked->take_dsts(room, [&](const dst_info& x) {
    return st.peers->find(x.decode_rank.id) != nullptr;
  });
  for (auto& x : ready) {
    auto peer = st.peers->find(x.decode_rank.id);
    hand_dst(self, *entry, std::move(x), std::move(peer));
  }
}

void rooms_lost(manager_ptr self, const peer_lost& why) {
  auto& st = self->state;
  // Concluded rooms hear too: a decode room holding Failed for this rank's
  // fence is fenced by its loss.
  st.rooms->for_each([&](room_id, const room_directory::entry& e) { self->send(e.actor, why); });
  auto now = monotonic_ms();
  for (auto room : st.rooms->dead_rooms())
    if (auto* p = st.rooms->dead(room))
      run_dead(self, room, p->peer_lost(why.rank, why.reason, now));
}

void sweep_rooms(manager_ptr self, uint64_t now) {
  auto& st = self->state;
  // Rooms that conclude quickly never hear from the sweep; a room that has
  // lived a tick interval checks its deadlines once per interval. Failed
  // rooms too: a decode room may hold its Failed state for a fence, and only
  // a tick ends that wait at its deadline.
  auto tick = static_cast<uint64_t>(st.timing.tick().count());
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    if (e.state != kv_poll::success && now - e.opened_ms >= tick)
      self->send(e.actor, tick_atom::value);
  });
  for (auto room : st.rooms->dead_rooms())
    if (auto* p = st.rooms->dead(room))
      run_dead(self, room, p->tick(now));
  for (auto& x : st.parked->expire(now)) {
    kv_transfer_error err{x.room,
                          to_string(me(self)) + " opened no sender for room "
                            + std::to_string(x.room) + " within "
                            + std::to_string(st.timeouts.bootstrap_ms) + " ms",
                          true, me(self).id};
    logger()->warn("{}: destination for room {} from {} expired unused", to_string(me(self)),
                   x.room, to_string(x.decode_rank));
    refuse_dst(self, x, std::move(err));
  }
}

} // namespace kvroom::detail
