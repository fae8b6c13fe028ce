#include "kvroom/actors/room/prefill_room.hpp"

#include <algorithm>
#include <iterator>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/transport/part_digest.hpp"
#include "kvroom/transport/select.hpp"
#include "kvroom/transport/transfer_plan.hpp"
#include "kvroom/transport/grants.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<prefill_room_state>*;

/// To a decode room: directly in this process, else through its manager
/// (by room id: no proxy per room crosses processes).
template <class T>
void to_decode(self_ptr self, const prefill_target& t, T msg) {
  if (t.dst.decode_room)
    self->send(t.dst.decode_room, std::move(msg));
  else if (t.peer)
    self->state.core.send_to_peer(t.peer->manager, std::move(msg));
}

bool ready(const prefill_room_state& st) {
  return st.role_known
         && std::all_of(st.targets.begin(), st.targets.end(),
                        [](const prefill_target& t) { return t.has_dst; });
}

/// Checks that the declared pages and every decode allocation agree; fails
/// the room otherwise (a decode rank with fewer pages would read garbage).
bool check_counts(self_ptr self) {
  auto& st = self->state;
  if (!st.initialized)
    return true;
  for (auto& t : st.targets) {
    if (!t.has_dst || t.dst.kv_indices.size() == st.declared_pages)
      continue;
    st.core.fail_local("decode rank " + to_string(t.dst.decode_rank) + " allocated "
                       + std::to_string(t.dst.kv_indices.size())
                       + " pages but prefill declared " + std::to_string(st.declared_pages),
                       failure_cause::bad_input);
    return false;
  }
  return true;
}

void on_result(self_ptr self, const transfer_result& res);

/// The part of this room that target `t` receives from this rank.
part_spec part_of(self_ptr self, const prefill_target& t) {
  auto& st = self->state;
  auto& me = *st.core.shared().self_entry;
  part_spec part;
  part.src_mem = &me.layout;
  part.dst_mem = &t.peer->layout;
  if (st.mapped) {
    part.mapping = t.map.get();
    part.src_place = place_of(me.parallel);
    part.src_parallel = &me.parallel;
    part.dst_parallel = &t.peer->parallel;
  }
  return part;
}

/// Appends the batches of one chunk for target `t` to `out` (one; two on
/// the last chunk where aux sits apart from the KV: the KV pages, then the
/// aux writes), or says why they cannot be planned. With the integrity
/// check on, the writes are kept for the part's digest.
/// `x` with only the KV buffers `buffers` (aux and state as they are).
memory_layout only_buffers(const memory_layout& x, const std::vector<int32_t>& buffers) {
  memory_layout out = x;
  out.kv.clear();
  for (auto b : buffers)
    out.kv.push_back(x.kv[static_cast<size_t>(b)]);
  return out;
}

caf::error plan_for(self_ptr self, prefill_target& t, const prefill_room_state::queued_chunk& q,
                    std::vector<write_batch>& out) {
  auto& st = self->state;
  auto& core = st.core;
  auto& chunk = q.chunk;
  auto n = chunk.kv_indices.size();
  auto from = t.dst.kv_indices.begin() + static_cast<std::ptrdiff_t>(q.offset);
  std::vector<int64_t> dst_pages(from, from + static_cast<std::ptrdiff_t>(n));
  write_batch batch;
  auto part = part_of(self, t);
  // A chunk of some buffers (a layer's): the same plan over those alone,
  // on both sides (buffer b here is buffer b there).
  memory_layout src_sub, dst_sub;
  if (!chunk.kv_buffers.empty()) {
    src_sub = only_buffers(*part.src_mem, chunk.kv_buffers);
    dst_sub = only_buffers(*part.dst_mem, chunk.kv_buffers);
    part.src_mem = &src_sub;
    part.dst_mem = &dst_sub;
  }
  // Strided writes where the data plane moves them and nothing here needs
  // the plain ones: a pull hands them to the reader, integrity hashes them.
  auto& dp = core.shared().data_plane;
  bool strided = dp && !t.dst.pull && !st.hashing && dp->caps().strided_writes;
  auto ops = plan_part(part, chunk.kv_indices, dst_pages, chunk.is_last,
                       st.aux_index, t.dst.aux_index, st.state_indices, t.dst.state_indices,
                       batch.aux_ops, strided ? &batch.strided : nullptr);
  if (!ops)
    return make_error(errc::invalid_argument, "cannot plan transfer to "
                                                + to_string(t.dst.decode_rank) + ": "
                                                + describe(ops.error()));
  if (st.hashing)
    t.written.insert(t.written.end(), ops->begin(), ops->end());
  batch.room = core.params().room;
  batch.peer = t.endpoint;
  batch.alternates = t.alternates;
  batch.ops = std::move(*ops);
  auto& mine = core.shared().self_entry->layout;
  batch.src_device_id = kv_device_id(mine);
  batch.dst_device_id = kv_device_id(t.peer->layout);
  if (t.aux_apart && batch.aux_ops > 0) {
    // The aux writes are the batch's last (plan_part keeps them there).
    write_batch aux;
    aux.room = batch.room;
    aux.peer = t.aux_endpoint;
    aux.alternates = t.aux_alternates;
    aux.ops.assign(batch.ops.end() - batch.aux_ops, batch.ops.end());
    aux.aux_ops = batch.aux_ops;
    aux.src_device_id = aux_device_id(mine);
    aux.dst_device_id = aux_device_id(t.peer->layout);
    batch.ops.resize(batch.ops.size() - batch.aux_ops);
    batch.aux_ops = 0;
    if (batch.descriptors() > 0)
      out.push_back(std::move(batch));
    out.push_back(std::move(aux));
    return caf::none;
  }
  out.push_back(std::move(batch));
  return caf::none;
}

/// A pull: instead of posting `batch`, grants decode rank `t` reads of its
/// source bytes for this room (where the data plane serves reads itself)
/// and tells it where they are; its `reads_done` is this job's result.
void offer_reads(self_ptr self, prefill_target& t, uint64_t job, write_batch batch, bool layer) {
  auto& core = self->state.core;
  auto& room = core.params().room;
  auto& dp = core.shared().data_plane;
  if (dp && dp->enforces_read_grants()) {
    std::vector<byte_range> ranges;
    ranges.reserve(batch.ops.size());
    for (auto& op : batch.ops)
      ranges.push_back(byte_range{op.src_addr, op.size_bytes});
    if (!dp->grant_read(room, t.dst.decode_rank.id, merge_ranges(std::move(ranges)))) {
      // As a message: the caller is still walking this chunk's jobs.
      self->send(self, transfer_result{room, job, false,
                                       "this rank's read grant table is full", 0});
      return;
    }
  }
  core.reads_granted();
  source_ready msg;
  msg.room = room;
  msg.src_rank = core.shared().self.id;
  msg.decode_rank = t.dst.decode_rank.id;
  msg.job_id = job;
  if (t.dst.decode_room)
    msg.prefill_room = caf::actor_cast<caf::actor>(self);
  msg.ops = std::move(batch.ops);
  msg.src_device_id = batch.src_device_id;
  msg.dst_device_id = batch.dst_device_id;
  msg.layer = layer;
  to_decode(self, t, std::move(msg));
}

/// Chunks of one room in flight at once. Their writes go to pages of their
/// own (or buffers of their own: a layer's), so they need no order among
/// them; the room's part is done once every one of them landed. A few keep
/// a layer-by-layer room from paying a round trip per layer.
constexpr size_t max_chunks_in_flight = 8;

bool send_one_chunk(self_ptr self);

/// Hands queued chunks to the worker, one batch per target each, while
/// fewer than `max_chunks_in_flight` are in flight (or moves one right here
/// when it is small and the data plane allows). A dummy (no target) moves
/// nothing.
void send_next_chunk(self_ptr self) {
  auto& st = self->state;
  while (!st.core.concluded() && !st.broken && st.initialized && ready(st) && !st.queued.empty()
         && !st.targets.empty() && st.jobs.size() < max_chunks_in_flight * st.targets.size())
    if (!send_one_chunk(self))
      return;
}

/// Plans and posts the next queued chunk; false when it failed the room.
bool send_one_chunk(self_ptr self) {
  auto& st = self->state;
  auto& core = st.core;
  auto q = std::move(st.queued.front());
  st.queued.pop_front();
  auto& chunk = q.chunk;
  // Every batch is planned before any moves: nothing goes out partially.
  // Each batch's target goes into `job_targets` after those of the jobs in
  // flight (from `base` on), undone if planning fails.
  auto base = st.jobs.size();
  std::vector<write_batch> batches;
  batches.reserve(st.targets.size());
  for (size_t i = 0; i < st.targets.size(); ++i) {
    if (auto err = plan_for(self, st.targets[i], q, batches)) {
      st.job_targets.resize(base);
      core.fail_local(describe(err), failure_cause::bad_input);
      return false;
    }
    st.job_targets.resize(base + batches.size(), i);
  }
  st.planned_pages = std::max(st.planned_pages, q.offset + chunk.kv_indices.size());
  st.last_in_flight = chunk.is_last;
  bool first = !st.started;
  if (first) {
    st.started = true;
    core.advance(kv_poll::transferring);
  }
  auto& room = core.params().room;
  // This chunk's job ids: first_id, first_id + 1, ...
  auto first_id = st.next_job;
  for (size_t i = 0; i < batches.size(); ++i)
    st.jobs.push_back(st.next_job++);
  // A pushed layer's decode rank hears when it landed (a pulling one counts
  // its own reads); a part checked for integrity lands with the room.
  if (!chunk.kv_buffers.empty() && !st.hashing)
    for (size_t i = 0; i < batches.size(); ++i) {
      auto& t = st.targets[st.job_targets[base + i]];
      if (t.dst.pull || !t.peer)
        continue;
      auto lands = bytes_per_buffer(t.peer->layout.kv, batches[i].strided.empty()
                                                         ? batches[i].ops
                                                         : expand_strided(batches[i]).ops);
      if (!lands.empty())
        st.job_lands.emplace_back(first_id + i, std::move(lands));
    }
  // Small batches move right here when the data plane allows.
  std::vector<transfer_result> done_here;
  std::vector<bool> inline_done(batches.size(), false);
  if (auto& shortcut = core.shared().shortcut) {
    for (size_t i = 0; i < batches.size(); ++i) {
      if (st.targets[st.job_targets[base + i]].dst.pull)
        continue; // the decode rank reads it
      if (auto res = shortcut->try_post(batches[i])) {
        inline_done[i] = true;
        done_here.push_back(transfer_result{
          room, first_id + i, !*res, *res ? describe(*res) : std::string{},
          *res ? 0 : batches[i].total_bytes(),
          is(*res, errc::injected_fault) ? failure_cause::fault : failure_cause::transport});
      }
    }
  }
  // A room moved whole by inline copies: decode hears transfer_done at
  // once, so "started" would only cost it a message (a cross-process one,
  // the expensive kind).
  bool whole_inline = chunk.is_last && done_here.size() == batches.size()
                      && std::all_of(done_here.begin(), done_here.end(),
                                     [](const transfer_result& r) { return r.ok; });
  if (first && !whole_inline)
    for (auto& t : st.targets)
      if (!t.dst.pull) // a pulling decode rank knows when its reads start
        to_decode(self, t, transfer_started{room, core.shared().self.id});
  // The worker takes the chunk's pushed batches in one message: a copying
  // backend then interleaves the decode ranks' writes (head slicing reads
  // each source token once instead of once per decode rank).
  std::vector<transfer_job> pushed;
  for (size_t i = 0; i < batches.size(); ++i) {
    if (inline_done[i])
      continue;
    auto& t = st.targets[st.job_targets[base + i]];
    if (t.dst.pull)
      offer_reads(self, t, first_id + i, std::move(batches[i]), !chunk.kv_buffers.empty());
    else
      pushed.push_back(transfer_job{room, first_id + i, std::move(batches[i])});
  }
  if (pushed.size() == 1)
    self->send(core.shared().worker, std::move(pushed.front()));
  else if (!pushed.empty())
    self->send(core.shared().worker, transfer_jobs{room, std::move(pushed)});
  for (auto& res : done_here)
    on_result(self, res);
  return !core.concluded();
}

void on_chunk(self_ptr self, sender_chunk& chunk) {
  auto& st = self->state;
  auto& core = st.core;
  if (core.concluded()) {
    logger()->debug("room {} on {}: chunk after conclusion ignored",
                    core.params().room, to_string(core.shared().self));
    return;
  }
  if (!st.initialized) {
    core.fail_local("send before init", failure_cause::bad_input);
    return;
  }
  if (st.last_received) {
    core.fail_local("chunk after the last chunk", failure_cause::bad_input);
    return;
  }
  auto n = chunk.kv_indices.size();
  if (!chunk.kv_buffers.empty() && st.mapped) {
    core.fail_local("a chunk of some KV buffers (a layer's) needs a room without declared "
                    "parallel layouts: a mapped room moves every layer of its pages at once",
                    failure_cause::bad_input);
    return;
  }
  auto admitted = st.ledger->admit(n, chunk.kv_buffers, chunk.is_last);
  if (!admitted.error.empty()) {
    core.fail_local(admitted.error, failure_cause::bad_input);
    return;
  }
  if (st.queued.size() >= core.shared().max_queued_chunks) {
    core.fail_local("more than " + std::to_string(core.shared().max_queued_chunks)
                    + " chunks queued", failure_cause::bad_input);
    return;
  }
  if (!chunk.state_indices.empty() && !chunk.is_last) {
    core.fail_local("state indices with a chunk that is not the last", failure_cause::bad_input);
    return;
  }
  if (chunk.is_last) {
    core.note_transfer_start();
    auto& me = *core.shared().self_entry;
    auto why = check_state_indices(me.layout, chunk.state_indices);
    if (!why.empty()) {
      core.fail_local("bad send: " + why, failure_cause::bad_input);
      return;
    }
    st.state_indices = chunk.state_indices;
  }
  st.last_received = chunk.is_last;
  // A dummy moves nothing; a non-last empty chunk neither; the last one
  // still carries aux.
  if ((n > 0 || chunk.is_last) && !(st.role_known && st.targets.empty()))
    st.queued.push_back(prefill_room_state::queued_chunk{std::move(chunk), admitted.offset});
  send_next_chunk(self);
}

void on_dst(self_ptr self, dst_ready& msg);

/// Mapped rooms: the decode ranks this rank writes, once its whole group
/// and the decode TP size are known. A rank the mapping gives nothing to
/// (MLA beyond the decode TP size, say) is a dummy: its part is done from
/// the start and it concludes with the room (the decider commits the whole
/// group; a failure reaches it through the group's fan-out).
void resolve_role(self_ptr self) {
  auto& st = self->state;
  auto& core = st.core;
  if (st.role_known || core.concluded() || st.decode_tp <= 0)
    return;
  auto& me = *core.shared().self_entry;
  std::vector<parallel_layout> layouts;
  for (auto& e : st.group) {
    if (!e->has_parallel) {
      core.fail_local("prefill " + to_string(e->rank) + " declares no parallel layout",
                      failure_cause::bad_input);
      return;
    }
    layouts.push_back(e->parallel);
  }
  auto full = static_cast<size_t>(me.parallel.tp_size) * static_cast<size_t>(me.parallel.pp_size);
  if (layouts.size() < full)
    return; // a rank of the group has not registered yet: the next push
  auto targets = prefill_targets(layouts, me.parallel, st.decode_tp);
  if (!targets) {
    core.fail_local(describe(targets.error()), failure_cause::bad_input);
    return;
  }
  st.role_known = true;
  for (auto t : *targets) {
    prefill_target x;
    x.tp_rank = t;
    st.targets.push_back(std::move(x));
  }
  std::vector<rank_id> group;
  for (auto& e : st.group)
    group.push_back(e->rank.id);
  core.mapped_group(group);
  if (st.targets.empty()) {
    logger()->debug("room {} on {}: a dummy (no decode rank of TP {} needs its heads)",
                    core.params().room, to_string(core.shared().self), st.decode_tp);
    st.queued.clear();
    core.advance(kv_poll::waiting_for_input);
    // A commit heard before this rank knew it is a dummy was kept by the
    // protocol: preparing concludes the room with it.
    core.prepare();
  }
  auto early = std::move(st.early);
  st.early.clear();
  for (auto& x : early)
    on_dst(self, x);
}

void on_group(self_ptr self, group_reply& reply) {
  auto& st = self->state;
  if (!st.mapped || st.role_known)
    return;
  st.group = std::move(reply.ranks);
  if (reply.decode_tp > 0 && st.decode_tp == 0)
    st.decode_tp = reply.decode_tp;
  resolve_role(self);
}

void on_dst(self_ptr self, dst_ready& msg) {
  auto& st = self->state;
  auto& core = st.core;
  auto& me = core.shared().self;
  if (core.concluded()) {
    // The decode rank may not have been known when this room failed: tell
    // it now, with the original root cause.
    // (Its manager fences the destination: this room posts nothing more.)
    if (core.protocol().state() == kv_poll::failed && msg.peer)
      core.send_to_peer(msg.peer->manager,
                 room_failed{core.params().room, core.protocol().failure(), true,
                             me.id});
    return;
  }
  if (!msg.peer) {
    core.fail_local("destination from unknown decode rank "
                    + to_string(msg.info.decode_rank), failure_cause::bad_input);
    return;
  }
  auto& d = msg.info.decode_rank;
  if (st.mapped && !msg.peer->has_parallel) {
    // SGLang's decode ranks declare no heads: they hold this model at their
    // TP size (the registry checked that their pages are its pages).
    auto implied = implied_layout(core.shared().self_entry->parallel, msg.peer->rank.tp_size,
                                  msg.peer->rank.tp_rank, msg.peer->layout.kv);
    if (!implied) {
      core.fail_local("decode " + to_string(d) + " declares no parallel layout: "
                      + describe(implied.error()), failure_cause::bad_input);
      return;
    }
    auto peer = std::make_shared<rank_entry>(*msg.peer);
    peer->parallel = *implied;
    peer->has_parallel = true;
    msg.peer = std::move(peer);
  }
  if (st.mapped) {
    auto tp = msg.peer->parallel.tp_size;
    if (!st.role_known) {
      if (st.decode_tp == 0)
        st.decode_tp = tp;
      if (st.early.size() >= static_cast<size_t>(std::max(st.decode_tp, 1))) {
        core.fail_local("more destinations than the decode TP size "
                        + std::to_string(st.decode_tp), failure_cause::bad_input);
        return;
      }
      st.early.push_back(std::move(msg));
      resolve_role(self);
      return;
    }
    if (tp != st.decode_tp) {
      core.fail_local("decode " + to_string(d) + " has TP size " + std::to_string(tp)
                      + ", this room was mapped for " + std::to_string(st.decode_tp),
                      failure_cause::bad_input);
      return;
    }
  } else if (!st.role_known) {
    if (d.tp_size != me.tp_size || d.tp_rank != me.tp_rank) {
      core.fail_local("unsupported: decode " + to_string(d) + " with tp_size "
                      + std::to_string(d.tp_size) + " asks prefill "
                      + to_string(me) + " with tp_size "
                      + std::to_string(me.tp_size)
                      + " (head-sliced transfers need parallel layouts declared on both sides)",
                      failure_cause::bad_input);
      return;
    }
    st.role_known = true;
    st.targets.push_back(prefill_target{});
    st.targets.back().tp_rank = d.tp_rank;
  }
  auto t = std::find_if(st.targets.begin(), st.targets.end(),
                        [&](const prefill_target& x) { return x.tp_rank == d.tp_rank; });
  if (t == st.targets.end()) {
    core.fail_local("decode " + to_string(d) + " sent a destination to prefill " + to_string(me)
                    + ", which the rank mapping gives no part of its pages",
                    failure_cause::bad_input);
    return;
  }
  if (t->has_dst) {
    if (t->dst.decode_rank.id == d.id) {
      logger()->debug("room {} on {}: duplicate destination ignored",
                      core.params().room, to_string(me));
      return;
    }
    core.fail_local("second decode destination " + to_string(d) + " (already serving "
                    + to_string(t->dst.decode_rank) + ")", failure_cause::bad_input);
    return;
  }
  if (st.mapped) {
    std::vector<parallel_layout> layouts;
    for (auto& e : st.group)
      layouts.push_back(e->parallel);
    auto m = shared_decode_mapping(layouts, msg.peer->parallel);
    if (!m) {
      core.fail_local("cannot map to decode " + to_string(d) + ": " + describe(m.error()),
                      failure_cause::bad_input);
      return;
    }
    t->map = std::move(*m);
  }
  if (msg.info.pull) {
    auto& dp = core.shared().data_plane;
    if (!dp || !dp->caps().reads) {
      core.fail_local("decode " + to_string(d) + " pulls, and this rank's data plane serves no "
                      "reads", failure_cause::transport);
      return;
    }
  }
  auto kind = [](int32_t device) { return device < 0 ? mem_kind::host : mem_kind::device; };
  auto paths = choose_paths(msg.peer->endpoints, core.shared().self_entry->endpoints,
                            core.shared().transport,
                            memory_kinds{kind(kv_device_id(core.shared().self_entry->layout)),
                                         kind(kv_device_id(msg.peer->layout))});
  if (!paths) {
    core.fail_local("cannot reach decode " + to_string(d) + ": " + describe(paths.error()),
                    failure_cause::transport);
    return;
  }
  t->endpoint = std::move(paths->front());
  t->alternates.assign(std::make_move_iterator(paths->begin() + 1),
                       std::make_move_iterator(paths->end()));
  // Aux apart from the KV on either side: its own paths, for its kinds.
  auto& mine = core.shared().self_entry->layout;
  t->aux_apart = !mine.aux.empty()
                 && (aux_device_id(mine) != kv_device_id(mine)
                     || aux_device_id(msg.peer->layout) != kv_device_id(msg.peer->layout));
  if (t->aux_apart) {
    auto aux_paths = choose_paths(msg.peer->endpoints, core.shared().self_entry->endpoints,
                                  core.shared().transport,
                                  memory_kinds{kind(aux_device_id(mine)),
                                               kind(aux_device_id(msg.peer->layout))});
    if (!aux_paths) {
      core.fail_local("cannot reach decode " + to_string(d) + " for aux (on "
                      + (aux_device_id(mine) < 0 ? "the host" : "a GPU")
                      + " beside a KV cache elsewhere): " + describe(aux_paths.error()),
                      failure_cause::transport);
      return;
    }
    t->aux_endpoint = std::move(aux_paths->front());
    t->aux_alternates.assign(std::make_move_iterator(aux_paths->begin() + 1),
                             std::make_move_iterator(aux_paths->end()));
  }
  t->has_dst = true;
  t->dst = std::move(msg.info);
  t->peer = std::move(msg.peer);
  if (!check_counts(self) || !ready(st))
    return;
  std::vector<rank_ref> counterparts;
  for (auto& x : st.targets) {
    counterparts.push_back(x.dst.decode_rank);
    // Every decode rank of the room skips the same cached prefix, or the
    // pages it allocated mean different tokens than the others'.
    if (x.dst.decode_prefix_len != st.targets.front().dst.decode_prefix_len) {
      core.fail_local("decode ranks disagree on their cached prefix: "
                      + to_string(st.targets.front().dst.decode_rank) + " holds "
                      + std::to_string(st.targets.front().dst.decode_prefix_len) + " tokens, "
                      + to_string(x.dst.decode_rank) + " "
                      + std::to_string(x.dst.decode_prefix_len), failure_cause::bad_input);
      return;
    }
  }
  if (!st.targets.empty())
    core.set_decode_prefix_len(st.targets.front().dst.decode_prefix_len);
  core.set_counterparts(std::move(counterparts));
  core.advance(kv_poll::waiting_for_input);
  send_next_chunk(self);
}

void on_result(self_ptr self, const transfer_result& res) {
  auto& st = self->state;
  auto& core = st.core;
  auto job = st.job_index(res.job_id);
  if (job < 0) {
    logger()->debug("room {}: stale transfer result {} ignored", res.room,
                    res.job_id);
    return;
  }
  auto target = st.take_job(job);
  auto lands = st.take_lands(res.job_id);
  if (!res.ok) {
    // Nothing more of the room moves, and what is still in flight counts
    // for nothing: the part is not whole (the protocol waits for the
    // decider's answer).
    st.broken = true;
    st.queued.clear();
    core.fail_local("transfer to " + to_string(st.targets[target].dst.decode_rank)
                    + " failed: " + res.reason, res.cause);
    return;
  }
  if (st.broken)
    return;
  st.bytes_moved += res.bytes;
  if (core.concluded())
    return;
  if (!lands.empty()) {
    auto& t = st.targets[target];
    to_decode(self, t, chunk_landed{core.params().room, core.shared().self.id,
                                    t.dst.decode_rank.id, std::move(lands.buffers),
                                    std::move(lands.bytes)});
  }
  if (!st.last_in_flight) {
    send_next_chunk(self); // room for one more in flight
    return;
  }
  if (!st.jobs.empty())
    return;
  // Every byte landed; the protocol decides who hears of which part.
  if (!st.targets.empty())
    core.note_transfer(st.bytes_moved, st.targets.front().endpoint.transport);
  std::vector<written_part> parts;
  parts.reserve(st.targets.size());
  for (auto& t : st.targets) {
    core.know_room(t.dst.decode_rank.id, t.dst.decode_room);
    if (st.hashing) {
      // The part's bytes in the room's logical order, which the decode
      // rank checks what landed against.
      t.digest = digest_sources(std::move(t.written));
      t.written = {};
    }
    parts.push_back(room_protocol::part_written(t.dst.decode_rank, st.mapped,
                                                t.map ? t.map->sources.size() : 0, st.hashing));
  }
  core.all_written(parts);
}

/// A part's word for decode rank `fx.rank`: this rank's last byte landed
/// (`tell_done`), or its slot's part is done (`report_part`, to the
/// decider, with both rooms' handles for a decider in this process: its
/// manager drops them for one in another).
void tell_part(self_ptr self, const room_effect& fx) {
  auto& st = self->state;
  auto& core = st.core;
  auto t = std::find_if(st.targets.begin(), st.targets.end(), [&](const prefill_target& x) {
    return x.dst.decode_rank.id == fx.rank;
  });
  if (t == st.targets.end())
    return;
  auto& me = core.shared().self;
  if (fx.what == room_effect::kind::report_part) {
    part_done part{core.params().room, fx.slot, fx.slots, fx.rank, t->dst.decode_room, me.id,
                   caf::actor_cast<caf::actor>(self)};
    core.to_decider(fx.decider, caf::make_message(std::move(part)));
    return;
  }
  to_decode(self, *t, transfer_done{core.params().room, me.id, st.bytes_moved,
                                    st.planned_pages, fx.counted, fx.committed, st.hashing,
                                    t->digest});
}

} // namespace

caf::behavior prefill_room(counted_actor<prefill_room_state>* self,
                           room_params params) {
  self->state.core.init(self, std::move(params));
  self->state.core.route_parts([=](const room_effect& fx) { tell_part(self, fx); });
  auto& entry = *self->state.core.shared().self_entry;
  self->state.mapped = entry.has_parallel;
  self->state.hashing = entry.integrity != "off";
  return self->state.core.behavior_with(
    [=](sender_init& msg) {
      auto& st = self->state;
      auto& core = st.core;
      if (core.concluded() || st.initialized) {
        logger()->debug("room {}: init ignored (initialized={}, state={})",
                        msg.room, st.initialized, to_string(core.protocol().state()));
        return;
      }
      auto& aux = core.shared().self_entry->layout.aux;
      for (size_t b = 0; b < aux.size(); ++b) {
        if (msg.aux_index < 0
            || static_cast<uint64_t>(msg.aux_index) >= aux[b].num_pages()) {
          core.fail_local("aux index " + std::to_string(msg.aux_index)
                          + " out of range [0, "
                          + std::to_string(aux[b].num_pages())
                          + ") in aux buffer " + std::to_string(b), failure_cause::bad_input);
          return;
        }
      }
      st.initialized = true;
      st.declared_pages = msg.num_kv_indices;
      st.ledger.emplace(core.shared().self_entry->layout.kv.size(), msg.num_kv_indices);
      st.aux_index = msg.aux_index;
      if (check_counts(self))
        send_next_chunk(self);
    },
    [=](sender_chunk& msg) { on_chunk(self, msg); },
    [=](dst_ready& msg) { on_dst(self, msg); },
    [=](group_reply& msg) { on_group(self, msg); },
    [=](const transfer_result& msg) { on_result(self, msg); },
    // A pulling decode rank read a job (only from members, and only the
    // decode rank the job was offered to).
    [=](reads_done& msg) {
      auto& st = self->state;
      if (!st.core.from_member())
        return;
      auto job = st.job_index(msg.job_id);
      if (job < 0)
        return; // stale: its chunk failed or the room concluded
      auto& t = st.targets[st.job_targets[static_cast<size_t>(job)]];
      if (!t.dst.pull || t.dst.decode_rank.id != msg.decode_rank) {
        logger()->debug("room {}: reads_done for job {} from rank {}, offered to rank {}, "
                        "ignored", msg.room, msg.job_id, msg.decode_rank,
                        t.dst.decode_rank.id);
        return;
      }
      if (!msg.ok) {
        // The decode rank found it and is the failure's origin: this rank
        // only stops (nothing more moves, no part is whole) and concludes
        // with the decider's decision.
        st.take_job(job);
        st.broken = true;
        st.queued.clear();
        logger()->debug("room {}: decode rank {} could not read job {}: {}", msg.room,
                        msg.decode_rank, msg.job_id, msg.reason);
        return;
      }
      on_result(self, transfer_result{msg.room, msg.job_id, true, {}, msg.bytes});
    },
    // From other ranks: only from members (room_core::from_member).
    [=](const part_done& msg) {
      if (self->state.core.from_member())
        self->state.core.on_part(msg);
    },
    [=](tick_atom) { self->state.core.on_tick(); });
}

} // namespace kvroom
