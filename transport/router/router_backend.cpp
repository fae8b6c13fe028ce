#include "kvroom/transport/router/router_backend.hpp"

#include "kvroom/api/errors.hpp"

#include <functional>

namespace kvroom::detail {

router_backend::router_backend(std::vector<backend_ptr> parts, std::vector<bool> optional)
  : parts_(std::move(parts)), optional_(std::move(optional)), disabled_(parts_.size(), false) {
  optional_.resize(parts_.size(), false);
}

std::string router_backend::name() const {
  // Parts of one transport (verbs on several ports) are that transport.
  std::string out;
  for (auto& p : parts_)
    if (out != p->name())
      out += (out.empty() ? "" : "+") + p->name();
  return out;
}

backend_caps router_backend::caps() const {
  backend_caps out;
  for (auto& p : parts_) {
    auto c = p->caps();
    out.reads |= c.reads;
    // Any part: the others expand strided writes themselves.
    out.strided_writes |= c.strided_writes;
    out.max_batch_ops = out.max_batch_ops == 0 ? c.max_batch_ops
                                               : std::min(out.max_batch_ops, c.max_batch_ops);
  }
  return out;
}

endpoint_desc router_backend::endpoint() const {
  return parts_.front()->endpoint();
}

std::vector<endpoint_desc> router_backend::endpoints() const {
  std::vector<endpoint_desc> out;
  for (size_t i = 0; i < parts_.size(); ++i)
    if (!disabled_[i])
      for (auto& e : parts_[i]->endpoints())
        out.push_back(e);
  return out;
}

caf::expected<region_id> router_backend::register_memory(const mem_desc& mem) {
  std::vector<region_id> ids;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (disabled_[i]) {
      ids.push_back(0);
      continue;
    }
    auto id = parts_[i]->register_memory(mem);
    if (!id && optional_[i]) {
      // This part cannot serve all of the rank's memory: it stops offering.
      disabled_[i] = true;
      ids.push_back(0);
      continue;
    }
    if (!id) {
      for (size_t j = 0; j < ids.size(); ++j)
        if (ids[j] != 0)
          (void) parts_[j]->deregister_memory(ids[j]);
      return make_error(errc::invalid_argument,
                        parts_[i]->name() + ": " + describe(id.error()));
    }
    ids.push_back(*id);
  }
  regions_.push_back(std::move(ids));
  return regions_.size();
}

caf::error router_backend::deregister_memory(region_id id) {
  if (id == 0 || id > regions_.size() || regions_[id - 1].empty())
    return make_error(errc::not_registered, "no registration " + std::to_string(id));
  for (size_t i = 0; i < parts_.size(); ++i)
    if (regions_[id - 1][i] != 0)
      (void) parts_[i]->deregister_memory(regions_[id - 1][i]);
  regions_[id - 1].clear();
  return caf::none;
}

size_t router_backend::part_index(const endpoint_desc& peer) const {
  // On every post, the inline ones included: no allocation.
  auto serves = [&](size_t i) { return !disabled_[i] && parts_[i]->name() == peer.transport; };
  size_t n = 0, first = parts_.size();
  for (size_t i = 0; i < parts_.size(); ++i)
    if (serves(i)) {
      first = n == 0 ? i : first;
      ++n;
    }
  if (n <= 1)
    return first;
  // Several parts of one transport (one per port): each peer endpoint gets
  // one of them, the same every time, so the peer's ports spread over ours.
  auto k = std::hash<std::string>{}(peer.address) % n;
  for (size_t i = 0; i < parts_.size(); ++i)
    if (serves(i) && k-- == 0)
      return i;
  return first;
}

const backend* router_backend::part_for(const write_batch& batch) const {
  auto i = part_index(batch.peer);
  return i < parts_.size() ? parts_[i].get() : nullptr;
}

namespace {

post_result no_part(const endpoint_desc& peer) {
  return post_result::failed(make_error(errc::unavailable,
                                        "this rank has no '" + peer.transport + "' backend"));
}

} // namespace

post_result router_backend::post(const write_batch& batch) {
  auto i = part_index(batch.peer);
  if (i == parts_.size())
    return no_part(batch.peer);
  return tagged(i, parts_[i]->post(batch));
}

std::vector<post_result> router_backend::post_group(const std::vector<const write_batch*>& batches) {
  // A group for one part goes to it whole (its copies may interleave);
  // one spread over several parts is posted batch by batch.
  auto i = batches.empty() ? parts_.size() : part_index(batches.front()->peer);
  for (auto* b : batches)
    if (i == parts_.size() || part_index(b->peer) != i)
      return backend::post_group(batches);
  auto out = parts_[i]->post_group(batches);
  for (auto& res : out)
    res = tagged(i, std::move(res));
  return out;
}

post_result router_backend::post_read(const read_batch& batch) {
  auto i = part_index(batch.peer);
  if (i == parts_.size())
    return no_part(batch.peer);
  return tagged(i, parts_[i]->post_read(batch));
}

bool router_backend::reads_inline(const read_batch& batch) const {
  auto i = part_index(batch.peer);
  return i < parts_.size() && parts_[i]->reads_inline(batch);
}

post_result router_backend::tagged(size_t part, post_result res) {
  // A batch in progress is polled through this router: its id says which
  // part holds it.
  if (res.status == xfer_status::in_progress)
    res.id = (static_cast<xfer_id>(part) << shift) | res.id;
  return res;
}

xfer_status router_backend::poll(xfer_id id, std::string& reason) {
  auto i = static_cast<size_t>(id >> shift);
  if (i >= parts_.size()) {
    reason = "unknown transfer id";
    return xfer_status::failed;
  }
  return parts_[i]->poll(id & ((xfer_id{1} << shift) - 1), reason);
}

bool router_backend::refused(xfer_id id) const {
  auto i = static_cast<size_t>(id >> shift);
  return i < parts_.size() && parts_[i]->refused(id & ((xfer_id{1} << shift) - 1));
}

bool router_backend::injected(xfer_id id) const {
  auto i = static_cast<size_t>(id >> shift);
  return i < parts_.size() && parts_[i]->injected(id & ((xfer_id{1} << shift) - 1));
}

void router_backend::release(xfer_id id) {
  auto i = static_cast<size_t>(id >> shift);
  if (i < parts_.size())
    parts_[i]->release(id & ((xfer_id{1} << shift) - 1));
}

// Reads only what registration set up before any room runs.
bool router_backend::completes_inline(const write_batch& batch) const {
  auto* part = part_for(batch);
  return part && part->completes_inline(batch);
}

std::vector<transport_control> router_backend::take_control() {
  std::vector<transport_control> out;
  for (size_t i = 0; i < parts_.size(); ++i)
    if (!disabled_[i])
      for (auto& msg : parts_[i]->take_control())
        out.push_back(std::move(msg));
  return out;
}

caf::error router_backend::on_control(const transport_control& msg) {
  // For the part the message names (one of several of its transport), or
  // the transport's first.
  size_t first = parts_.size();
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (disabled_[i] || parts_[i]->name() != msg.transport)
      continue;
    if (first == parts_.size())
      first = i;
    if (!msg.to_address.empty())
      for (auto& e : parts_[i]->endpoints())
        if (e.address == msg.to_address)
          return parts_[i]->on_control(msg);
  }
  if (first < parts_.size())
    return parts_[first]->on_control(msg);
  return make_error(errc::unavailable,
                    "control message for '" + msg.transport + "', which this rank does not run");
}

void router_backend::set_notifier(std::function<void()> notify) {
  for (auto& p : parts_)
    p->set_notifier(notify);
}

} // namespace kvroom::detail
