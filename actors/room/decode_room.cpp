#include "kvroom/actors/room/decode_room.hpp"

#include <algorithm>
#include <cstdio>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/transport/part_digest.hpp"
#include "kvroom/transport/grants.hpp"
#include "kvroom/transport/rank_mapping.hpp"
#include "kvroom/transport/select.hpp"
#include "kvroom/transport/transfer_plan.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<decode_room_state>*;

void maybe_send_dst(self_ptr self) {
  auto& st = self->state;
  auto& core = st.core;
  if (core.concluded() || st.sources.empty() || !st.initialized || st.dst_sent)
    return;
  // Those prefill ranks, and no one else, may write these pages for this
  // room until the room concludes (data planes that check grants: tcp).
  auto& dp = core.shared().data_plane;
  if (core.params().pull) {
    // Nothing writes here; what this rank reads lands only inside these.
    st.pulling().own_ranges = room_grant(core.shared().self_entry->layout,
                                         st.init.kv_indices, st.init.aux_index,
                                         st.init.state_indices);
  } else if (dp && dp->enforces_grants()) {
    auto ranges = room_grant(core.shared().self_entry->layout, st.init.kv_indices,
                             st.init.aux_index, st.init.state_indices);
    for (auto& s : st.sources)
      if (!dp->grant(core.params().room, s->rank.id, ranges)) {
        core.fail_local("the data plane's grant table is full", failure_cause::transport);
        return;
      }
  }
  st.dst_sent = true;
  core.note_transfer_start();
  for (auto& s : st.sources) {
    // From here the prefill rank may write into these pages until it is
    // done, fenced or lost: the protocol holds a terminal state until then.
    // Its part reaches the decider without us when it is the decider or,
    // without declared layouts, the one source of this slot.
    // With the integrity check on, this rank checks every part itself and
    // reports its slot: no source's part reaches the decider without it.
    bool reports = !st.hashing && (!st.mapped || is_decider(s->rank, core.protocol().decider()));
    core.dst_sent(s->rank.id, reports);
    dst_info info;
    info.room = core.params().room;
    info.decode_rank = core.shared().self;
    if (core.local(s->manager))
      info.decode_room = caf::actor_cast<caf::actor>(self);
    info.kv_indices = st.init.kv_indices;
    info.aux_index = st.init.aux_index;
    info.state_indices = st.init.state_indices;
    info.decode_prefix_len = st.init.decode_prefix_len;
    info.pull = core.params().pull;
    // Straight to the prefill rank's manager; this rank's manager hears
    // where the pages went, in case this actor dies before the fence.
    self->send(core.shared().manager, dst_sent{info.room, s->rank.id});
    core.send_to_peer(s->manager, std::move(info));
  }
}

/// The layouts of the prefill group (empty: a rank without one, and the room
/// failed).
std::vector<parallel_layout>
group_layouts(self_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& group) {
  std::vector<parallel_layout> layouts;
  for (auto& entry : group) {
    if (!entry->has_parallel) {
      self->state.core.fail_local("prefill " + to_string(entry->rank)
                                  + " declares no parallel layout", failure_cause::bad_input);
      return {};
    }
    layouts.push_back(entry->parallel);
  }
  return layouts;
}

/// Whether this rank, which declares no layout, is mapped all the same: its
/// prefill group declares layouts and either has another TP size or PP
/// stages (SGLang's decode names no heads; it holds the model at its TP
/// size). At equal TP without stages it takes whole pages from its slot.
bool mapped_without_layout(const std::vector<std::shared_ptr<const rank_entry>>& group,
                           const rank_ref& me) {
  for (auto& entry : group)
    if (!entry->has_parallel)
      return false;
  for (auto& entry : group)
    if (entry->parallel.tp_size != me.tp_size || entry->parallel.pp_size > 1)
      return true;
  return false;
}

/// The prefill ranks of the group that write into this rank: by the rank
/// mapping when the prefill group declares parallel layouts and this rank
/// does or must be mapped (empty: not every rank of the group registered
/// yet), else the one of this TP slot. Fails the room when they cannot be
/// mapped.
std::vector<std::shared_ptr<const rank_entry>>
pick_sources(self_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& group) {
  auto& st = self->state;
  auto& core = st.core;
  auto& mine = *core.shared().self_entry;
  auto& me = core.shared().self;
  std::vector<std::shared_ptr<const rank_entry>> out;
  if (!mine.has_parallel && !mapped_without_layout(group, me)) {
    for (auto& entry : group) {
      if (entry->rank.tp_size != me.tp_size) {
        core.fail_local("unsupported: prefill group dp"
                        + std::to_string(core.params().peer_dp_rank) + " has tp_size "
                        + std::to_string(entry->rank.tp_size) + ", decode " + to_string(me)
                        + " has tp_size " + std::to_string(me.tp_size)
                        + " (head-sliced transfers need parallel layouts declared on the "
                          "prefill side)", failure_cause::bad_input);
        return {};
      }
      if (entry->rank.tp_rank == me.tp_rank)
        out.push_back(entry);
    }
    return out;
  }
  auto layouts = group_layouts(self, group);
  if (layouts.empty())
    return {};
  auto& first = layouts.front();
  if (layouts.size() < static_cast<size_t>(first.tp_size) * static_cast<size_t>(first.pp_size))
    return {}; // not every rank of the group registered yet
  if (mine.has_parallel) {
    st.layout = mine.parallel;
  } else {
    // The model the prefill group declares, at this rank's TP size: the
    // registry checked at registration that these pages are its pages.
    auto implied = implied_layout(first, me.tp_size, me.tp_rank, mine.layout.kv);
    if (!implied) {
      core.fail_local("decode " + to_string(me) + " declares no parallel layout: "
                      + describe(implied.error()), failure_cause::bad_input);
      return {};
    }
    st.layout = *implied;
  }
  auto m = shared_decode_mapping(layouts, st.layout);
  if (!m) {
    core.fail_local(describe(m.error()), failure_cause::bad_input);
    return {};
  }
  st.mapping = std::move(*m);
  st.mapped = true;
  for (auto& place : st.mapping->sources)
    for (auto& entry : group)
      if (entry->parallel.tp_rank == place.tp_rank && entry->parallel.pp_rank == place.pp_rank)
        out.push_back(entry);
  return out;
}

void on_group(self_ptr self, group_reply& reply) {
  auto& st = self->state;
  auto& core = st.core;
  st.resolving = false;
  if (core.concluded() || !st.sources.empty() || reply.ranks.empty())
    return; // not registered yet: the next tick asks again
  auto sources = pick_sources(self, reply.ranks);
  if (sources.empty())
    return; // those ranks have not registered yet (or the room failed)
  for (auto& entry : reply.ranks)
    if (is_decider(entry->rank, core.protocol().decider()))
      st.decider = entry;
  st.sources = std::move(sources);
  std::vector<rank_ref> counterparts;
  for (auto& s : st.sources)
    counterparts.push_back(s->rank);
  core.set_counterparts(std::move(counterparts));
  core.advance(kv_poll::waiting_for_input);
  maybe_send_dst(self);
}

void resolve(self_ptr self) {
  auto& st = self->state;
  if (st.resolving || !st.sources.empty() || st.core.concluded())
    return;
  st.resolving = true;
  auto& p = st.core.params();
  self->request(st.core.shared().manager, st.core.timing().group_query(),
                resolve_group{role::prefill, p.peer_dp_rank})
    .then([=](group_reply& reply) { on_group(self, reply); },
          [=](caf::error&) { self->state.resolving = false; });
}

/// Counts what a layer's chunk landed and tells the scheduler of the
/// buffers now whole. The ledger starts with a room's first such chunk: a
/// room sent whole lands with its Success, at no cost per room.
void land(self_ptr self, const buffer_bytes& landed) {
  auto& st = self->state;
  if (landed.empty() || !st.counts_landing())
    return;
  if (!st.landing.active()) {
    auto& kv = st.core.shared().self_entry->layout.kv;
    std::vector<uint64_t> expected(kv.size());
    for (size_t b = 0; b < kv.size(); ++b)
      expected[b] = st.init.kv_indices.size() * kv[b].page_size_bytes;
    st.landing = landing_ledger{std::move(expected)};
  }
  std::vector<int32_t> newly;
  st.landing.add(landed, newly);
  st.core.publish_landed(std::move(newly));
}

/// Every source wrote its last byte: the decider hears of this rank's part,
/// straight from here (it is this slot's sender in this process: its room;
/// else its manager, which parks the part until the room opens there).
void report_part(self_ptr self, const room_effect& fx) {
  auto& st = self->state;
  auto& core = st.core;
  if (fx.what != room_effect::kind::report_part)
    return;
  // The sender's room when it wrote to us itself (same process); from
  // another process the confirmation came through our manager.
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!core.local(sender) || sender == core.shared().manager)
    sender = nullptr;
  bool decider_here = st.decider && core.local(st.decider->manager);
  part_done part{core.params().room, fx.slot, fx.slots, fx.rank,
                 decider_here ? caf::actor_cast<caf::actor>(self) : caf::actor{},
                 fx.source, sender};
  if (st.decider && fx.source == st.decider->rank.id && sender)
    self->send(sender, std::move(part));
  else if (st.decider)
    core.send_to_peer(st.decider->manager, std::move(part));
  else
    core.to_decider(fx.decider, caf::make_message(std::move(part)));
}

/// With the integrity check on: empty when what landed from prefill rank
/// `msg.src_rank` hashes to the digest it sent, else why not. The part's
/// writes come from the same plan the sender used, over this rank's pages.
std::string check_part(self_ptr self, const transfer_done& msg) {
  auto& st = self->state;
  auto& me = *st.core.shared().self_entry;
  auto* src = st.source_of(msg.src_rank);
  auto who = "prefill rank " + std::to_string(msg.src_rank);
  if (src == nullptr)
    return {}; // not a source: the protocol refuses it
  if (!msg.has_digest)
    return who + " sent no digest";
  part_spec part;
  part.src_mem = &src->layout;
  part.dst_mem = &me.layout;
  if (st.mapped) {
    part.mapping = st.mapping.get();
    part.src_place = place_of(src->parallel);
    part.src_parallel = &src->parallel;
    part.dst_parallel = &st.layout;
  }
  // Any valid source pages: where bytes land depends on this side alone.
  auto& init = st.init;
  std::vector<int64_t> any_pages(init.kv_indices.size(), 0);
  std::vector<int64_t> any_state(init.state_indices.size(), 0);
  uint32_t aux_ops = 0;
  auto ops = plan_part(part, any_pages, init.kv_indices, true, 0, init.aux_index, any_state,
                       init.state_indices, aux_ops);
  if (!ops)
    return "cannot plan the part of " + who + ": " + describe(ops.error());
  uint64_t bytes = 0;
  for (auto& op : *ops)
    bytes += op.size_bytes;
  auto landed = digest_destinations(std::move(*ops));
  if (landed == msg.digest)
    return {};
  char buf[160];
  std::snprintf(buf, sizeof(buf), " (%llu bytes): xxh3 %016llx here, %016llx at the source",
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(landed),
                static_cast<unsigned long long>(msg.digest));
  return "the part from " + who + " does not match" + buf;
}

/// Empty when `msg` fits this rank's registered memory, else the reason.
std::string check_init(const memory_layout& layout, const receiver_init& msg) {
  for (size_t b = 0; b < layout.kv.size(); ++b) {
    auto n = layout.kv[b].num_pages();
    for (auto idx : msg.kv_indices)
      if (idx < 0 || static_cast<uint64_t>(idx) >= n)
        return "destination page index " + std::to_string(idx)
               + " out of range [0, " + std::to_string(n) + ") in buffer "
               + std::to_string(b);
  }
  for (size_t b = 0; b < layout.aux.size(); ++b) {
    auto n = layout.aux[b].num_pages();
    if (msg.aux_index < 0 || static_cast<uint64_t>(msg.aux_index) >= n)
      return "aux index " + std::to_string(msg.aux_index) + " out of range [0, "
             + std::to_string(n) + ") in aux buffer " + std::to_string(b);
  }
  return check_state_indices(layout, msg.state_indices);
}

/// Pull: why source `msg` may not be read into this room's pages (empty:
/// it may). Every read must land inside the pages this room handed out;
/// the source side is checked by the data plane (the peer's registered
/// memory, and on tcp what the peer granted this rank for the room).
std::string check_offer(const decode_room_state& st, const source_ready& msg) {
  // One chunk's writes to this rank are at most a few per page and buffer.
  constexpr size_t max_ops = size_t{1} << 22;
  if (msg.ops.empty() || msg.ops.size() > max_ops)
    return std::to_string(msg.ops.size()) + " reads offered (1 to "
           + std::to_string(max_ops) + ")";
  for (size_t i = 0; i < msg.ops.size(); ++i) {
    auto& op = msg.ops[i];
    if (op.size_bytes == 0 || !st.pull
        || !ranges_cover(st.pull->own_ranges, op.dst_addr, op.size_bytes))
      return "read " + std::to_string(i) + " of " + std::to_string(op.size_bytes)
             + " bytes would land outside this room's pages";
  }
  return {};
}

/// Pull: a source offers a chunk; this rank's worker reads it.
void on_offer(self_ptr self, source_ready& msg) {
  auto& st = self->state;
  auto& core = st.core;
  auto& me = core.shared().self;
  if (core.concluded())
    return; // the source hears of the conclusion (fan-out, fence)
  if (!core.params().pull || !st.dst_sent || msg.decode_rank != me.id) {
    logger()->debug("room {} on {}: an offer of reads from rank {} ignored (pull={}, "
                    "destination sent={})", msg.room, to_string(me), msg.src_rank,
                    core.params().pull, st.dst_sent);
    return;
  }
  auto* src = st.source_of(msg.src_rank);
  if (src == nullptr) {
    logger()->debug("room {} on {}: an offer of reads from rank {}, not a source, ignored",
                    msg.room, to_string(me), msg.src_rank);
    return;
  }
  // A source keeps at most a few chunks in flight (two batches each where
  // aux travels apart): more unanswered offers are not a prefill room's.
  constexpr size_t max_reads_per_source = 16;
  auto& pull = st.pulling();
  if (pull.reads.size() >= max_reads_per_source * st.sources.size()) {
    core.fail_local("prefill " + to_string(src->rank) + " offered more than "
                    + std::to_string(max_reads_per_source) + " reads per source at once",
                    failure_cause::other);
    return;
  }
  auto bad = check_offer(st, msg);
  if (!bad.empty()) {
    core.fail_local("prefill " + to_string(src->rank) + " offered reads this room cannot "
                    "take: " + bad, failure_cause::other);
    return;
  }
  auto kind = [](int32_t device) { return device < 0 ? mem_kind::host : mem_kind::device; };
  auto paths = choose_paths(src->endpoints, core.shared().self_entry->endpoints,
                            core.shared().transport,
                            memory_kinds{kind(msg.src_device_id), kind(msg.dst_device_id)});
  if (!paths) {
    core.fail_local("cannot reach prefill " + to_string(src->rank)
                    + " to read from it: " + describe(paths.error()), failure_cause::transport);
    return;
  }
  read_job job;
  job.room = core.params().room;
  job.job_id = pull.next_read++;
  job.batch.room = job.room;
  job.batch.peer = std::move(paths->front());
  pull.read_transport = job.batch.peer.transport;
  job.batch.remote_device_id = msg.src_device_id;
  job.batch.local_device_id = msg.dst_device_id;
  job.batch.ops.reserve(msg.ops.size());
  for (auto& op : msg.ops)
    job.batch.ops.push_back(read_op{op.src_addr, op.dst_addr, op.size_bytes});
  decode_room_state::pending_read pending{msg.src_rank, msg.job_id, std::move(msg.prefill_room),
                                         {}};
  if (msg.layer && st.counts_landing())
    pending.lands = bytes_per_buffer(core.shared().self_entry->layout.kv, msg.ops);
  pull.reads.emplace(job.job_id, std::move(pending));
  if (pull.reads.size() == 1)
    core.reading(true);
  if (!st.started) {
    st.started = true;
    core.advance(kv_poll::transferring);
  }
  self->send(core.shared().worker, std::move(job));
}

/// Pull: the worker read a job (or could not: the room fails, this rank its
/// origin): its source hears, and once nothing is being read the room's
/// fence may publish.
void on_read(self_ptr self, const transfer_result& res) {
  auto& st = self->state;
  auto& core = st.core;
  if (!st.pull)
    return;
  auto& pull = *st.pull;
  auto i = pull.reads.find(res.job_id);
  if (i == pull.reads.end())
    return;
  auto r = std::move(i->second);
  pull.reads.erase(i);
  if (res.ok) {
    // This rank moved these bytes: its metrics count them, as a pushing
    // prefill rank's count what it wrote.
    pull.bytes_read += res.bytes;
    core.note_transfer(pull.bytes_read, pull.read_transport);
    land(self, r.lands);
  }
  reads_done done{core.params().room, core.shared().self.id, r.source_job, res.ok,
                  res.reason, res.bytes};
  auto* src = st.source_of(r.source);
  if (!res.ok) {
    // This rank's worker found it: this rank is the failure's origin (its
    // source hears, and only stops).
    core.fail_local("reading from prefill "
                    + (src ? to_string(src->rank) : "rank " + std::to_string(r.source))
                    + " failed: " + res.reason, res.cause);
  }
  if (r.source_room)
    self->send(r.source_room, std::move(done));
  else if (src)
    st.core.send_to_peer(src->manager, std::move(done));
  if (pull.reads.empty())
    core.reading(false);
}

} // namespace

caf::behavior decode_room(counted_actor<decode_room_state>* self,
                          room_params params) {
  auto& core = self->state.core;
  core.init(self, std::move(params));
  auto& p = core.params();
  // Until resolved, a failure here must still reach the prefill group the
  // room was assigned to; the manager expands (side, dp) to its ranks.
  rank_ref group;
  group.side = role::prefill;
  group.dp_rank = p.peer_dp_rank;
  group.id = -1;
  core.set_counterparts({group});
  core.route_parts([=](const room_effect& fx) { report_part(self, fx); });
  self->state.hashing = core.shared().self_entry->integrity != "off";
  // The manager pushes the prefill group with the room's opening; a room
  // that opened before the group registered asks again on its ticks.
  return self->state.core.behavior_with(
    [=](group_reply& reply) { on_group(self, reply); },
    [=](receiver_init& msg) {
      auto& st = self->state;
      if (st.core.concluded() || st.initialized) {
        logger()->debug("room {}: receiver init ignored", msg.room);
        return;
      }
      auto bad = check_init(st.core.shared().self_entry->layout, msg);
      if (!bad.empty()) {
        st.core.fail_local("bad receiver init: " + bad, failure_cause::bad_input);
        return;
      }
      st.initialized = true;
      st.init = std::move(msg);
      maybe_send_dst(self);
    },
    // From other ranks: only from members (room_core::from_member).
    [=](const transfer_started& msg) {
      auto& st = self->state;
      if (st.core.from_member() && st.is_source(msg.src_rank))
        st.core.advance(kv_poll::transferring);
    },
    [=](const transfer_done& msg) {
      auto& st = self->state;
      if (!st.core.from_member())
        return;
      source_report report{msg.src_rank, msg.pages, st.init.kv_indices.size(), msg.counted,
                           msg.committed};
      // Its writes are over: what landed now is what stays (the fence).
      if (st.hashing && !st.core.concluded())
        report.damage = check_part(self, msg);
      if (st.landing.active() && st.is_source(msg.src_rank)) {
        // The one source's layers are all written: every buffer is whole.
        std::vector<int32_t> newly;
        st.landing.all(newly);
        st.core.publish_landed(std::move(newly));
      }
      st.core.source_finished(report);
    },
    [=](const chunk_landed& msg) {
      auto& st = self->state;
      if (st.core.from_member() && st.is_source(msg.src_rank)
          && msg.decode_rank == st.core.shared().self.id)
        land(self, buffer_bytes{msg.kv_buffers, msg.bytes});
    },
    [=](source_ready& msg) {
      if (self->state.core.from_member())
        on_offer(self, msg);
    },
    [=](const transfer_result& msg) {
      // Only this rank's worker answers reads.
      if (self->current_sender() == self->state.core.shared().worker)
        on_read(self, msg);
    },
    [=](tick_atom) {
      self->state.core.on_tick();
      resolve(self);
    });
}

} // namespace kvroom
