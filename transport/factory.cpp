#include "transport/factory.hpp"

#include "messages/error.hpp"
#include "transport/fault/fault_backend.hpp"
#include "transport/local/local_backend.hpp"
#include "transport/router/router_backend.hpp"
#include "transport/shm/shm_backend.hpp"
#include "transport/tcp/tcp_backend.hpp"

namespace kvroom {

backend::~backend() {
  // nop
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
                                             "stall"};
constexpr size_t num_fault_points = 5;

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

caf::expected<backend_ptr> make_tcp(const backend_config& cfg) {
  auto tcp = std::make_unique<detail::tcp_backend>(cfg.owner, cfg.tcp_host,
                                                   cfg.io_timeout_ms);
  if (auto err = tcp->start())
    return err;
  return backend_ptr{std::move(tcp)};
}

} // namespace

caf::expected<backend_ptr> make_backend(const backend_config& cfg) {
  backend_ptr result;
  if (cfg.name == "local") {
    result = std::make_unique<detail::local_backend>(cfg.owner);
  } else if (cfg.name == "tcp") {
    auto tcp = make_tcp(cfg);
    if (!tcp)
      return tcp.error();
    result = std::move(*tcp);
  } else if (cfg.name == "shm") {
    result = std::make_unique<detail::shm_backend>(cfg.owner);
  } else if (cfg.name == "auto") {
    std::vector<backend_ptr> parts;
    std::vector<bool> optional;
    parts.push_back(std::make_unique<detail::local_backend>(cfg.owner));
    optional.push_back(false);
    if (cfg.network) {
      // shm only where the rank's memory is in shared segments.
      parts.push_back(std::make_unique<detail::shm_backend>(cfg.owner));
      optional.push_back(true);
      auto tcp = make_tcp(cfg);
      if (!tcp)
        return tcp.error();
      parts.push_back(std::move(*tcp));
      optional.push_back(false);
    }
    result = std::make_unique<detail::router_backend>(std::move(parts), std::move(optional));
  } else {
    return make_error(errc::unavailable,
                      "unknown or not compiled transport '" + cfg.name
                        + "' (compiled: local, shm, tcp, auto)");
  }
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
  out.push_back({"local", true, true, "same-process memcpy"});
  out.push_back({"shm", true, true, "same host, POSIX shared memory (/dev/shm), one copy"});
  out.push_back({"tcp", true, true, "sockets, receiver-side range validation"});
  return out;
}

} // namespace kvroom
