#include "kvroom/actors/kv_manager.hpp"

#include <algorithm>

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/actors/room_core.hpp"
#include "caf/default_attachable.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<kv_manager_state>*;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;

const rank_ref& me(self_ptr self) {
  return self->state.self_entry->rank;
}

std::shared_ptr<const rank_entry> find_rank(self_ptr self, rank_id id) {
  for (auto& e : self->state.directory)
    if (e->rank.id == id)
      return e;
  return nullptr;
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

void add_tombstone(self_ptr self, room_id room, bool failed,
                   kv_transfer_error err) {
  auto& st = self->state;
  if (st.tombstones.emplace(room, kv_manager_state::tombstone{failed, err})
        .second)
    st.tombstone_order.push_back(room);
  while (st.tombstone_order.size() > st.limits.max_tombstones) {
    st.tombstones.erase(st.tombstone_order.front());
    st.tombstone_order.pop_front();
  }
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
  std::vector<rank_id> sent;
  auto in_group = [](const rank_ref& x, role side, int32_t dp) {
    return x.side == side && x.dp_rank == dp;
  };
  for (auto& e : st.directory) {
    auto& r = e->rank;
    if (r.id == mine.id)
      continue;
    bool target = in_group(r, mine.side, mine.dp_rank)
                  || (counterparts.empty() && r.side != mine.side);
    for (auto& c : counterparts)
      target = target || in_group(r, c.side, c.dp_rank);
    if (!target || std::find(sent.begin(), sent.end(), r.id) != sent.end())
      continue;
    sent.push_back(r.id);
    if (st.chaos.drop_fan_out) {
      logger()->debug("{}: sabotage: fan-out of room {} to {} dropped",
                      to_string(mine), err.bootstrap_room, to_string(r));
      continue;
    }
    send_ctrl(self, e->manager, room_failed{err.bootstrap_room, err, true});
  }
}

/// Tells decode rank `decode` that this prefill rank writes nothing more of
/// `room` into its pages.
void send_fenced(self_ptr self, room_id room, rank_id decode) {
  if (auto peer = find_rank(self, decode))
    self->send(peer->manager, room_fenced{room, me(self).id, decode});
}

/// Prefill: room `room` failed or its actor died; once the worker moves
/// nothing of it, every decode rank in `targets` hears so.
void start_fence(self_ptr self, room_id room, std::vector<rank_id> targets) {
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
  if (auto r = st.rooms.find(room); r != st.rooms.end())
    r->second.fence_done = true;
}

/// Decode: publishes a dead room's Failed state once no prefill rank may
/// still write into its pages.
void try_release_dead(self_ptr self, room_id room) {
  auto& st = self->state;
  auto i = st.fence_waits.find(room);
  if (i == st.fence_waits.end() || !i->second.writers.empty())
    return;
  if (st.inbox)
    self->send(st.inbox, room_event{room, kv_poll::failed, i->second.error});
  st.fence_waits.erase(i);
}

/// Decode: a fence arrived (or a writer was lost) for a dead room.
void release_dead_writer(self_ptr self, room_id room, rank_id writer) {
  auto& st = self->state;
  auto drop = [&](std::vector<rank_id>& xs) {
    xs.erase(std::remove(xs.begin(), xs.end(), writer), xs.end());
  };
  if (auto a = st.awaiting_decision.find(room); a != st.awaiting_decision.end())
    drop(a->second.writers);
  if (auto w = st.fence_waits.find(room); w != st.fence_waits.end()) {
    drop(w->second.writers);
    try_release_dead(self, room);
  }
}

void on_concluded(self_ptr self, room_concluded& msg) {
  auto& st = self->state;
  auto i = st.rooms.find(msg.room);
  if (i != st.rooms.end()) {
    i->second.state = msg.state;
    i->second.error = msg.error;
  }
  if (msg.state == kv_poll::success) {
    ++st.counters.successes;
    return;
  }
  // A failed sender stops: its queued batches go, and the decode ranks that
  // gave it pages hear once nothing of it still moves.
  if (me(self).side == role::prefill)
    start_fence(self, msg.room,
                i != st.rooms.end() ? i->second.dst_ranks : std::vector<rank_id>{});
  auto& err = msg.error;
  st.failure_records[msg.room] = err;
  auto& mine = me(self);
  if (err.is_from_another_rank) {
    ++st.counters.propagated_failures;
    logger()->debug("{}: room {} failed on rank {}: {}", to_string(mine),
                    msg.room, err.origin_rank, err.failure_reason);
  } else {
    ++st.counters.origin_failures;
    // Logged once, where the failure was first identified: an error on
    // decode (the request is lost to the user), a warning on prefill; at
    // info when the scheduler asked for it.
    if (msg.requested)
      logger()->info("{}: {}", to_string(mine), to_string(err));
    else if (mine.side == role::decode)
      logger()->error("{}: {}", to_string(mine), to_string(err));
    else
      logger()->warn("{}: {}", to_string(mine), to_string(err));
  }
  if (msg.fan_out)
    fan_out(self, err, msg.counterparts);
}

/// Tells a room about every rank lost and not back; the room decides
/// whether it depends on one.
void tell_lost(self_ptr self, const caf::actor& room) {
  for (auto& kvp : self->state.lost_ranks)
    self->send(room, kvp.second.why);
}

/// How long a lost rank is remembered for rooms that open later.
uint64_t lost_window_ms(self_ptr self) {
  return std::min<uint64_t>(self->state.timeouts.bootstrap_ms, 3000);
}

/// Hands an open prefill room a destination, remembering which decode rank
/// it may now write to (the fence tells that rank once it stopped).
void hand_dst(self_ptr self, kv_manager_state::room_entry& entry, dst_info info,
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
  auto i = st.rooms.find(room);
  auto peer = find_rank(self, info.decode_rank.id);
  if (i != st.rooms.end() && peer) {
    hand_dst(self, i->second, std::move(info), std::move(peer));
    return;
  }
  // Every answer below means this rank never writes for that destination.
  auto reply_failure = [&](kv_transfer_error err) {
    if (info.decode_room)
      self->send(info.decode_room, room_failed{room, std::move(err), true,
                                               me(self).id});
    send_fenced(self, room, info.decode_rank.id);
  };
  if (auto t = st.tombstones.find(room); t != st.tombstones.end()) {
    reply_failure(t->second.failed
                    ? t->second.error
                    : kv_transfer_error{room,
                                        "room already cleared on prefill rank "
                                          + to_string(me(self)),
                                        true, me(self).id});
    return;
  }
  if (auto e = st.early_failures.find(room);
      e != st.early_failures.end() && e->second.msg.propagated) {
    reply_failure(e->second.msg.error);
    return;
  }
  if (st.parked_count >= st.limits.max_parked) {
    reply_failure(kv_transfer_error{
      room,
      to_string(me(self)) + " holds " + std::to_string(st.parked_count)
        + " destinations for rooms not opened yet (limit "
        + std::to_string(st.limits.max_parked) + ")",
      true, me(self).id});
    return;
  }
  st.parked[room].push_back({std::move(info), room_core::now_ms()});
  ++st.parked_count;
}

bool settle_dead(self_ptr self, room_id room, const kv_transfer_error* err);

void on_failed(self_ptr self, room_failed& msg) {
  auto& st = self->state;
  auto i = st.rooms.find(msg.room);
  if (i != st.rooms.end()) {
    self->send(i->second.actor, std::move(msg));
    return;
  }
  if (msg.propagated && settle_dead(self, msg.room, &msg.error))
    return;
  if (auto t = st.tombstones.find(msg.room); t != st.tombstones.end()) {
    if (!msg.propagated) {
      // A rank asks the decider of a room cleared here: answer with what the
      // room concluded.
      if (auto asker = find_rank(self, msg.from)) {
        if (t->second.failed)
          self->send(asker->manager,
                     room_failed{msg.room, t->second.error, true, me(self).id});
        else
          self->send(asker->manager, room_committed{msg.room});
      }
      return;
    }
    logger()->debug("{}: failure for cleared room {} ignored",
                    to_string(me(self)), msg.room);
    return;
  }
  if (!msg.propagated) {
    // A proposal for a room this decider has not opened (yet, or ever): it
    // decides here, for the room, so the asking rank is not left waiting:
    // the first failure it heard of is the decision, fanned out to this
    // group and the whole other side, and kept for the room should it open.
    auto e = st.early_failures.find(msg.room);
    if (e != st.early_failures.end() && e->second.msg.propagated) {
      if (auto asker = find_rank(self, msg.from))
        send_ctrl(self, asker->manager, e->second.msg);
      return;
    }
    room_failed decision = e != st.early_failures.end() ? e->second.msg : msg;
    decision.propagated = true;
    decision.from = me(self).id;
    decision.error.is_from_another_rank = true;
    fan_out(self, decision.error, {});
    st.early_failures[msg.room] = {std::move(decision), room_core::now_ms()};
    return;
  }
  if (st.early_failures.size() >= st.limits.max_parked) {
    logger()->debug("{}: early failure for room {} dropped (limit {})",
                    to_string(me(self)), msg.room, st.limits.max_parked);
    return;
  }
  // Kept whole: a proposal stays a proposal for the decider once it opens.
  auto room = msg.room;
  st.early_failures.emplace(
    room, kv_manager_state::early_failure{std::move(msg), room_core::now_ms()});
}

void deliver_parked(self_ptr self, room_id room);

/// The ranks of group (`side`, `dp`) the directory knows, by TP rank.
group_reply group_of(self_ptr self, role side, int32_t dp) {
  group_reply out;
  for (auto& e : self->state.directory)
    if (e->rank.side == side && e->rank.dp_rank == dp)
      out.ranks.push_back(e);
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](auto& x, auto& y) { return x->rank.tp_rank < y->rank.tp_rank; });
  return out;
}

void on_opened(self_ptr self, room_opened& msg) {
  auto& st = self->state;
  auto room = msg.room;
  // A scheduler may reuse an id after clearing it: the new room is live.
  if (st.tombstones.erase(room) > 0)
    st.tombstone_order.erase(std::find(st.tombstone_order.begin(),
                                       st.tombstone_order.end(), room));
  self->monitor(msg.room_actor);
  st.room_by_actor[msg.room_actor.address()] = room;
  kv_manager_state::room_entry entry;
  entry.actor = msg.room_actor;
  entry.prefill_dp = msg.prefill_dp;
  entry.opened_ms = room_core::now_ms();
  st.rooms[room] = std::move(entry);
  // A decode room needs its prefill group first: pushed now, not asked for.
  if (me(self).side == role::decode) {
    auto group = group_of(self, role::prefill, msg.prefill_dp);
    if (!group.ranks.empty())
      self->send(msg.room_actor, std::move(group));
  }
  deliver_parked(self, room);
  tell_lost(self, msg.room_actor);
  if (auto p = st.parked_parts.find(room); p != st.parked_parts.end()) {
    for (auto& x : p->second)
      self->send(msg.room_actor, x.part);
    st.parked_count -= p->second.size();
    st.parked_parts.erase(p);
  }
  if (auto e = st.early_failures.find(room); e != st.early_failures.end()) {
    self->send(msg.room_actor, std::move(e->second.msg));
    st.early_failures.erase(e);
  }
}

/// Hands a room the destinations parked for it whose decode rank the
/// directory knows (a destination can outrun the registry's update).
void deliver_parked(self_ptr self, room_id room) {
  auto& st = self->state;
  auto r = st.rooms.find(room);
  auto p = st.parked.find(room);
  if (r == st.rooms.end() || p == st.parked.end())
    return;
  auto& xs = p->second;
  auto keep = std::remove_if(xs.begin(), xs.end(), [&](auto& x) {
    auto peer = find_rank(self, x.info.decode_rank.id);
    if (!peer)
      return false;
    hand_dst(self, r->second, x.info, std::move(peer));
    return true;
  });
  st.parked_count -= static_cast<size_t>(xs.end() - keep);
  xs.erase(keep, xs.end());
  if (xs.empty())
    st.parked.erase(p);
}

void on_part(self_ptr self, part_done& part) {
  auto& st = self->state;
  if (auto i = st.rooms.find(part.room); i != st.rooms.end()) {
    self->send(i->second.actor, std::move(part));
    return;
  }
  if (st.tombstones.count(part.room) > 0 || st.parked_count >= st.limits.max_parked) {
    logger()->debug("{}: part confirmation for room {} dropped",
                    to_string(me(self)), part.room);
    return;
  }
  auto room = part.room;
  st.parked_parts[room].push_back({std::move(part), room_core::now_ms()});
  ++st.parked_count;
}

/// Sends to the decider of group (`side`, `dp`); false when the directory
/// does not know it yet.
bool send_to_decider(self_ptr self, role side, int32_t dp, caf::message& payload) {
  decider_ref group{side, dp};
  if (is_decider(me(self), group)) {
    self->send(self, std::move(payload));
    return true;
  }
  for (auto& e : self->state.directory) {
    if (is_decider(e->rank, group)) {
      send_ctrl(self, e->manager, std::move(payload));
      return true;
    }
  }
  return false;
}

void on_to_decider(self_ptr self, to_decider& msg) {
  auto& st = self->state;
  if (send_to_decider(self, msg.side, msg.dp_rank, msg.payload))
    return;
  // Not registered yet (or gone): keep it for the next directory update; the
  // sweep drops it after a bootstrap timeout, and the waiting room's own
  // deadline fails the room.
  if (st.coordinator_backlog.size() >= st.limits.max_parked) {
    logger()->debug("{}: message for the decider of {} dp{} dropped (backlog full)",
                    to_string(me(self)), to_string(msg.side), msg.dp_rank);
    return;
  }
  st.coordinator_backlog.push_back(
    {msg.side, msg.dp_rank, std::move(msg.payload), room_core::now_ms()});
}

void flush_coordinator_backlog(self_ptr self) {
  auto& xs = self->state.coordinator_backlog;
  xs.erase(std::remove_if(xs.begin(), xs.end(),
                          [&](auto& x) { return send_to_decider(self, x.side, x.dp_rank, x.payload); }),
           xs.end());
}

/// Concludes a room whose actor is gone, on the scheduler's behalf; the
/// scheduler sees Failed once no prefill rank in `writers` may still write.
void conclude_dead(self_ptr self, room_id room, const kv_transfer_error& err,
                   bool fan, std::vector<rank_id> writers) {
  auto& st = self->state;
  room_concluded msg{room, kv_poll::failed, err, {}, fan};
  on_concluded(self, msg);
  // No room is left to clear: the event carries the cause, the tombstone
  // keeps it for late peers, and no record outlives the room.
  st.failure_records.erase(room);
  st.fence_waits[room] = {err, std::move(writers), room_core::now_ms()};
  try_release_dead(self, room);
  add_tombstone(self, room, true, err);
}

/// The coordinator's word on a room whose actor died here: a failure
/// (`err`) or, with `err` null, a commit.
bool settle_dead(self_ptr self, room_id room, const kv_transfer_error* err) {
  auto& st = self->state;
  auto i = st.awaiting_decision.find(room);
  if (i == st.awaiting_decision.end())
    return false;
  if (err) {
    auto copy = *err;
    copy.is_from_another_rank = copy.origin_rank != me(self).id;
    conclude_dead(self, room, copy, false, std::move(i->second.writers));
    st.awaiting_decision.erase(i);
    return true;
  }
  st.awaiting_decision.erase(i);
  ++st.counters.successes;
  if (st.inbox)
    self->send(st.inbox, room_event{room, kv_poll::success, {}});
  add_tombstone(self, room, false, {});
  return true;
}

void on_room_down(self_ptr self, room_id room, const caf::error& reason) {
  auto& st = self->state;
  auto i = st.rooms.find(room);
  if (i == st.rooms.end())
    return;
  bool concluded = is_terminal(i->second.state);
  bool failed = i->second.state == kv_poll::failed;
  auto root_cause = i->second.error;
  decider_ref decider{role::prefill, i->second.prefill_dp};
  auto& mine = me(self);
  // Decode: the prefill ranks that got this room's pages and did not confirm
  // a fence yet. Prefill: the decode ranks this room may have written to.
  std::vector<rank_id> writers;
  for (auto r : i->second.dst_ranks)
    if (std::find(i->second.fences.begin(), i->second.fences.end(), r)
        == i->second.fences.end())
      writers.push_back(r);
  auto dst_ranks = i->second.dst_ranks;
  // The room monitored this manager; CAF 0.17 keeps that monitor (and with
  // it the dead room's storage) until this manager exits unless removed.
  if (!st.chaos.keep_room_monitors)
    self->detach(caf::default_attachable::observe_token{
      i->second.actor.address(), caf::default_attachable::monitor});
  if (st.chaos.no_fence)
    writers.clear();
  st.room_by_actor.erase(i->second.actor.address());
  st.rooms.erase(i);
  if (!concluded && reason != caf::exit_reason::normal) {
    // A room actor killed mid-room: this rank is the origin of the failure.
    kv_transfer_error err{room,
                          "room actor on " + to_string(mine)
                            + " exited: " + caf::to_string(reason),
                          false, mine.id};
    if (mine.side == role::prefill) {
      // Its worker may still hold batches of it: stop them before decode
      // reuses the pages.
      start_fence(self, room, dst_ranks);
      writers.clear();
    }
    if (!is_decider(mine, decider)) {
      // Its part may have been done and committed already: the decider
      // decides, exactly as for a live room that must fail.
      st.awaiting_decision[room] = {err, room_core::now_ms(), std::move(writers)};
      self->send(self, to_decider{decider.side, decider.dp_rank,
                                  caf::make_message(room_failed{room, err, false,
                                                                mine.id})});
      return;
    }
    conclude_dead(self, room, err, true, std::move(writers));
    return;
  }
  // Cleared: the scheduler is done with the room, with or without taking its
  // failure; either way the record must not outlive the room. The tombstone
  // keeps the root cause for peers that ask late.
  st.failure_records.erase(room);
  add_tombstone(self, room, failed, failed ? root_cause : kv_transfer_error{});
}

void on_peer_down(self_ptr self, const rank_entry& lost,
                  const std::string& reason, bool orderly) {
  auto& st = self->state;
  auto& peer = lost.rank;
  std::string where;
  for (auto& e : lost.endpoints)
    if (e.transport == "tcp")
      where = " at " + e.address;
  auto text = "rank " + to_string(peer) + where + " lost: " + reason;
  size_t open = 0;
  for (auto& kvp : st.rooms)
    open += is_terminal(kvp.second.state) ? 0 : 1;
  // One line per lost peer; each room logs its own failure at debug. A rank
  // shutting down in order with nothing in flight is no news.
  if (orderly && open == 0)
    logger()->debug("{}: rank {} left", to_string(me(self)), to_string(peer));
  else
    logger()->warn("{}: {} ({} rooms in flight checked)", to_string(me(self)),
                   text, open);
  st.lost_ranks[peer.id] = kv_manager_state::lost_rank{peer_lost{peer, text},
                                                       room_core::now_ms()};
  // Concluded rooms hear too: a decode room holding Failed for this rank's
  // fence is fenced by its loss.
  for (auto& kvp : st.rooms)
    self->send(kvp.second.actor, peer_lost{peer, text});
  std::vector<room_id> dead;
  for (auto& kvp : st.awaiting_decision)
    dead.push_back(kvp.first);
  for (auto& kvp : st.fence_waits)
    dead.push_back(kvp.first);
  for (auto room : dead)
    release_dead_writer(self, room, peer.id);
  st.directory.erase(std::remove_if(st.directory.begin(), st.directory.end(),
                                    [&](const auto& e) {
                                      return e->rank.id == peer.id;
                                    }),
                     st.directory.end());
}

void on_directory(self_ptr self, directory_update& msg) {
  auto& st = self->state;
  std::vector<std::shared_ptr<const rank_entry>> fresh;
  fresh.reserve(msg.ranks.size());
  for (auto& e : msg.ranks) {
    // Registered (again): no longer lost.
    st.lost_ranks.erase(e.rank.id);
    auto ptr = std::make_shared<const rank_entry>(e);
    if (e.manager && e.rank.id != me(self).id
        && st.peers.count(e.manager.address()) == 0) {
      self->monitor(e.manager);
      st.peers.emplace(e.manager.address(), ptr);
    }
    fresh.push_back(std::move(ptr));
  }
  st.directory = std::move(fresh);
  flush_coordinator_backlog(self);
  std::vector<room_id> waiting;
  for (auto& kvp : st.parked)
    waiting.push_back(kvp.first);
  for (auto room : waiting)
    deliver_parked(self, room);
}

void sweep(self_ptr self) {
  auto& st = self->state;
  auto now = room_core::now_ms();
  // Rooms that conclude quickly never hear from the sweep; a room that has
  // lived a tick interval checks its deadline once per interval.
  auto tick = static_cast<uint64_t>(room_core::tick_interval(st.timeouts).count());
  // Failed rooms too: a decode room may hold its Failed state for a fence,
  // and only a tick ends that wait at its deadline.
  for (auto& kvp : st.rooms)
    if (kvp.second.state != kv_poll::success && now - kvp.second.opened_ms >= tick)
      self->send(kvp.second.actor, tick_atom::value);
  auto limit = st.timeouts.bootstrap_ms;
  for (auto i = st.parked.begin(); i != st.parked.end();) {
    auto& xs = i->second;
    auto keep = std::remove_if(xs.begin(), xs.end(), [&](auto& x) {
      if (now - x.since_ms < limit)
        return false;
      kv_transfer_error err{i->first,
                            to_string(me(self)) + " opened no sender for room "
                              + std::to_string(i->first) + " within "
                              + std::to_string(limit) + " ms",
                            true, me(self).id};
      logger()->warn("{}: destination for room {} from {} expired unused",
                     to_string(me(self)), i->first,
                     to_string(x.info.decode_rank));
      self->send(x.info.decode_room, room_failed{i->first, err, true, me(self).id});
      send_fenced(self, i->first, x.info.decode_rank.id);
      return true;
    });
    st.parked_count -= static_cast<size_t>(xs.end() - keep);
    xs.erase(keep, xs.end());
    i = xs.empty() ? st.parked.erase(i) : std::next(i);
  }
  for (auto i = st.lost_ranks.begin(); i != st.lost_ranks.end();)
    i = now - i->second.since_ms >= lost_window_ms(self) ? st.lost_ranks.erase(i)
                                                         : std::next(i);
  auto& backlog = st.coordinator_backlog;
  backlog.erase(std::remove_if(backlog.begin(), backlog.end(),
                               [&](auto& x) { return now - x.since_ms >= limit; }),
                backlog.end());
  for (auto i = st.awaiting_decision.begin();
       i != st.awaiting_decision.end();) {
    if (now - i->second.since_ms < st.timeouts.transferring_ms) {
      ++i;
      continue;
    }
    auto room = i->first;
    auto err = i->second.error;
    auto writers = std::move(i->second.writers);
    err.failure_reason += " (the room's coordinator gave no decision)";
    i = st.awaiting_decision.erase(i);
    conclude_dead(self, room, err, true, std::move(writers));
  }
  for (auto i = st.fence_waits.begin(); i != st.fence_waits.end();) {
    if (now - i->second.since_ms < 2ull * st.timeouts.transferring_ms) {
      ++i;
      continue;
    }
    logger()->error("{}: room {} published Failed without the fence of {} "
                    "prefill rank(s) after {} ms; its pages may still be written",
                    to_string(me(self)), i->first, i->second.writers.size(),
                    2ull * st.timeouts.transferring_ms);
    i->second.writers.clear();
    auto room = i->first;
    ++i;
    try_release_dead(self, room);
  }
  for (auto i = st.parked_parts.begin(); i != st.parked_parts.end();) {
    auto& xs = i->second;
    auto keep = std::remove_if(xs.begin(), xs.end(), [&](auto& x) {
      return now - x.since_ms >= limit;
    });
    st.parked_count -= static_cast<size_t>(xs.end() - keep);
    xs.erase(keep, xs.end());
    i = xs.empty() ? st.parked_parts.erase(i) : std::next(i);
  }
  for (auto i = st.early_failures.begin(); i != st.early_failures.end();)
    i = now - i->second.since_ms >= limit ? st.early_failures.erase(i)
                                          : std::next(i);
}

} // namespace

caf::behavior kv_manager(counted_actor<kv_manager_state>* self,
                         kv_manager_params params) {
  auto& st = self->state;
  st.self_entry = std::make_shared<const rank_entry>(
    rank_entry{params.self, caf::actor_cast<caf::actor>(self),
               std::move(params.layout), std::move(params.endpoints)});
  st.limits = params.limits;
  st.timeouts = params.timeouts;
  st.inbox = std::move(params.inbox);
  st.chaos = params.chaos;
  st.worker = params.worker;
  if (st.worker)
    self->send(st.worker, attach_atom::value, caf::actor_cast<caf::actor>(self));
  st.chaos_rng.seed(params.chaos.seed ^ static_cast<uint64_t>(params.self.id));
  auto sweep_interval = room_core::tick_interval(st.timeouts);
  self->delayed_send(self, sweep_interval, sweep_atom::value);
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    auto& id = msg.source;
    if (auto r = st.room_by_actor.find(id); r != st.room_by_actor.end()) {
      on_room_down(self, r->second, msg.reason);
      return;
    }
    if (auto p = st.peers.find(id); p != st.peers.end()) {
      auto peer = p->second;
      st.peers.erase(p);
      on_peer_down(self, *peer, caf::to_string(msg.reason),
                   msg.reason == caf::exit_reason::user_shutdown
                     || msg.reason == caf::exit_reason::normal);
    }
  });
  return {
    [=](room_opened& msg) { on_opened(self, msg); },
    [=](room_concluded& msg) { on_concluded(self, msg); },
    [=](dst_info& msg) { on_dst(self, msg); },
    [=](room_failed& msg) { on_failed(self, msg); },
    [=](part_done& msg) { on_part(self, msg); },
    [=](to_decider& msg) { on_to_decider(self, msg); },
    [=](route_dst& msg) {
      // Decode: remember where the room's pages went, then hand them over.
      auto& st = self->state;
      if (auto i = st.rooms.find(msg.info.room); i != st.rooms.end()) {
        auto& xs = i->second.dst_ranks;
        if (std::find(xs.begin(), xs.end(), msg.prefill_rank) == xs.end())
          xs.push_back(msg.prefill_rank);
      }
      if (auto peer = find_rank(self, msg.prefill_rank))
        send_ctrl(self, peer->manager, std::move(msg.info));
    },
    [=](room_fenced& msg) {
      auto& st = self->state;
      if (msg.prefill_rank < 0) {
        on_worker_fenced(self, msg.room);
        return;
      }
      if (auto i = st.rooms.find(msg.room); i != st.rooms.end()) {
        i->second.fences.push_back(msg.prefill_rank);
        self->send(i->second.actor, msg);
        return;
      }
      release_dead_writer(self, msg.room, msg.prefill_rank);
    },
    [=](to_rank& msg) {
      if (auto target = find_rank(self, msg.rank))
        send_ctrl(self, target->manager, std::move(msg.payload));
    },
    [=](room_committed& msg) {
      auto& st = self->state;
      if (auto i = st.rooms.find(msg.room); i != st.rooms.end())
        self->send(i->second.actor, msg);
      else
        settle_dead(self, msg.room, nullptr);
    },
    [=](directory_update& msg) { on_directory(self, msg); },
    [=](rank_down& msg) {
      // The registry's node saw the loss; handled once, whichever of this
      // and our own monitor's down message comes first.
      auto& st = self->state;
      for (auto i = st.peers.begin(); i != st.peers.end(); ++i) {
        if (i->second->rank.id != msg.rank.id)
          continue;
        auto peer = i->second;
        st.peers.erase(i);
        self->demonitor(peer->manager);
        on_peer_down(self, *peer, msg.reason + " (seen by the bootstrap registry)", msg.orderly);
        return;
      }
    },
    [=](transport_control& msg) {
      // The data plane's connection set-up rides the control plane: from
      // this rank's worker to the peer's manager, from there to its worker.
      auto& st = self->state;
      if (msg.from == me(self).id) {
        if (auto target = find_rank(self, msg.to))
          self->send(target->manager, std::move(msg));
        else
          logger()->debug("{}: no rank {} in the directory for a {} connection message",
                          to_string(me(self)), msg.to, msg.transport);
      } else if (msg.to == me(self).id && st.worker) {
        self->send(st.worker, std::move(msg));
      }
    },
    [=](const resolve_group& msg) { return group_of(self, msg.side, msg.dp_rank); },
    [=](const take_failure& msg) {
      auto& st = self->state;
      failure_reply out;
      auto i = st.failure_records.find(msg.room);
      if (i != st.failure_records.end()) {
        out.found = true;
        out.error = std::move(i->second);
        st.failure_records.erase(i);
      }
      return out;
    },
    [=](const get_stats&) {
      auto& st = self->state;
      auto out = st.counters;
      out.live_rooms = st.rooms.size();
      out.failure_records = st.failure_records.size();
      out.parked = st.parked_count + st.coordinator_backlog.size()
                   + st.awaiting_decision.size() + st.fence_waits.size()
                   + st.fencing.size();
      out.early_failures = st.early_failures.size();
      out.tombstones = st.tombstones.size();
      return out;
    },
    [=](sweep_atom) {
      sweep(self);
      self->delayed_send(self, sweep_interval, sweep_atom::value);
    },
  };
}

} // namespace kvroom
