#include "kvroom/actors/manager/transfer_worker.hpp"

#include <algorithm>
#include <chrono>

#include "caf/all.hpp"

#include "kvroom/actors/local_messages.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<transfer_worker_state>*;
using poll_atom = caf::atom_constant<caf::atom("poll")>;
/// From the backend's completion thread: something completed.
using wake_atom = caf::atom_constant<caf::atom("wake")>;

/// Completion polling interval while a backend has batches in progress: a
/// delayed self-message instead of a spin, so an idle worker costs nothing.
constexpr auto poll_interval = std::chrono::microseconds(50);

using job = transfer_worker_state::job;

void flush_control(self_ptr self);
void schedule_poll(self_ptr self);

void reply(self_ptr self, const job& j, bool ok, std::string reason, uint64_t bytes,
           failure_cause cause = failure_cause::transport) {
  self->send(j.reply_to, transfer_result{j.room, j.job_id, ok, std::move(reason), bytes, cause});
}

/// A failed post's class: an injected fault says so by its code.
failure_cause cause_of(const caf::error& err) {
  return is(err, errc::injected_fault) ? failure_cause::fault : failure_cause::transport;
}

/// A room's write batch as a job, answered to `reply_to`.
job write_job(const caf::actor& reply_to, transfer_job& work) {
  job j;
  j.reply_to = reply_to;
  j.room = work.room;
  j.job_id = work.job_id;
  j.write = std::move(work.batch);
  return j;
}

/// Acts on what the backend did with job `j`'s post; false when it pushed
/// back and the job must wait.
bool settle(self_ptr self, const job& j, post_result res) {
  auto& st = self->state;
  auto bytes = j.total_bytes();
  switch (res.status) {
    case xfer_status::done:
      reply(self, j, true, {}, bytes);
      return true;
    case xfer_status::failed:
      reply(self, j, false, describe(res.error), 0, cause_of(res.error));
      return true;
    case xfer_status::would_block:
      return false;
    case xfer_status::in_progress:
      st.active.push_back({j.reply_to, j.room, j.job_id, bytes, res.id,
                           monotonic_ms() + st.job_timeout_ms});
      return true;
  }
  return true;
}

/// Posts one job; false when the backend pushed back and it must wait.
bool post(self_ptr self, const job& j) {
  auto& st = self->state;
  return settle(self, j, j.is_read ? st.data_plane->post_read(j.read) : st.data_plane->post(j.write));
}

/// Refuses `j` when the queue is full (with `taken` more jobs about to
/// join it): a job is then answered at once, not held.
bool refuse_if_full(self_ptr self, const job& j, size_t taken = 0) {
  auto& st = self->state;
  if (st.active.size() + st.waiting.size() + taken < st.max_jobs)
    return false;
  reply(self, j, false, "transfer queue full (" + std::to_string(st.max_jobs) + " jobs)", 0);
  return true;
}

/// Takes a job from a room of this process: posted now, queued behind
/// jobs waiting on back-pressure, or refused when the queue is full.
void take(self_ptr self, job j) {
  auto& st = self->state;
  if (!j.reply_to || refuse_if_full(self, j))
    return;
  // Keep order behind jobs already waiting on back-pressure.
  if (!st.waiting.empty() || !post(self, j))
    st.waiting.push_back(std::move(j));
  flush_control(self);
  schedule_poll(self);
}

/// Takes one chunk's jobs for several decode ranks: posted together (the
/// backend may interleave their copies), or queued behind jobs waiting on
/// back-pressure; each is answered as if it had come alone.
void take_group(self_ptr self, const caf::actor& reply_to, transfer_jobs& work) {
  auto& st = self->state;
  if (!reply_to)
    return;
  std::vector<job> jobs;
  jobs.reserve(work.jobs.size());
  for (auto& w : work.jobs) {
    auto j = write_job(reply_to, w);
    if (!refuse_if_full(self, j, jobs.size()))
      jobs.push_back(std::move(j));
  }
  if (st.waiting.empty()) {
    std::vector<const write_batch*> batches;
    batches.reserve(jobs.size());
    for (auto& j : jobs)
      batches.push_back(&j.write);
    auto results = st.data_plane->post_group(batches);
    // From the first that would block on, every one waits (post_group's
    // contract), in order.
    for (size_t i = 0; i < jobs.size(); ++i)
      if (i >= results.size() || !settle(self, jobs[i], std::move(results[i])))
        st.waiting.push_back(std::move(jobs[i]));
  } else {
    for (auto& j : jobs)
      st.waiting.push_back(std::move(j));
  }
  flush_control(self);
  schedule_poll(self);
}

/// Hands the backend's connection messages to the manager for delivery.
void flush_control(self_ptr self) {
  auto& st = self->state;
  if (!st.manager)
    return;
  for (auto& msg : st.data_plane->take_control())
    self->send(st.manager, std::move(msg));
}

void schedule_poll(self_ptr self) {
  auto& st = self->state;
  if (st.poll_scheduled || (st.active.empty() && st.waiting.empty()))
    return;
  st.poll_scheduled = true;
  self->delayed_send(self, poll_interval, poll_atom::value);
}

bool has_active(const transfer_worker_state& st, room_id room) {
  return std::any_of(st.active.begin(), st.active.end(),
                     [&](const auto& x) { return x.room == room; });
}

/// Answers every fence whose room has no batch moving any more.
void settle_fences(self_ptr self) {
  auto& st = self->state;
  auto& xs = st.fences;
  xs.erase(std::remove_if(xs.begin(), xs.end(),
                          [&](room_id room) {
                            if (has_active(st, room))
                              return false;
                            self->send(st.manager, room_fenced{room, -1, -1});
                            return true;
                          }),
           xs.end());
}

void progress(self_ptr self) {
  auto& st = self->state;
  auto now = monotonic_ms();
  for (size_t i = 0; i < st.active.size();) {
    auto& x = st.active[i];
    std::string reason;
    auto status = st.data_plane->poll(x.id, reason);
    if (status == xfer_status::in_progress && now >= x.deadline_ms) {
      status = xfer_status::failed;
      reason = "transfer did not complete within "
               + std::to_string(st.job_timeout_ms) + " ms";
    }
    if (status == xfer_status::in_progress) {
      ++i;
      continue;
    }
    auto cause = status == xfer_status::failed && st.data_plane->injected(x.id)
                   ? failure_cause::fault
                   : failure_cause::transport;
    st.data_plane->release(x.id);
    bool ok = status == xfer_status::done;
    self->send(x.reply_to, transfer_result{x.room, x.job_id, ok,
                                       ok ? std::string{} : reason,
                                       ok ? x.bytes : 0, cause});
    st.active[i] = std::move(st.active.back());
    st.active.pop_back();
  }
  while (!st.waiting.empty() && post(self, st.waiting.front()))
    st.waiting.pop_front();
  settle_fences(self);
  flush_control(self);
}

} // namespace

caf::behavior transfer_worker(counted_actor<transfer_worker_state>* self,
                              std::shared_ptr<backend> data_plane,
                              uint32_t max_jobs, uint32_t job_timeout_ms) {
  self->state.data_plane = std::move(data_plane);
  self->state.max_jobs = max_jobs;
  self->state.job_timeout_ms = job_timeout_ms;
  // Called on the backend's completion thread: only a message crosses over.
  caf::actor_addr me = self->address();
  self->state.data_plane->set_notifier([me] {
    if (auto worker = caf::actor_cast<caf::actor>(me))
      caf::anon_send(worker, wake_atom::value);
  });
  return {
    [=](transfer_job& work) {
      take(self, write_job(caf::actor_cast<caf::actor>(self->current_sender()), work));
    },
    [=](transfer_jobs& work) {
      take_group(self, caf::actor_cast<caf::actor>(self->current_sender()), work);
    },
    [=](read_job& work) {
      job j;
      j.reply_to = caf::actor_cast<caf::actor>(self->current_sender());
      j.room = work.room;
      j.job_id = work.job_id;
      j.is_read = true;
      j.read = std::move(work.batch);
      take(self, std::move(j));
    },
    [=](const fence_room& msg) {
      // The room concluded Failed or died: nothing of it is posted from now
      // on, and the manager hears once nothing of it is moving.
      auto& st = self->state;
      auto& ws = st.waiting;
      ws.erase(std::remove_if(ws.begin(), ws.end(),
                              [&](const auto& j) { return j.room == msg.room; }),
               ws.end());
      if (std::find(st.fences.begin(), st.fences.end(), msg.room) == st.fences.end())
        st.fences.push_back(msg.room);
      settle_fences(self);
    },
    [=](attach_atom, caf::actor& manager) {
      self->state.manager = std::move(manager);
      flush_control(self);
    },
    [=](transport_control& msg) {
      // A peer's connection message: the backend validates it.
      if (auto err = self->state.data_plane->on_control(msg))
        logger()->warn("transport control message from rank {} refused: {}", msg.from,
                          describe(err));
      progress(self);
      schedule_poll(self);
    },
    [=](wake_atom) {
      progress(self);
      schedule_poll(self);
    },
    [=](poll_atom) {
      self->state.poll_scheduled = false;
      progress(self);
      schedule_poll(self);
    },
  };
}

} // namespace kvroom
