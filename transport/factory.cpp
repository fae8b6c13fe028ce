#include "kvroom/api/config.hpp"
#include "kvroom/api/backend.hpp"

#include <algorithm>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/fault/fault_backend.hpp"
#include "kvroom/transport/router/router_backend.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

backend::~backend() {
  // nop
}

post_result backend::post_read(const read_batch& batch) {
  return post_result::failed(make_error(errc::unsupported,
                                        name() + " backend does not read from peers (room "
                                          + std::to_string(batch.room) + ")"));
}

std::vector<post_result> backend::post_group(const std::vector<const write_batch*>& batches) {
  std::vector<post_result> out;
  out.reserve(batches.size());
  for (auto* batch : batches)
    out.push_back(!out.empty() && out.back().status == xfer_status::would_block
                    ? post_result::would_block()
                    : post(*batch));
  return out;
}

caf::error backend::on_control(const transport_control& msg) {
  return make_error(errc::unsupported, name() + " backend takes no control messages (got one for "
                                         + msg.transport + " from rank "
                                         + std::to_string(msg.from) + ")");
}

bool is_path_fault(const caf::error& err) {
  if (err.category() != kvroom_error_atom::value)
    return true;
  switch (static_cast<errc>(err.code())) {
    case errc::invalid_argument:
    case errc::invalid_config:
    case errc::out_of_range:
    case errc::not_registered:
    case errc::unsupported:
    case errc::limit_reached:
      return false;
    default:
      return true;
  }
}

std::string to_string(xfer_status x) {
  switch (x) {
    case xfer_status::done: return "done";
    case xfer_status::in_progress: return "in_progress";
    case xfer_status::would_block: return "would_block";
    case xfer_status::failed: return "failed";
  }
  return "xfer_status(?)";
}

namespace {

constexpr const char* fault_point_names[] = {"before_post", "after_post",
                                             "on_aux", "bad_completion",
                                             "stall", "slow", "flip"};
constexpr size_t num_fault_points = 7;

} // namespace

std::string to_string(fault_point x) {
  auto i = static_cast<size_t>(x);
  return i < num_fault_points ? fault_point_names[i] : "fault_point(?)";
}

bool from_string(const std::string& str, fault_point& x) {
  for (size_t i = 0; i < num_fault_points; ++i) {
    if (str == fault_point_names[i]) {
      x = static_cast<fault_point>(i);
      return true;
    }
  }
  return false;
}

namespace {

/// "auto": every transport this rank can offer behind one router, in the
/// table's order (see backend_config::name).
caf::expected<backend_ptr> make_auto(const backend_config& cfg) {
  std::vector<backend_ptr> parts;
  std::vector<const transport_row*> rows;
  for (auto* row : transport_table()) {
    if (row->needs_network && !cfg.network)
      continue;
    auto be = row->make(cfg);
    if (!be) {
      if (row->may_be_absent)
        continue;
      return be.error();
    }
    parts.push_back(std::move(*be));
    rows.push_back(row);
  }
  // A part marked optional drops out when it cannot register some of the
  // rank's memory: a part that takes only some host memory (shm: shared
  // segments), one that may lack its hardware's memory, and, once a
  // same-host GPU transport is present, the host-only ones (GPU memory).
  bool local_gpu = std::any_of(rows.begin(), rows.end(), [](const transport_row* r) {
    return r->moves_device() && r->domain_bound;
  });
  std::vector<bool> optional;
  for (auto* row : rows)
    optional.push_back(row->moves_device() || !row->registers_any_host || local_gpu);
  return backend_ptr{std::make_unique<detail::router_backend>(std::move(parts),
                                                              std::move(optional))};
}

} // namespace

std::vector<std::string> split_hosts(const std::string& list) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= list.size()) {
    auto to = list.find(',', from);
    if (to == std::string::npos)
      to = list.size();
    auto item = list.substr(from, to - from);
    auto first = item.find_first_not_of(" \t");
    auto last = item.find_last_not_of(" \t");
    if (first != std::string::npos)
      out.push_back(item.substr(first, last - first + 1));
    from = to + 1;
  }
  return out;
}

caf::expected<backend_ptr> make_backend(const backend_config& cfg) {
  backend_ptr result;
  if (cfg.name == "auto") {
    auto be = make_auto(cfg);
    if (!be)
      return be.error();
    result = std::move(*be);
  } else if (auto* row = find_transport(cfg.name)) {
    auto be = row->make(cfg);
    if (!be)
      return be.error();
    result = std::move(*be);
  } else {
    return make_error(errc::unavailable, "unknown transport '" + cfg.name + "' (kvroom knows "
                                           + transport_names_text() + " and auto)");
  }
  if (cfg.faults.path_probability < 0.0 || cfg.faults.path_probability > 1.0)
    return make_error(errc::invalid_argument, "path fault probability must lie in [0, 1]");
  if (cfg.faults.probability < 0.0 || cfg.faults.probability > 1.0)
    return make_error(errc::invalid_argument,
                      "fault probability must lie in [0, 1]");
  if (!cfg.faults.empty())
    result = std::make_unique<detail::fault_backend>(std::move(result),
                                                     cfg.faults);
  return result;
}

std::vector<backend_availability> probe_backends() {
  std::vector<backend_availability> out;
  for (auto* row : transport_table())
    out.push_back(row->probe());
  return out;
}

} // namespace kvroom
