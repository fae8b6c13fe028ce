#include "transport/fault/fault_backend.hpp"

#include "messages/error.hpp"

namespace kvroom::detail {

fault_backend::fault_backend(backend_ptr inner, fault_plan plan)
  : inner_(std::move(inner)),
    plan_(std::move(plan)),
    rooms_(plan_.rooms.begin(), plan_.rooms.end()),
    rng_(plan_.seed) {
  // nop
}

std::string fault_backend::name() const {
  return inner_->name();
}

backend_caps fault_backend::caps() const {
  return inner_->caps();
}

endpoint_desc fault_backend::endpoint() const {
  return inner_->endpoint();
}

caf::expected<region_id>
fault_backend::register_memory(const mem_desc& mem) {
  return inner_->register_memory(mem);
}

caf::error fault_backend::deregister_memory(region_id id) {
  return inner_->deregister_memory(id);
}

bool fault_backend::selects(const write_batch& batch) {
  if (plan_.point == fault_point::on_aux && batch.aux_ops == 0)
    return false;
  if (rooms_.count(batch.tag) > 0)
    return true;
  if (plan_.probability <= 0.0)
    return false;
  // One draw per eligible batch keeps a seed's schedule reproducible.
  std::uniform_real_distribution<double> dist{0.0, 1.0};
  return dist(rng_) < plan_.probability;
}

caf::expected<xfer_id> fault_backend::post(const write_batch& batch) {
  if (!selects(batch))
    return inner_->post(batch);
  auto room = std::to_string(batch.tag);
  switch (plan_.point) {
    case fault_point::before_post:
      return make_error(errc::transport_error,
                        "injected fault before post (room " + room + ")");
    case fault_point::on_aux:
      return make_error(errc::transport_error,
                        "injected fault on aux data (room " + room + ")");
    case fault_point::after_post:
    case fault_point::bad_completion:
    case fault_point::stall: {
      auto id = inner_->post(batch);
      if (id)
        doomed_.emplace(*id, batch.tag);
      return id;
    }
  }
  return inner_->post(batch);
}

xfer_status fault_backend::poll(xfer_id id, std::string& reason) {
  auto st = inner_->poll(id, reason);
  auto i = doomed_.find(id);
  if (i == doomed_.end() || st == xfer_status::in_progress
      || st == xfer_status::failed)
    return st;
  if (plan_.point == fault_point::stall)
    return xfer_status::in_progress;
  reason = plan_.point == fault_point::after_post
             ? "injected fault after post (room " + std::to_string(i->second)
                 + ")"
             : "injected bad completion status (room "
                 + std::to_string(i->second) + ")";
  return xfer_status::failed;
}

void fault_backend::release(xfer_id id) {
  doomed_.erase(id);
  inner_->release(id);
}

} // namespace kvroom::detail
