#include "kvroom/transport/factory.hpp"

#include "kvroom/messages/error.hpp"
#include "kvroom/transport/fault/fault_backend.hpp"
#include "kvroom/transport/local/local_backend.hpp"
#include "kvroom/transport/router/router_backend.hpp"
#include "kvroom/transport/shm/shm_backend.hpp"
#include "kvroom/transport/tcp/tcp_backend.hpp"
#ifdef KVROOM_HAVE_VERBS
#include "kvroom/transport/verbs/verbs_backend.hpp"
#endif
#ifdef KVROOM_HAVE_CUDA
#include "kvroom/transport/cuda/cuda_backend.hpp"
#endif

namespace kvroom {

backend::~backend() {
  // nop
}

caf::error backend::on_control(const transport_control& msg) {
  return make_error(errc::unsupported, name() + " backend takes no control messages (got one for "
                                         + msg.transport + " from rank "
                                         + std::to_string(msg.from) + ")");
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
                                             "stall", "slow"};
constexpr size_t num_fault_points = 6;

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
                                                   cfg.io_timeout_ms, cfg.secret);
  if (auto err = tcp->start())
    return err;
  return backend_ptr{std::move(tcp)};
}

// The hardware backends: built only when their libraries were found, and
// started only when their device answers; otherwise the reason says why.
caf::expected<backend_ptr> make_verbs(const backend_config& cfg) {
#ifdef KVROOM_HAVE_VERBS
  detail::verbs_options opts;
  opts.device = cfg.verbs_device;
  auto be = std::make_unique<detail::verbs_backend>(cfg.owner, opts);
  if (auto err = be->start())
    return err;
  return backend_ptr{std::move(be)};
#else
  static_cast<void>(cfg);
  return make_error(errc::unavailable, "verbs: not compiled in (" KVROOM_VERBS_REASON ")");
#endif
}

caf::expected<backend_ptr> make_cuda(const backend_config& cfg) {
#ifdef KVROOM_HAVE_CUDA
  auto be = std::make_unique<detail::cuda_backend>(cfg.owner);
  if (auto err = be->start())
    return err;
  return backend_ptr{std::move(be)};
#else
  static_cast<void>(cfg);
  return make_error(errc::unavailable, "cuda: not compiled in (" KVROOM_CUDA_REASON ")");
#endif
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
  } else if (cfg.name == "verbs" || cfg.name == "cuda") {
    auto be = cfg.name == "verbs" ? make_verbs(cfg) : make_cuda(cfg);
    if (!be)
      return be.error();
    result = std::move(*be);
  } else if (cfg.name == "auto") {
    std::vector<backend_ptr> parts;
    std::vector<bool> optional;
    // A part marked optional drops out when it cannot register some of the
    // rank's memory (shm: not in a shared segment; local: GPU memory).
    auto cuda = make_cuda(cfg);
    bool have_cuda = static_cast<bool>(cuda);
    parts.push_back(std::make_unique<detail::local_backend>(cfg.owner));
    optional.push_back(have_cuda);
    if (cuda) {
      parts.push_back(std::move(*cuda));
      optional.push_back(true);
    }
    if (cfg.network) {
      parts.push_back(std::make_unique<detail::shm_backend>(cfg.owner));
      optional.push_back(true);
      if (auto verbs = make_verbs(cfg)) {
        parts.push_back(std::move(*verbs));
        optional.push_back(true);
      }
      auto tcp = make_tcp(cfg);
      if (!tcp)
        return tcp.error();
      parts.push_back(std::move(*tcp));
      optional.push_back(have_cuda);
    }
    result = std::make_unique<detail::router_backend>(std::move(parts), std::move(optional));
  } else {
    return make_error(errc::unavailable,
                      "unknown transport '" + cfg.name
                        + "' (kvroom knows local, shm, tcp, verbs, cuda and auto)");
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
#ifdef KVROOM_HAVE_VERBS
  out.push_back(detail::verbs_backend::probe());
#else
  out.push_back({"verbs", false, false, "not compiled in (" KVROOM_VERBS_REASON ")"});
#endif
#ifdef KVROOM_HAVE_CUDA
  out.push_back(detail::cuda_backend::probe());
#else
  out.push_back({"cuda", false, false, "not compiled in (" KVROOM_CUDA_REASON ")"});
#endif
  return out;
}

} // namespace kvroom
