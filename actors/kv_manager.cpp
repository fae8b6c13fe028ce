#include "kvroom/actors/kv_manager.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/actors/manager_links.hpp"
#include "kvroom/messages/error.hpp"
#include "kvroom/actors/room_core.hpp"
#include "kvroom/actors/room_port.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<kv_manager_state>*;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using decide_atom = caf::atom_constant<caf::atom("decide")>;

const rank_ref& me(self_ptr self) {
  return self->state.self_entry->rank;
}

uint64_t now_ms() {
  return room_timing::now();
}

/// Sends a control message to another rank's manager, delayed when the
/// rank's control chaos says so.
template <class T>
void send_ctrl(self_ptr self, const caf::actor& dest, T&& msg) {
  auto& st = self->state;
  if (st.chaos.delay_probability > 0.0 && st.chaos.max_delay_ms > 0) {
    std::uniform_real_distribution<double> coin{0.0, 1.0};
    if (coin(st.chaos_rng) < st.chaos.delay_probability) {
      std::uniform_int_distribution<uint32_t> ms{1, st.chaos.max_delay_ms};
      self->delayed_send(dest, std::chrono::milliseconds(ms(st.chaos_rng)),
                         std::forward<T>(msg));
      return;
    }
  }
  self->send(dest, std::forward<T>(msg));
}

/// Sends `msg` to rank `id`'s manager, when the directory knows it.
template <class T>
void send_to_rank(self_ptr self, rank_id id, T&& msg) {
  if (auto peer = self->state.peers->find(id))
    send_ctrl(self, peer->manager, std::forward<T>(msg));
}

/// Sends a failure to every other rank of the room: this rank's TP group and
/// each counterpart's TP group, as the directory knows them. With no known
/// counterpart (a prefill room before any decode destination arrived) the
/// whole other side hears it: ranks without the room keep it as an early,
/// expiring failure, and the rank that has it fails at once instead of at
/// its bootstrap timeout.
void fan_out(self_ptr self, const kv_transfer_error& err,
             const std::vector<rank_ref>& counterparts) {
  auto& st = self->state;
  auto& mine = me(self);
  auto in_group = [](const rank_ref& x, role side, int32_t dp) {
    return x.side == side && x.dp_rank == dp;
  };
  for (auto& e : st.peers->all()) {
    auto& r = e->rank;
    if (r.id == mine.id)
      continue;
    bool target = in_group(r, mine.side, mine.dp_rank)
                  || (counterparts.empty() && r.side != mine.side);
    for (auto& c : counterparts)
      target = target || in_group(r, c.side, c.dp_rank);
    if (!target)
      continue;
    if (st.chaos.drop_fan_out) {
      logger()->debug("{}: sabotage: fan-out of room {} to {} dropped",
                      to_string(mine), err.bootstrap_room, to_string(r));
      continue;
    }
    send_ctrl(self, e->manager, room_failed{err.bootstrap_room, err, true, mine.id});
  }
}

// -- the fence ----------------------------------------------------------------

/// Tells decode rank `decode` that this prefill rank writes nothing more of
/// `room` into its pages.
void send_fenced(self_ptr self, room_id room, rank_id decode) {
  send_to_rank(self, decode, room_fenced{room, me(self).id, decode});
}

/// Prefill: room `room` failed or its actor died; once the worker moves
/// nothing of it, every decode rank in `targets` hears so.
void start_fence(self_ptr self, room_id room, const std::vector<rank_id>& targets) {
  auto& st = self->state;
  auto& xs = st.fencing[room];
  for (auto t : targets)
    if (std::find(xs.begin(), xs.end(), t) == xs.end())
      xs.push_back(t);
  self->send(st.worker, fence_room{room});
}

/// The worker's answer to `fence_room`.
void on_worker_fenced(self_ptr self, room_id room) {
  auto& st = self->state;
  auto i = st.fencing.find(room);
  if (i == st.fencing.end())
    return;
  for (auto t : i->second)
    send_fenced(self, room, t);
  st.fencing.erase(i);
  if (auto* r = st.rooms->find(room))
    r->fence_done = true;
}

// -- conclusions and failure records -------------------------------------------

/// The rank's metrics hear of a concluded room.
void count_conclusion(self_ptr self, const room_concluded& msg, uint64_t opened_ms) {
  auto& st = self->state;
  auto now = now_ms();
  auto secs = [&](uint64_t since) { return static_cast<double>(now - since) / 1000.0; };
  bool ok = msg.state == kv_poll::success;
  st.metrics->concluded(ok, !ok && msg.error.is_from_another_rank,
                        ok ? failure_cause::other : classify(msg.error),
                        opened_ms > 0 ? secs(opened_ms) : 0.0,
                        msg.transfer_from_ms > 0 ? secs(msg.transfer_from_ms) : -1.0, msg.bytes,
                        transport_index(msg.transport));
}

void on_concluded(self_ptr self, const room_concluded& msg) {
  auto& st = self->state;
  auto* entry = st.rooms->find(msg.room);
  if (entry) {
    entry->state = msg.state;
    entry->error = msg.error;
  }
  count_conclusion(self, msg, entry ? entry->opened_ms : 0);
  if (msg.state == kv_poll::success) {
    ++st.counters.successes;
    return;
  }
  // A failed sender stops: its queued batches go, and the decode ranks that
  // gave it pages hear once nothing of it still moves.
  if (me(self).side == role::prefill)
    start_fence(self, msg.room, entry ? entry->dst_ranks : std::vector<rank_id>{});
  auto& err = msg.error;
  st.failure_records[msg.room] = err;
  auto& mine = me(self);
  // JSON lines (log_json()): the event's fields, not a sentence.
  auto event = [&] {
    nlohmann::ordered_json e;
    e["event"] = "room_failed";
    e["room"] = msg.room;
    e["rank"] = to_string(mine);
    e["rank_id"] = mine.id;
    e["origin_rank"] = err.origin_rank;
    e["propagated"] = err.is_from_another_rank;
    e["cause"] = to_string(classify(err));
    e["requested"] = msg.requested;
    e["reason"] = err.failure_reason;
    return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (err.is_from_another_rank) {
    ++st.counters.propagated_failures;
    if (log_json())
      logger()->debug("{}", event());
    else
      logger()->debug("{}: room {} failed on rank {}: {}", to_string(mine),
                      msg.room, err.origin_rank, err.failure_reason);
  } else {
    ++st.counters.origin_failures;
    // Logged once, where the failure was first identified: an error on
    // decode (the request is lost to the user), a warning on prefill; at
    // info when the scheduler asked for it.
    auto text = log_json() ? event() : to_string(mine) + ": " + to_string(err);
    if (msg.requested)
      logger()->info("{}", text);
    else if (mine.side == role::decode)
      logger()->error("{}", text);
    else
      logger()->warn("{}", text);
  }
  if (msg.fan_out)
    fan_out(self, err, msg.counterparts);
}

// -- routing to the decider ----------------------------------------------------

/// Sends to the decider of `group`; false when the directory does not list
/// it yet.
bool send_to_decider(self_ptr self, const decider_ref& group, caf::message& payload) {
  if (is_decider(me(self), group)) {
    self->send(self, std::move(payload));
    return true;
  }
  if (auto e = self->state.peers->decider(group)) {
    // Room handles in a part stay in this process: one sent to another
    // makes CAF create, announce and later kill a proxy there.
    if (e->manager.node() != self->node() && payload.match_elements<part_done>()) {
      auto part = payload.get_as<part_done>(0);
      part.decode_room = nullptr;
      part.prefill_room = nullptr;
      payload = caf::make_message(std::move(part));
    }
    send_ctrl(self, e->manager, std::move(payload));
    return true;
  }
  return false;
}

void route_to_decider(self_ptr self, const decider_ref& group, caf::message payload) {
  if (send_to_decider(self, group, payload))
    return;
  // Not registered yet (or gone): kept for the next directory update, at
  // most a bootstrap timeout; the waiting room's own deadline fails it.
  if (!self->state.parked->park_for_decider(group, std::move(payload), now_ms()))
    logger()->debug("{}: message for the decider of {} dp{} dropped (parking full)",
                    to_string(me(self)), to_string(group.side), group.dp_rank);
}

// -- rooms whose actor died ----------------------------------------------------

/// Where the effects of a room whose actor is gone go: the manager carries
/// them out itself.
class dead_room_port final : public room_port {
public:
  /// `p`: the room's protocol here (null for an answer from a tombstone).
  dead_room_port(self_ptr self, room_id room, const room_protocol* p)
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
  self_ptr self_;
  room_id room_;
  const room_protocol* protocol_;
};

/// Carries out what the protocol decided for a room whose actor is gone.
void run_dead(self_ptr self, room_id room, room_effects& effects) {
  auto& st = self->state;
  auto i = st.dead.find(room);
  if (i == st.dead.end())
    return;
  dead_room_port port{self, room, &i->second};
  carry_out(room, me(self), effects, port);
  if (!port.published)
    return;
  // No room is left to clear: the event carried the cause, the tombstone
  // keeps it for late peers, and no record outlives the room.
  auto& p = i->second;
  bool failed = p.state() == kv_poll::failed;
  st.rooms->bury(room, failed, failed ? p.failure() : kv_transfer_error{});
  st.failure_records.erase(room);
  st.dead.erase(i);
}

/// A room actor died before its room concluded: the protocol carries the
/// room on here, with this rank as the origin of its failure. Its part may
/// have been done and committed already, so it waits for the decider's word
/// like a prepared room, and a decode room's Failed waits for the fence of
/// every prefill rank that got its pages.
void carry_on_dead(self_ptr self, room_id room, const room_directory::entry& entry,
                   const std::vector<rank_id>& writers, const caf::error& reason) {
  auto& st = self->state;
  auto& mine = me(self);
  auto now = now_ms();
  room_protocol::options opts;
  opts.fence = !st.chaos.no_fence;
  opts.one_decider = !st.chaos.local_decisions;
  room_protocol p{room, mine, entry.prefill_dp, st.timing, now, opts};
  std::vector<rank_ref> counterparts;
  if (mine.side == role::decode) {
    rank_ref group;
    group.side = role::prefill;
    group.dp_rank = entry.prefill_dp;
    group.id = -1;
    counterparts.push_back(group);
    for (auto w : writers)
      p.dst_sent(w);
  } else {
    for (auto d : entry.dst_ranks)
      if (auto peer = st.peers->find(d))
        counterparts.push_back(peer->rank);
  }
  p.set_counterparts(std::move(counterparts));
  (void) p.prepare(now);
  auto& slot = st.dead.emplace(room, std::move(p)).first->second;
  run_dead(self, room, slot.fail_local("room actor on " + to_string(mine) + " exited: "
                                         + caf::to_string(reason),
                                       now));
}

// -- destinations, parts, failures ---------------------------------------------

/// Tells a room about every rank lost and not back; the room decides
/// whether it depends on one.
void tell_lost(self_ptr self, const caf::actor& room) {
  for (auto& kvp : self->state.peers->lost())
    self->send(room, kvp.second.why);
}

/// Hands an open prefill room a destination, remembering which decode rank
/// it may now write to (the fence tells that rank once it stopped).
void hand_dst(self_ptr self, room_directory::entry& entry, dst_info info,
              std::shared_ptr<const rank_entry> peer) {
  auto& st = self->state;
  auto room = info.room;
  auto decode = info.decode_rank.id;
  if (std::find(entry.dst_ranks.begin(), entry.dst_ranks.end(), decode)
      == entry.dst_ranks.end())
    entry.dst_ranks.push_back(decode);
  // A Failed room posts nothing for a late destination: fence it now, or
  // with the fence in progress.
  if (entry.state == kv_poll::failed) {
    if (auto f = st.fencing.find(room); f != st.fencing.end())
      f->second.push_back(decode);
    else
      send_fenced(self, room, decode);
  }
  self->send(entry.actor, dst_ready{std::move(info), std::move(peer)});
  tell_lost(self, entry.actor);
}

void on_dst(self_ptr self, dst_info& info) {
  auto& st = self->state;
  auto room = info.room;
  auto peer = st.peers->find(info.decode_rank.id);
  if (auto* entry = st.rooms->find(room); entry && peer) {
    hand_dst(self, *entry, std::move(info), std::move(peer));
    return;
  }
  // Every answer below means this rank never writes for that destination.
  auto reply_failure = [&](kv_transfer_error err) {
    if (info.decode_room)
      self->send(info.decode_room, room_failed{room, std::move(err), true, me(self).id});
    else
      send_to_rank(self, info.decode_rank.id, room_failed{room, std::move(err), true, me(self).id});
    send_fenced(self, room, info.decode_rank.id);
  };
  if (auto* t = st.rooms->tombstone_of(room)) {
    reply_failure(t->failed ? t->error
                            : kv_transfer_error{room,
                                                "room already cleared on prefill rank "
                                                  + to_string(me(self)),
                                                true, me(self).id});
    return;
  }
  if (auto* early = st.parked->failure(room); early && early->propagated) {
    reply_failure(early->error);
    return;
  }
  if (!st.parked->park_dst(info, now_ms()))
    reply_failure(kv_transfer_error{room,
                                    to_string(me(self)) + " holds "
                                      + std::to_string(st.parked->size())
                                      + " messages for rooms not opened yet (limit "
                                      + std::to_string(st.limits.max_parked) + ")",
                                    true, me(self).id});
}

/// Arms the one timer that decides parked proposals (the sweep's period
/// follows the timeouts and can be seconds).
void schedule_deciding(self_ptr self) {
  auto& st = self->state;
  if (st.deciding)
    return;
  st.deciding = true;
  self->delayed_send(self, std::chrono::milliseconds{st.timing.unopened_grace_ms()},
                     decide_atom::value);
}

void on_failed(self_ptr self, room_failed& msg) {
  auto& st = self->state;
  auto room = msg.room;
  if (auto* entry = st.rooms->find(room)) {
    self->send(entry->actor, std::move(msg));
    return;
  }
  if (auto d = st.dead.find(room); d != st.dead.end()) {
    run_dead(self, room, d->second.on_failure(msg.error, !msg.propagated, msg.from, now_ms()));
    return;
  }
  if (auto* t = st.rooms->tombstone_of(room)) {
    if (!msg.propagated) {
      // A rank asks the decider of a room cleared here: answer with what the
      // room concluded.
      room_effects answer{room_protocol::answer_cleared(t->failed, t->error, msg.from)};
      dead_room_port port{self, room, nullptr};
      carry_out(room, me(self), answer, port);
      return;
    }
    logger()->debug("{}: failure for cleared room {} ignored", to_string(me(self)), room);
    return;
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
  if (!st.parked->park_failure(std::move(msg), now_ms())) {
    logger()->debug("{}: early failure for room {} dropped (parking full)",
                    to_string(me(self)), room);
    return;
  }
  if (proposal)
    schedule_deciding(self);
}

/// Hands a room the destinations parked for it whose decode rank the
/// directory knows (a destination can outrun the registry's update).
void deliver_parked(self_ptr self, room_id room) {
  auto& st = self->state;
  auto* entry = st.rooms->find(room);
  if (!entry)
    return;
  auto ready = st.parked->take_dsts(room, [&](const dst_info& x) {
    return st.peers->find(x.decode_rank.id) != nullptr;
  });
  for (auto& x : ready) {
    auto peer = st.peers->find(x.decode_rank.id);
    hand_dst(self, *entry, std::move(x), std::move(peer));
  }
}

/// The decode side's TP size (every decode rank has the same; registration
/// refuses another), or 0 while no decode rank with a layout is known.
int32_t decode_tp(self_ptr self) {
  for (auto& e : self->state.peers->all())
    if (e->rank.side == role::decode && e->has_parallel)
      return e->parallel.tp_size;
  return 0;
}

/// What a room needs of the directory to know its counterparts: a decode
/// room its prefill group; a prefill room with a declared parallel layout
/// its own group and the decode TP size (whom the rank mapping has it
/// write). Nothing while the directory lacks it.
void push_group(self_ptr self, const room_directory::entry& e) {
  auto& st = self->state;
  auto& mine = me(self);
  if (mine.side == role::decode) {
    auto group = st.peers->group(role::prefill, e.prefill_dp);
    if (!group.empty())
      self->send(e.actor, group_reply{std::move(group)});
  } else if (st.self_entry->has_parallel) {
    auto group = st.peers->group(role::prefill, mine.dp_rank);
    if (!group.empty())
      self->send(e.actor, group_reply{std::move(group), decode_tp(self)});
  }
}

void on_opened(self_ptr self, room_opened& msg) {
  auto& st = self->state;
  auto room = msg.room;
  self->monitor(msg.room_actor);
  room_directory::entry e;
  e.actor = msg.room_actor;
  e.prefill_dp = msg.prefill_dp;
  e.opened_ms = now_ms();
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

void on_part(self_ptr self, part_done& part) {
  auto& st = self->state;
  if (auto* entry = st.rooms->find(part.room)) {
    self->send(entry->actor, std::move(part));
    return;
  }
  auto room = part.room;
  if (st.rooms->tombstone_of(room) || !st.parked->park_part(std::move(part), now_ms()))
    logger()->debug("{}: part confirmation for room {} dropped", to_string(me(self)), room);
}

void on_room_down(self_ptr self, room_id room, const caf::error& reason) {
  auto& st = self->state;
  auto closed = st.rooms->close(room);
  if (!closed)
    return;
  auto& entry = *closed;
  bool concluded = is_terminal(entry.state);
  if (!concluded && reason != caf::exit_reason::normal) {
    // A room actor killed mid-room. Prefill: its worker may still hold
    // batches of it; stop them before decode reuses the pages. Decode: the
    // prefill ranks that got its pages and did not confirm a fence yet.
    std::vector<rank_id> writers;
    if (me(self).side == role::prefill) {
      start_fence(self, room, entry.dst_ranks);
    } else if (!st.chaos.no_fence) {
      for (auto r : entry.dst_ranks)
        if (std::find(entry.fences.begin(), entry.fences.end(), r) == entry.fences.end())
          writers.push_back(r);
    }
    carry_on_dead(self, room, entry, writers, reason);
    return;
  }
  // Cleared: the scheduler is done with the room; the record must not
  // outlive it. The tombstone keeps the root cause for peers that ask late.
  bool failed = entry.state == kv_poll::failed;
  st.failure_records.erase(room);
  st.rooms->bury(room, failed, failed ? entry.error : kv_transfer_error{});
}

// -- peers -------------------------------------------------------------------

void on_peer_down(self_ptr self, const rank_entry& lost, const std::string& reason,
                  bool orderly) {
  auto& st = self->state;
  auto& peer = lost.rank;
  std::string where;
  for (auto& e : lost.endpoints)
    if (e.transport == "tcp")
      where = " at " + e.address;
  auto text = "rank " + to_string(peer) + where + " lost: " + reason;
  // Its process no longer counts as a member unless another linked rank
  // lives there (the table stays as small as the deployment).
  if (lost.manager && lost.manager.node() != self->node()) {
    auto node = lost.manager.node();
    bool shared = st.registry && st.registry.node() == node;
    for (auto& e : st.peers->all())
      shared = shared || (e->rank.id != peer.id && e->manager && e->manager.node() == node);
    if (!shared)
      st.trust->remove(node);
  }
  size_t open = 0;
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    open += is_terminal(e.state) ? 0 : 1;
  });
  // One line per lost peer; each room logs its own failure at debug. A rank
  // shutting down in order with nothing in flight is no news.
  if (orderly && open == 0)
    logger()->debug("{}: rank {} left", to_string(me(self)), to_string(peer));
  else
    logger()->warn("{}: {} ({} rooms in flight checked)", to_string(me(self)), text, open);
  peer_lost why{peer, text};
  st.peers->lose(why, now_ms());
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  // Concluded rooms hear too: a decode room holding Failed for this rank's
  // fence is fenced by its loss.
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    self->send(e.actor, why);
  });
  std::vector<room_id> dead;
  for (auto& kvp : st.dead)
    dead.push_back(kvp.first);
  for (auto room : dead)
    if (auto d = st.dead.find(room); d != st.dead.end())
      run_dead(self, room, d->second.peer_lost(peer, text, now_ms()));
}

/// The usable peers changed: what waited for one goes out.
void peers_changed(self_ptr self) {
  auto& st = self->state;
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  st.parked->flush_deciders(
    [&](const decider_ref& to, caf::message& m) { return send_to_decider(self, to, m); });
  for (auto room : st.parked->dst_rooms())
    deliver_parked(self, room);
  // Rooms that opened before their group registered learn it now (a room
  // that has it ignores the push); directory updates are rare.
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    if (!is_terminal(e.state))
      push_group(self, e);
  });
}

void on_directory(self_ptr self, directory_update& msg) {
  auto& st = self->state;
  auto changes = st.peers->update(msg.ranks);
  for (auto& e : changes.usable)
    self->monitor(e->manager);
  detail::start_links(self, changes.to_link);
  peers_changed(self);
}

/// Proposals for rooms that did not open here within a grace period are
/// decided by this manager for the room, so the asking rank is not left
/// waiting: the first failure heard of is the decision, fanned out to this
/// group and the whole other side, and kept should the room open.
void decide_unopened(self_ptr self, uint64_t now) {
  auto& st = self->state;
  for (auto& proposal : st.parked->take_proposals(now, st.timing.unopened_grace_ms())) {
    auto decision = std::move(proposal);
    decision.propagated = true;
    decision.from = me(self).id;
    decision.error = room_protocol::decide_unopened(std::move(decision.error));
    fan_out(self, decision.error, {});
    st.parked->set_failure(std::move(decision), now);
  }
}

void sweep(self_ptr self) {
  auto& st = self->state;
  auto now = now_ms();
  // Gauges for the rank's metrics, once per sweep (cheap, and no room's
  // path pays for them).
  st.metrics->set_in_flight(st.rooms->size());
  st.metrics->set_parked(st.parked->size() + st.dead.size() + st.fencing.size(),
                         st.rooms->tombstones());
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  // Rooms that conclude quickly never hear from the sweep; a room that has
  // lived a tick interval checks its deadlines once per interval. Failed
  // rooms too: a decode room may hold its Failed state for a fence, and only
  // a tick ends that wait at its deadline.
  auto tick = static_cast<uint64_t>(st.timing.tick().count());
  st.rooms->for_each([&](room_id, const room_directory::entry& e) {
    if (e.state != kv_poll::success && now - e.opened_ms >= tick)
      self->send(e.actor, tick_atom::value);
  });
  std::vector<room_id> dead;
  for (auto& kvp : st.dead)
    dead.push_back(kvp.first);
  for (auto room : dead)
    if (auto d = st.dead.find(room); d != st.dead.end())
      run_dead(self, room, d->second.tick(now));
  // Parked proposals are decided by their own timer (schedule_deciding).
  detail::retry_links(self, now);
  for (auto& x : st.parked->expire(now)) {
    auto room = x.room;
    kv_transfer_error err{room,
                          to_string(me(self)) + " opened no sender for room "
                            + std::to_string(room) + " within "
                            + std::to_string(st.timeouts.bootstrap_ms) + " ms",
                          true, me(self).id};
    logger()->warn("{}: destination for room {} from {} expired unused",
                   to_string(me(self)), room, to_string(x.decode_rank));
    if (x.decode_room)
      self->send(x.decode_room, room_failed{room, err, true, me(self).id});
    else
      send_to_rank(self, x.decode_rank.id, room_failed{room, err, true, me(self).id});
    send_fenced(self, room, x.decode_rank.id);
  }
  st.peers->expire(now);
}

/// A handler that acts on `T` only from this process or from a node whose
/// rank proved membership.
template <class T, class Fn>
auto members_only(self_ptr self, const char* what, Fn fn) {
  return [=](T& msg) {
    if (detail::from_member(self, what))
      fn(self, msg);
  };
}

} // namespace

void detail::on_peer_usable(detail::manager_ptr self,
                            const std::shared_ptr<const rank_entry>& peer) {
  auto& st = self->state;
  st.joining.erase(peer->rank.id);
  self->monitor(peer->manager);
  logger()->debug("{}: linked to {} at {}:{}", to_string(me(self)), to_string(peer->rank),
                  peer->control_host, peer->control_port);
  peers_changed(self);
}

caf::behavior kv_manager(counted_actor<kv_manager_state>* self,
                         kv_manager_params params) {
  auto& st = self->state;
  {
    rank_entry e{params.self, caf::actor_cast<caf::actor>(self), std::move(params.layout),
                 std::move(params.endpoints)};
    e.has_parallel = params.parallel.has_value();
    if (params.parallel)
      e.parallel = *params.parallel;
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
  // A stranger can start handshakes it never finishes: bounded, expiring.
  st.accepting.emplace(1024, 5000);
  st.peers.emplace(params.self.id, st.timing.lost_window_ms());
  st.rooms.emplace(st.limits.max_tombstones);
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
      detail::from_member(self, "an exit message");
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
      detail::on_registry_down(self, msg.reason);
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
    members_only<room_failed>(self, "room_failed", on_failed),
    members_only<part_done>(self, "part_done", on_part),
    [=](to_decider& msg) {
      if (!detail::from_member(self, "to_decider"))
        return;
      route_to_decider(self, decider_ref{msg.side, msg.dp_rank}, std::move(msg.payload));
    },
    [=](const dst_sent& msg) {
      if (!detail::from_member(self, "dst_sent"))
        return;
      // Decode: remember where the room's pages went.
      if (auto* entry = self->state.rooms->find(msg.room)) {
        auto& xs = entry->dst_ranks;
        if (std::find(xs.begin(), xs.end(), msg.prefill_rank) == xs.end())
          xs.push_back(msg.prefill_rank);
      }
    },
    [=](room_fenced& msg) {
      if (!detail::from_member(self, "room_fenced"))
        return;
      auto& st = self->state;
      if (msg.prefill_rank < 0) {
        on_worker_fenced(self, msg.room);
        return;
      }
      if (auto* entry = st.rooms->find(msg.room)) {
        entry->fences.push_back(msg.prefill_rank);
        self->send(entry->actor, msg);
        return;
      }
      if (auto d = st.dead.find(msg.room); d != st.dead.end())
        run_dead(self, msg.room, d->second.fenced(msg.prefill_rank, now_ms()));
    },
    // Decode: a prefill room in another process reports progress by room id.
    [=](transfer_started& msg) {
      if (!detail::from_member(self, "transfer_started"))
        return;
      if (auto* entry = self->state.rooms->find(msg.room))
        self->send(entry->actor, msg);
    },
    [=](transfer_done& msg) {
      if (!detail::from_member(self, "transfer_done"))
        return;
      auto& st = self->state;
      if (auto* entry = st.rooms->find(msg.room))
        self->send(entry->actor, msg);
      else if (auto d = st.dead.find(msg.room); d != st.dead.end())
        run_dead(self, msg.room, d->second.source_done(msg.src_rank, now_ms()));
    },
    [=](to_rank& msg) {
      if (detail::from_member(self, "to_rank"))
        send_to_rank(self, msg.rank, std::move(msg.payload));
    },
    [=](room_committed& msg) {
      if (!detail::from_member(self, "room_committed"))
        return;
      auto& st = self->state;
      if (auto* entry = st.rooms->find(msg.room))
        self->send(entry->actor, msg);
      else if (auto d = st.dead.find(msg.room); d != st.dead.end())
        run_dead(self, msg.room, d->second.committed(now_ms()));
      else if (!st.rooms->tombstone_of(msg.room)
               && !st.parked->park_commit(msg.room, now_ms()))
        logger()->debug("{}: early commit for room {} dropped (parking full)",
                        to_string(me(self)), msg.room);
    },
    [=](directory_update& msg) {
      if (detail::from_registry(self))
        on_directory(self, msg);
    },
    [=](rank_down& msg) {
      if (!detail::from_registry(self))
        return;
      auto& st = self->state;
      // A peer we linked to directly: our own monitor of that link decides.
      // The registry losing its connection to a rank says nothing about
      // ours (a restarting registry, a registry node's flaky network).
      if (auto e = st.peers->find(msg.rank.id); e && e->control_port != 0) {
        logger()->debug("{}: the registry lost {}; our link to it decides",
                        to_string(me(self)), to_string(msg.rank));
        return;
      }
      // Listed, never linked: nothing to wait for any more.
      st.peers->unlist(msg.rank.id);
      st.joining.erase(msg.rank.id);
      // In this process: handled once, whichever of this and our own
      // monitor's down message comes first.
      if (auto peer = st.peers->take_peer(msg.rank.id)) {
        self->demonitor(peer->manager);
        on_peer_down(self, *peer, msg.reason + " (seen by the bootstrap registry)",
                     msg.orderly);
      }
    },
    [=](transport_control& msg) {
      if (!detail::from_member(self, "a connection message"))
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
      if (!detail::from_member(self, "resolve_group"))
        return make_error(errc::unauthorized, "not a member");
      return group_reply{self->state.peers->group(msg.side, msg.dp_rank)};
    },
    [=](const take_failure& msg) -> caf::result<failure_reply> {
      if (!detail::from_member(self, "take_failure"))
        return make_error(errc::unauthorized, "not a member");
      // For actor-based schedulers: the cause also came with the event.
      auto& st = self->state;
      failure_reply out;
      if (auto i = st.failure_records.find(msg.room); i != st.failure_records.end()) {
        out.found = true;
        out.error = i->second;
      }
      return out;
    },
    [=](const get_stats&) -> caf::result<manager_stats> {
      if (!detail::from_member(self, "get_stats"))
        return make_error(errc::unauthorized, "not a member");
      auto& st = self->state;
      auto out = st.counters;
      out.live_rooms = st.rooms->size();
      out.failure_records = st.failure_records.size();
      // Early failures are counted apart: they expire on their own.
      out.parked = st.parked->size() - st.parked->failures() + st.dead.size()
                   + st.fencing.size();
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
      detail::start_registration(self);
      return *st.joining_rank;
    },
    [=](reconnect_atom) { detail::reconnect_registry(self); },
    [=](link_hello& msg) { detail::on_link_hello(self, msg); },
    [=](link_reply& msg) { detail::on_link_reply(self, msg); },
    [=](link_finish& msg) { detail::on_link_finish(self, msg); },
    [=](link_ack& msg) { detail::on_link_ack(self, msg); },
    [=](decide_atom) {
      self->state.deciding = false;
      decide_unopened(self, now_ms());
      if (self->state.parked->has_proposals())
        schedule_deciding(self);
    },
    [=](sweep_atom) {
      sweep(self);
      self->delayed_send(self, sweep_interval, sweep_atom::value);
    },
  };
}

} // namespace kvroom
