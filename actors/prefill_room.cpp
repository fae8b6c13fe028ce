#include "kvroom/actors/prefill_room.hpp"

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/messages/error.hpp"
#include "kvroom/transport/select.hpp"
#include "kvroom/transport/transfer_plan.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<prefill_room_state>*;

/// To the decode room: directly in this process, else through its manager
/// (by room id: no proxy per room crosses processes).
template <class T>
void to_decode(self_ptr self, T&& msg) {
  auto& st = self->state;
  if (st.dst.decode_room)
    self->send(st.dst.decode_room, std::forward<T>(msg));
  else if (st.peer)
    self->send(st.peer->manager, std::forward<T>(msg));
}

/// Checks that the declared pages and the decode allocation agree; fails the
/// room otherwise (a decode rank with fewer pages would read garbage).
bool check_counts(self_ptr self) {
  auto& st = self->state;
  if (!st.initialized || !st.has_dst)
    return true;
  auto dst_pages = st.dst.kv_indices.size();
  if (dst_pages == st.declared_pages)
    return true;
  st.core.fail_local("decode rank " + to_string(st.dst.decode_rank)
                     + " allocated " + std::to_string(dst_pages)
                     + " pages but prefill declared "
                     + std::to_string(st.declared_pages));
  return false;
}

void on_result(self_ptr self, const transfer_result& res);

/// Hands the next queued chunk to the worker when nothing is in flight (or
/// moves it right here when it is small and the data plane allows).
void pump(self_ptr self) {
  auto& st = self->state;
  auto& core = st.core;
  if (core.concluded() || !st.initialized || !st.has_dst
      || st.job_in_flight != 0 || st.queued.empty())
    return;
  auto chunk = std::move(st.queued.front());
  st.queued.pop_front();
  auto n = chunk.kv_indices.size();
  std::vector<int64_t> dst_pages(st.dst.kv_indices.begin() + st.planned_pages,
                                 st.dst.kv_indices.begin() + st.planned_pages
                                   + n);
  auto& src_layout = core.params().self_entry->layout;
  auto& dst_layout = st.peer->layout;
  auto ops = plan_writes(src_layout, dst_layout, chunk.kv_indices, dst_pages);
  if (!ops) {
    core.fail_local("cannot plan transfer to " + to_string(st.dst.decode_rank)
                    + ": " + describe(ops.error()));
    return;
  }
  write_batch batch;
  batch.tag = core.params().room;
  batch.peer = st.peer_endpoint;
  batch.ops = std::move(*ops);
  batch.src_device_id = kv_device_id(src_layout);
  batch.dst_device_id = kv_device_id(dst_layout);
  if (chunk.is_last && !src_layout.aux.empty()) {
    auto aux = plan_aux_writes(src_layout, dst_layout, st.aux_index,
                               st.dst.aux_index);
    if (!aux) {
      core.fail_local("cannot plan aux transfer to "
                      + to_string(st.dst.decode_rank) + ": "
                      + describe(aux.error()));
      return;
    }
    batch.aux_ops = static_cast<uint32_t>(aux->size());
    batch.ops.insert(batch.ops.end(), aux->begin(), aux->end());
  }
  st.planned_pages += n;
  st.job_in_flight = st.next_job++;
  st.last_in_flight = chunk.is_last;
  bool first = !st.started;
  if (first) {
    st.started = true;
    core.advance(kv_poll::transferring);
  }
  if (auto& shortcut = core.params().shortcut) {
    if (auto res = shortcut->try_copy(batch)) {
      // A room moved whole by one inline copy: decode hears transfer_done
      // at once, so "started" would only cost it a message (a cross-process
      // one, the expensive kind).
      if (first && (!chunk.is_last || *res))
        to_decode(self, transfer_started{core.params().room, core.params().self.id});
      auto bytes = batch.total_bytes();
      on_result(self, transfer_result{core.params().room, st.job_in_flight, !*res,
                                      *res ? describe(*res) : std::string{},
                                      *res ? 0 : bytes});
      return;
    }
  }
  if (first)
    to_decode(self, transfer_started{core.params().room, core.params().self.id});
  self->send(core.params().worker,
             transfer_job{core.params().room, st.job_in_flight,
                          std::move(batch)});
}

void on_chunk(self_ptr self, sender_chunk& chunk) {
  auto& st = self->state;
  auto& core = st.core;
  if (core.concluded()) {
    logger()->debug("room {} on {}: chunk after conclusion ignored",
                    core.params().room, to_string(core.params().self));
    return;
  }
  if (!st.initialized) {
    core.fail_local("send before init");
    return;
  }
  if (st.last_received) {
    core.fail_local("chunk after the last chunk");
    return;
  }
  auto n = chunk.kv_indices.size();
  if (st.received_pages + n > st.declared_pages) {
    core.fail_local("too many KV indices: " + std::to_string(st.received_pages + n)
                    + " sent, " + std::to_string(st.declared_pages)
                    + " declared by init");
    return;
  }
  if (chunk.is_last && st.received_pages + n != st.declared_pages) {
    core.fail_local("last chunk leaves "
                    + std::to_string(st.declared_pages - st.received_pages - n)
                    + " of " + std::to_string(st.declared_pages)
                    + " declared pages unsent");
    return;
  }
  if (st.queued.size() >= core.params().max_queued_chunks) {
    core.fail_local("more than " + std::to_string(core.params().max_queued_chunks)
                    + " chunks queued");
    return;
  }
  st.received_pages += n;
  st.last_received = chunk.is_last;
  // A non-last empty chunk moves nothing; the last one still carries aux.
  if (n > 0 || chunk.is_last)
    st.queued.push_back(std::move(chunk));
  pump(self);
}

void on_dst(self_ptr self, dst_ready& msg) {
  auto& st = self->state;
  auto& core = st.core;
  auto& me = core.params().self;
  if (core.concluded()) {
    // The decode rank may not have been known when this room failed: tell
    // it now, with the original root cause.
    // (Its manager fences the destination: this room posts nothing more.)
    if (core.protocol().state() == kv_poll::failed && msg.peer)
      self->send(msg.peer->manager,
                 room_failed{core.params().room, core.protocol().failure(), true,
                             me.id});
    return;
  }
  if (!msg.peer) {
    core.fail_local("destination from unknown decode rank "
                    + to_string(msg.info.decode_rank));
    return;
  }
  if (st.has_dst) {
    if (st.dst.decode_rank.id == msg.info.decode_rank.id) {
      logger()->debug("room {} on {}: duplicate destination ignored",
                      core.params().room, to_string(me));
      return;
    }
    core.fail_local("second decode destination " + to_string(msg.info.decode_rank)
                    + " (already serving " + to_string(st.dst.decode_rank)
                    + ")");
    return;
  }
  auto& d = msg.info.decode_rank;
  if (d.tp_size != me.tp_size || d.tp_rank != me.tp_rank) {
    core.fail_local("unsupported: decode " + to_string(d) + " with tp_size "
                    + std::to_string(d.tp_size) + " asks prefill "
                    + to_string(me) + " with tp_size "
                    + std::to_string(me.tp_size)
                    + " (head-sliced transfers need equal tp sizes)");
    return;
  }
  auto kind = [](const memory_layout& x) {
    return kv_device_id(x) < 0 ? mem_kind::host : mem_kind::device;
  };
  auto ep = choose_endpoint(msg.peer->endpoints,
                            core.params().self_entry->endpoints,
                            core.params().transport,
                            memory_kinds{kind(core.params().self_entry->layout),
                                         kind(msg.peer->layout)});
  if (!ep) {
    core.fail_local("cannot reach decode " + to_string(d) + ": " + describe(ep.error()));
    return;
  }
  st.peer_endpoint = std::move(*ep);
  st.has_dst = true;
  st.dst = std::move(msg.info);
  st.peer = std::move(msg.peer);
  core.set_counterparts({st.dst.decode_rank});
  if (!check_counts(self))
    return;
  core.advance(kv_poll::waiting_for_input);
  pump(self);
}

void on_result(self_ptr self, const transfer_result& res) {
  auto& st = self->state;
  auto& core = st.core;
  if (res.job_id != st.job_in_flight) {
    logger()->debug("room {}: stale transfer result {} ignored", res.room,
                    res.job_id);
    return;
  }
  st.job_in_flight = 0;
  if (!res.ok) {
    core.fail_local("transfer to " + to_string(st.dst.decode_rank)
                    + " failed: " + res.reason);
    return;
  }
  st.bytes_moved += res.bytes;
  if (!st.last_in_flight) {
    pump(self);
    return;
  }
  if (core.concluded())
    return;
  transfer_done done{core.params().room, core.params().self.id, st.bytes_moved,
                     st.planned_pages};
  // Every byte landed; Success waits for the room's decider.
  core.prepare();
  if (core.protocol().deciding()) {
    // The decider: this slot's part is done (the bytes landed), no need for
    // the decode rank to say so. When that was the last part, the room
    // commits here and this very message carries the commit: two
    // cross-process messages per 1P x 1D room instead of four.
    auto& d = st.dst.decode_rank;
    done.counted = true;
    done.committed = core.count_part(d, st.dst.decode_room);
  }
  to_decode(self, std::move(done));
}

} // namespace

caf::behavior prefill_room(counted_actor<prefill_room_state>* self,
                           room_params params) {
  self->state.core.init(self, std::move(params));
  auto& p = self->state.core.params();
  return {
    [=](sender_init& msg) {
      auto& st = self->state;
      auto& core = st.core;
      if (core.concluded() || st.initialized) {
        logger()->debug("room {}: init ignored (initialized={}, state={})",
                        msg.room, st.initialized, to_string(core.protocol().state()));
        return;
      }
      auto& aux = core.params().self_entry->layout.aux;
      for (size_t b = 0; b < aux.size(); ++b) {
        if (msg.aux_index < 0
            || static_cast<uint64_t>(msg.aux_index) >= aux[b].num_pages()) {
          core.fail_local("aux index " + std::to_string(msg.aux_index)
                          + " out of range [0, "
                          + std::to_string(aux[b].num_pages())
                          + ") in aux buffer " + std::to_string(b));
          return;
        }
      }
      st.initialized = true;
      st.declared_pages = msg.num_kv_indices;
      st.aux_index = msg.aux_index;
      if (check_counts(self))
        pump(self);
    },
    [=](sender_chunk& msg) { on_chunk(self, msg); },
    [=](dst_ready& msg) { on_dst(self, msg); },
    [=](const transfer_result& msg) { on_result(self, msg); },
    // From other ranks: only from members (room_core::from_member).
    [=](const room_failed& msg) {
      if (self->state.core.from_member())
        self->state.core.on_failed(msg);
    },
    [=](const room_committed&) {
      if (self->state.core.from_member())
        self->state.core.on_committed();
    },
    [=](const part_done& msg) {
      if (self->state.core.from_member())
        self->state.core.on_part(msg);
    },
    [=](const room_abort& msg) {
      self->state.core.fail_local("aborted by prefill scheduler: " + msg.reason,
                                  true);
    },
    [=](const peer_lost& msg) { self->state.core.on_peer_lost(msg); },
    [=](const room_clear&) { self->state.core.clear(); },
    [=](tick_atom) { self->state.core.on_tick(); },
  };
}

} // namespace kvroom
