#include "kvroom/transport/fault/fault_backend.hpp"

#include <chrono>
#include <cstdint>

#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

namespace {

} // namespace

fault_backend::fault_backend(backend_ptr inner, fault_plan plan)
  : forwarding_backend(std::move(inner)),
    plan_(std::move(plan)),
    rng_(plan_.seed) {
  for (auto room : plan_.rooms)
    rooms_.emplace(room, plan_.point);
  for (auto& x : plan_.targeted)
    rooms_[x.room] = x.point;
}

bool fault_backend::on_faulty_path(const endpoint_desc& peer) const {
  for (auto& p : plan_.paths)
    if (peer.transport == p || peer.address.compare(0, p.size(), p) == 0)
      return true;
  return false;
}

std::optional<fault_point> fault_backend::selects(room_id room, const endpoint_desc& peer,
                                                  bool has_aux) {
  if (on_faulty_path(peer)) {
    std::uniform_real_distribution<double> dist{0.0, 1.0};
    if (plan_.path_probability >= 1.0 || dist(rng_) < plan_.path_probability)
      return plan_.path_point;
  }
  auto i = rooms_.find(room);
  auto point = i != rooms_.end() ? i->second : plan_.point;
  if (point == fault_point::on_aux && !has_aux)
    return std::nullopt;
  if (i != rooms_.end())
    return point;
  if (plan_.probability <= 0.0)
    return std::nullopt;
  // One draw per eligible batch keeps a seed's schedule reproducible.
  std::uniform_real_distribution<double> dist{0.0, 1.0};
  if (dist(rng_) < plan_.probability)
    return point;
  return std::nullopt;
}

template <class Batch, class Post>
post_result fault_backend::inject(fault_point point, const Batch& batch, Post post_inner) {
  auto room = std::to_string(batch.room) + (plan_.paths.empty() ? "" : " on " + batch.peer.address);
  switch (point) {
    case fault_point::before_post:
      return post_result::failed(
        make_error(errc::injected_fault, "injected fault before post (room " + room + ")"));
    case fault_point::on_aux:
      return post_result::failed(
        make_error(errc::injected_fault, "injected fault on aux data (room " + room + ")"));
    case fault_point::slow: {
      auto id = next_own_++;
      delayed_.emplace(id, delayed{[post_inner, batch] { return post_inner(batch); },
                                   monotonic_ms() + plan_.slow_ms});
      return post_result::in_progress(id);
    }
    default: {
      // The bytes move (or are refused) as the inner backend says; what
      // completes is turned into a failure or a stall, so the batch stays
      // in progress here even when the inner post finished at once.
      auto res = post_inner(batch);
      if (res.status == xfer_status::failed || res.status == xfer_status::would_block)
        return res;
      auto id = next_own_++;
      doomed d{batch.room, point, {}};
      if (res.status == xfer_status::in_progress)
        d.inner = res.id;
      doomed_.emplace(id, d);
      return post_result::in_progress(id);
    }
  }
}

post_result fault_backend::post(const write_batch& batch) {
  auto point = selects(batch.room, batch.peer, batch.aux_ops > 0);
  if (!point)
    return inner_->post(batch);
  if (*point == fault_point::flip) {
    if (batch.src_device_id >= 0 || (batch.ops.empty() && batch.strided.empty()))
      return post_result::failed(make_error(errc::unsupported,
                                            "a flip fault needs host memory (room "
                                              + std::to_string(batch.room) + ")"));
    // The last byte of the first write changes on its way; its source is
    // itself again once the transport has read it.
    auto last = batch.ops.empty()
                  ? batch.strided.front().src_addr + batch.strided.front().size_bytes - 1
                  : batch.ops.front().src_addr + batch.ops.front().size_bytes - 1;
    auto* byte = reinterpret_cast<uint8_t*>(last);
    auto was = *byte;
    *byte = static_cast<uint8_t>(was ^ 0xA5);
    auto res = inner_->post(batch);
    *byte = was;
    return res;
  }
  auto* inner = inner_.get();
  return inject(*point, batch, [inner](const write_batch& b) { return inner->post(b); });
}

post_result fault_backend::post_read(const read_batch& batch) {
  auto point = selects(batch.room, batch.peer, false);
  if (!point || *point == fault_point::flip || *point == fault_point::on_aux)
    return inner_->post_read(batch);
  auto* inner = inner_.get();
  return inject(*point, batch, [inner](const read_batch& b) { return inner->post_read(b); });
}

xfer_status fault_backend::poll(xfer_id id, std::string& reason) {
  if (auto d = delayed_.find(id); d != delayed_.end()) {
    auto& x = d->second;
    if (!x.posted) {
      if (monotonic_ms() < x.due_ms)
        return xfer_status::in_progress;
      auto res = x.post();
      switch (res.status) {
        case xfer_status::failed:
          reason = describe(res.error);
          return xfer_status::failed;
        case xfer_status::would_block:
          return xfer_status::in_progress; // posted again on the next poll
        case xfer_status::done:
          x.posted = true;
          return xfer_status::done;
        case xfer_status::in_progress:
          x.posted = true;
          x.inner = res.id;
          break;
      }
    }
    return x.inner ? inner_->poll(*x.inner, reason) : xfer_status::done;
  }
  auto i = doomed_.find(id);
  if (i == doomed_.end())
    return inner_->poll(id, reason);
  auto st = i->second.inner ? inner_->poll(*i->second.inner, reason) : xfer_status::done;
  if (st == xfer_status::in_progress || st == xfer_status::failed)
    return st;
  auto room = std::to_string(i->second.room);
  if (i->second.point != fault_point::stall)
    i->second.fired = true;
  switch (i->second.point) {
    case fault_point::stall:
      return xfer_status::in_progress;
    case fault_point::after_post:
      reason = "injected fault after post (room " + room + ")";
      break;
    default:
      reason = "injected bad completion status (room " + room + ")";
      break;
  }
  return xfer_status::failed;
}

bool fault_backend::injected(xfer_id id) const {
  if (auto d = delayed_.find(id); d != delayed_.end())
    return d->second.inner && inner_->injected(*d->second.inner);
  if (auto d = doomed_.find(id); d != doomed_.end())
    return d->second.fired || (d->second.inner && inner_->injected(*d->second.inner));
  return inner_->injected(id);
}

bool fault_backend::refused(xfer_id id) const {
  if (auto d = delayed_.find(id); d != delayed_.end())
    return d->second.inner && inner_->refused(*d->second.inner);
  if (auto d = doomed_.find(id); d != doomed_.end())
    return false; // an injected fault is the path's
  return inner_->refused(id);
}

void fault_backend::release(xfer_id id) {
  if (auto d = delayed_.find(id); d != delayed_.end()) {
    if (d->second.inner)
      inner_->release(*d->second.inner);
    delayed_.erase(d);
    return;
  }
  if (auto d = doomed_.find(id); d != doomed_.end()) {
    if (d->second.inner)
      inner_->release(*d->second.inner);
    doomed_.erase(d);
    return;
  }
  inner_->release(id);
}

} // namespace kvroom::detail
