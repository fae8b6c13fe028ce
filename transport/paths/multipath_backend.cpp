#include "kvroom/transport/paths/multipath_backend.hpp"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

namespace {

std::string path_key(const endpoint_desc& ep) {
  return ep.transport + "/" + ep.address;
}

/// The counter of transport `name` (an unknown name counts in the last).
size_t counter_of(const std::string& name) {
  auto i = transport_position(name);
  return i < 0 || static_cast<size_t>(i) >= max_path_transports ? max_path_transports - 1
                                                                : static_cast<size_t>(i);
}

std::string describe_path(const endpoint_desc& ep) {
  return ep.transport + " " + (ep.address.empty() ? "(no address)" : ep.address);
}

} // namespace

std::vector<write_batch> slice_batch(const write_batch& batch, size_t k, uint64_t first_key) {
  auto total = batch.total_bytes();
  k = std::max<size_t>(1, std::min<uint64_t>(k, total));
  std::vector<write_batch> out;
  out.reserve(k);
  auto aux_from = batch.ops.size() - std::min<size_t>(batch.aux_ops, batch.ops.size());
  auto fresh = [&] {
    write_batch b;
    b.room = batch.room;
    b.peer = batch.peer;
    b.src_device_id = batch.src_device_id;
    b.dst_device_id = batch.dst_device_id;
    b.key = first_key + out.size();
    out.push_back(std::move(b));
  };
  fresh();
  uint64_t placed = 0;  // bytes placed in slices before the current one
  for (size_t i = 0; i < batch.ops.size(); ++i) {
    auto op = batch.ops[i];
    bool aux = i >= aux_from;
    while (op.size_bytes > 0) {
      // The current slice ends at its share of the total.
      auto end = total * out.size() / k;
      auto room = end > placed ? end - placed : 0;
      if (room == 0 && out.size() < k) {
        fresh();
        continue;
      }
      auto take = out.size() == k ? op.size_bytes : std::min(op.size_bytes, room);
      auto& cur = out.back();
      cur.ops.push_back(write_op{op.src_addr, op.dst_addr, take});
      cur.aux_ops += aux ? 1 : 0;
      placed += take;
      op.src_addr += take;
      op.dst_addr += take;
      op.size_bytes -= take;
    }
  }
  return out;
}

multipath_backend::multipath_backend(backend_ptr inner, path_options opts)
  : forwarding_backend(std::move(inner)), opts_(opts) {
  // nop
}

bool multipath_backend::completes_inline(const write_batch& batch) const {
  return batch.alternates.empty() && inner_->completes_inline(batch);
}

// -- health table --------------------------------------------------------------

multipath_backend::path_entry& multipath_backend::entry_locked(const endpoint_desc& ep,
                                                               uint64_t now) {
  auto key = path_key(ep);
  auto i = health_.find(key);
  if (i == health_.end()) {
    if (health_.size() >= opts_.max_paths) {
      // Forget the healthy path unused the longest: it holds no history
      // worth keeping.
      auto oldest = health_.end();
      for (auto j = health_.begin(); j != health_.end(); ++j)
        if (j->second.health.state(now) == path_state::healthy
            && (oldest == health_.end() || j->second.used_ms < oldest->second.used_ms))
          oldest = j;
      if (oldest != health_.end())
        health_.erase(oldest);
    }
    i = health_.emplace(key, path_entry{path_health{}, ep.transport, ep.address, ep.owner, now})
          .first;
  }
  i->second.used_ms = now;
  return i->second;
}

bool multipath_backend::available(const endpoint_desc& ep, uint64_t now) {
  std::lock_guard<std::mutex> guard{health_mtx_};
  return entry_locked(ep, now).health.available(now);
}

uint64_t multipath_backend::rest_until(const endpoint_desc& ep) {
  std::lock_guard<std::mutex> guard{health_mtx_};
  auto i = health_.find(path_key(ep));
  return i == health_.end() ? 0 : i->second.health.rest_until();
}

void multipath_backend::took(const endpoint_desc& ep, uint64_t now) {
  std::lock_guard<std::mutex> guard{health_mtx_};
  entry_locked(ep, now).health.take(now);
}

void multipath_backend::succeeded(const endpoint_desc& ep, uint64_t now) {
  std::lock_guard<std::mutex> guard{health_mtx_};
  entry_locked(ep, now).health.succeeded(now);
}

void multipath_backend::path_failed(const endpoint_desc& ep, uint64_t now,
                                    const std::string& why) {
  std::lock_guard<std::mutex> guard{health_mtx_};
  if (entry_locked(ep, now).health.failed(now, opts_.rules, why))
    rests_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<path_report> multipath_backend::paths() const {
  auto now = monotonic_ms();
  std::lock_guard<std::mutex> guard{health_mtx_};
  std::vector<path_report> out;
  out.reserve(health_.size());
  for (auto& kvp : health_) {
    auto& e = kvp.second;
    out.push_back(path_report{e.transport, e.address, e.peer, e.health.state(now),
                              e.health.errors(), e.health.rest_until(), e.health.last_error()});
  }
  std::sort(out.begin(), out.end(), [](const path_report& a, const path_report& b) {
    return std::tie(a.peer, a.transport, a.address) < std::tie(b.peer, b.transport, b.address);
  });
  return out;
}

path_counters multipath_backend::counters() const {
  auto get = [](const std::atomic<uint64_t>& x) { return x.load(std::memory_order_relaxed); };
  path_counters out;
  for (size_t i = 0; i < max_path_transports; ++i) {
    out.retries[i] = get(retries_[i]);
    out.fallbacks[i] = get(fallbacks_[i]);
  }
  out.rests = get(rests_);
  out.sliced = get(sliced_);
  out.exhausted = get(exhausted_);
  auto now = monotonic_ms();
  std::lock_guard<std::mutex> guard{health_mtx_};
  for (auto& kvp : health_)
    ++out.paths[static_cast<size_t>(kvp.second.health.state(now))];
  return out;
}

// -- moving batches --------------------------------------------------------------

bool multipath_backend::pick(transfer& t, const slice& s, uint64_t now,
                             const std::vector<bool>& full, size_t& p) {
  auto n = t.paths.size();
  // The nearest tier with a path available now, untried by this slice and
  // not pushing back, round robin inside it.
  for (size_t tier = 0; tier <= t.tier.back(); ++tier) {
    for (size_t k = 0; k < n; ++k) {
      auto i = (t.cursor + k) % n;
      if (t.tier[i] != tier || s.tried[i] || full[i] || !available(t.paths[i], now))
        continue;
      t.cursor = i + 1;
      p = i;
      return true;
    }
  }
  // Every untried path rests: the last resort is the one back soonest.
  bool found = false;
  uint64_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s.tried[i] || full[i])
      continue;
    auto until = rest_until(t.paths[i]);
    if (!found || until < best) {
      found = true;
      best = until;
      p = i;
    }
  }
  return found;
}

void multipath_backend::give_up(transfer& t, std::string reason, bool refused, bool injected) {
  if (t.failed)
    return;
  t.failed = true;
  t.refused = refused;
  t.injected = t.injected || injected;
  t.reason = std::move(reason);
}

void multipath_backend::slice_failed(transfer& t, slice& s, const std::string& why,
                                     uint64_t now, bool injected) {
  // A path an injected fault failed is as failed as any; the transfer's
  // failure, if it comes to that, is then the injector's.
  t.injected = t.injected || injected;
  s.moving = false;
  s.tried[s.path] = true;
  t.why[s.path] = why;
  path_failed(t.paths[s.path], now, why);
}

multipath_backend::launched multipath_backend::launch(transfer& t, slice& s, uint64_t now) {
  auto retry = std::find(s.tried.begin(), s.tried.end(), true) != s.tried.end();
  size_t failed_on = s.path;
  // Paths that pushed back on this slice just now: another may take it.
  std::vector<bool> full(t.paths.size(), false);
  for (;;) {
    size_t p = 0;
    if (!pick(t, s, now, full, p)) {
      if (std::find(full.begin(), full.end(), true) != full.end())
        return launched::waiting;
      exhausted_.fetch_add(1, std::memory_order_relaxed);
      std::string reason = "no path left to rank " + std::to_string(t.paths.front().owner)
                           + " (tried";
      for (size_t i = 0; i < t.paths.size(); ++i)
        if (s.tried[i])
          reason += (i == 0 ? " " : "; ") + describe_path(t.paths[i]) + ": " + t.why[i];
      give_up(t, reason + ")", false, false);
      return launched::exhausted;
    }
    s.batch.peer = t.paths[p];
    auto res = inner_->post(s.batch);
    s.path = p;
    if (res.status != xfer_status::would_block) {
      took(t.paths[p], now);
      if (retry)
        retries_[counter_of(t.paths[failed_on].transport)].fetch_add(1,
                                                                     std::memory_order_relaxed);
      if (t.tier[p] > 0)
        fallbacks_[counter_of(t.paths[p].transport)].fetch_add(1, std::memory_order_relaxed);
    }
    switch (res.status) {
      case xfer_status::done:
        s.done = true;
        succeeded(t.paths[p], now);
        return launched::done;
      case xfer_status::in_progress:
        s.moving = true;
        s.inner = res.id;
        return launched::moving;
      case xfer_status::would_block:
        full[p] = true;
        break;
      case xfer_status::failed:
        if (!is_path_fault(res.error)) {
          give_up(t, describe(res.error), true, false);
          return launched::exhausted;
        }
        slice_failed(t, s, describe(res.error), now, is(res.error, errc::injected_fault));
        retry = true;
        failed_on = p;
        break;
    }
  }
}

xfer_status multipath_backend::advance(transfer& t, uint64_t now) {
  for (auto& s : t.slices) {
    if (!s.moving)
      continue;
    std::string why;
    auto st = inner_->poll(s.inner, why);
    if (st == xfer_status::in_progress)
      continue;
    bool refused = st == xfer_status::failed && inner_->refused(s.inner);
    bool injected = st == xfer_status::failed && inner_->injected(s.inner);
    inner_->release(s.inner);
    s.moving = false;
    if (st == xfer_status::done) {
      s.done = true;
      succeeded(t.paths[s.path], now);
    } else if (refused || t.paths.size() == 1) {
      // One path: nothing to retry on; the failure still counts against it.
      if (!refused)
        path_failed(t.paths[s.path], now, why);
      give_up(t, why, refused, injected);
    } else {
      slice_failed(t, s, why, now, injected);
    }
  }
  // Slices waiting for a path (their last failed, or the backend pushed
  // back): relaunched unless the transfer has failed already.
  for (auto& s : t.slices)
    if (!t.failed && !s.moving && !s.done)
      launch(t, s, now);
  std::string ignored;
  return outcome(t, ignored);
}

xfer_status multipath_backend::outcome(const transfer& t, std::string& reason) const {
  bool moving = false;
  bool done = true;
  for (auto& s : t.slices) {
    moving = moving || s.moving;
    done = done && s.done;
  }
  // A failed transfer reports only once none of its slices moves: the
  // worker's fence then still means nothing of the room is in flight.
  if (moving)
    return xfer_status::in_progress;
  if (t.failed) {
    reason = t.reason;
    return xfer_status::failed;
  }
  return done ? xfer_status::done : xfer_status::in_progress;
}

post_result multipath_backend::post(const write_batch& batch) {
  auto now = monotonic_ms();
  if (batch.alternates.empty()) {
    // One path: straight through, its outcome noted against the path.
    auto res = inner_->post(batch);
    switch (res.status) {
      case xfer_status::done:
        return res;
      case xfer_status::would_block:
        return res;
      case xfer_status::failed:
        if (is_path_fault(res.error))
          path_failed(batch.peer, now, describe(res.error));
        return res;
      case xfer_status::in_progress:
        break;
    }
    transfer t;
    t.paths.push_back(batch.peer);
    t.tier.push_back(0);
    t.why.resize(1);
    slice s;
    s.moving = true;
    s.inner = res.id;
    s.tried.resize(1, false);
    t.slices.push_back(std::move(s));
    auto id = next_id_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> guard{table_mtx_};
    transfers_.emplace(id, std::move(t));
    return post_result::in_progress(id);
  }
  transfer t;
  t.paths.reserve(batch.alternates.size() + 1);
  t.paths.push_back(batch.peer);
  t.paths.insert(t.paths.end(), batch.alternates.begin(), batch.alternates.end());
  // Tiers follow the transport: the sender listed the nearest first.
  for (size_t i = 0; i < t.paths.size(); ++i)
    t.tier.push_back(i == 0 ? 0
                            : t.tier.back()
                                + (t.paths[i].transport != t.paths[i - 1].transport ? 1 : 0));
  t.why.resize(t.paths.size());
  // Batches take turns: each starts its round robin one path further.
  t.cursor = static_cast<size_t>(turn_.fetch_add(1, std::memory_order_relaxed) % t.paths.size());
  size_t ready = 0;
  for (size_t i = 0; i < t.paths.size(); ++i)
    ready += t.tier[i] == 0 && available(t.paths[i], now) ? 1 : 0;
  auto bytes = batch.total_bytes();
  size_t k = 1;
  if (ready > 1 && opts_.slice_bytes > 0 && bytes >= 2 * opts_.slice_bytes)
    k = std::min<uint64_t>(ready, bytes / opts_.slice_bytes);
  auto key = next_key_.fetch_add(k, std::memory_order_relaxed);
  std::vector<write_batch> parts;
  if (k > 1) {
    // Slices split writes: strided ones first become the writes they are.
    parts = slice_batch(batch.strided.empty() ? batch : expand_strided(batch), k, key);
    sliced_.fetch_add(1, std::memory_order_relaxed);
  } else {
    parts.push_back(batch);
    parts.back().alternates.clear();
    parts.back().key = key;
  }
  for (auto& b : parts) {
    slice s;
    s.batch = std::move(b);
    s.tried.resize(t.paths.size(), false);
    t.slices.push_back(std::move(s));
  }
  bool any_posted = false;
  for (auto& s : t.slices) {
    if (t.failed)
      break;
    auto r = launch(t, s, now);
    any_posted = any_posted || r == launched::moving || r == launched::done;
    if (r == launched::waiting && !any_posted)
      return post_result::would_block(); // nothing moved: post it again later
    if (r == launched::waiting)
      break; // the rest go out as the backend takes them (poll)
  }
  std::string reason;
  auto st = outcome(t, reason);
  if (st == xfer_status::done)
    return post_result::done();
  if (st == xfer_status::failed)
    return post_result::failed(make_error(t.refused    ? errc::out_of_range
                                          : t.injected ? errc::injected_fault
                                                       : errc::transport_error,
                                          reason));
  auto id = next_id_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> guard{table_mtx_};
  transfers_.emplace(id, std::move(t));
  return post_result::in_progress(id);
}

std::vector<post_result> multipath_backend::post_group(
  const std::vector<const write_batch*>& batches) {
  // Batches of one path that complete inside the call pass straight
  // through, as `post` passes them, and their outcomes are noted the same
  // way; any other group is posted batch by batch.
  for (auto* b : batches)
    if (!b->alternates.empty() || !inner_->completes_inline(*b))
      return backend::post_group(batches);
  auto out = inner_->post_group(batches);
  auto now = monotonic_ms();
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].status == xfer_status::failed && is_path_fault(out[i].error))
      path_failed(batches[i]->peer, now, describe(out[i].error));
  return out;
}

post_result multipath_backend::post_read(const read_batch& batch) {
  // A pull names one path (its peer): the inner backend reads it; a read
  // in progress is polled through it, its id marked as a read's.
  auto res = inner_->post_read(batch);
  if (res.status == xfer_status::in_progress)
    res.id |= read_id_bit;
  return res;
}

xfer_status multipath_backend::poll(xfer_id id, std::string& reason) {
  if (id & read_id_bit)
    return inner_->poll(id & ~read_id_bit, reason);
  transfer* t = nullptr;
  {
    std::lock_guard<std::mutex> guard{table_mtx_};
    auto i = transfers_.find(id);
    if (i != transfers_.end())
      t = &i->second;
  }
  if (t == nullptr) {
    reason = "no transfer " + std::to_string(id) + " in progress";
    return xfer_status::failed;
  }
  advance(*t, monotonic_ms());
  return outcome(*t, reason);
}

bool multipath_backend::refused(xfer_id id) const {
  if (id & read_id_bit)
    return inner_->refused(id & ~read_id_bit);
  std::lock_guard<std::mutex> guard{table_mtx_};
  auto i = transfers_.find(id);
  return i != transfers_.end() && i->second.refused;
}

bool multipath_backend::injected(xfer_id id) const {
  if (id & read_id_bit)
    return inner_->injected(id & ~read_id_bit);
  std::lock_guard<std::mutex> guard{table_mtx_};
  auto i = transfers_.find(id);
  return i != transfers_.end() && i->second.injected;
}

void multipath_backend::release(xfer_id id) {
  if (id & read_id_bit) {
    inner_->release(id & ~read_id_bit);
    return;
  }
  transfer t;
  {
    std::lock_guard<std::mutex> guard{table_mtx_};
    auto i = transfers_.find(id);
    if (i == transfers_.end())
      return;
    t = std::move(i->second);
    transfers_.erase(i);
  }
  // Released early (the worker's deadline passed): what still moves is
  // given up on.
  for (auto& s : t.slices)
    if (s.moving)
      inner_->release(s.inner);
}

} // namespace kvroom
