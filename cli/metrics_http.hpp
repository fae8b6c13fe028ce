#pragma once

// `serve --metrics-port`: the rank's metrics in Prometheus' text format on
// GET /metrics and its readiness on GET /health (200 when ready, 503 when
// not; a small JSON body either way), served by cpp-httplib (Debian's
// libcpp-httplib-dev) on a thread of its own and two workers, with at most
// 8 connections queued (a client cannot make the rank hold more). Each
// request takes a fresh snapshot: no lock, no message to the rank's actors.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/metrics.hpp"

namespace httplib {
class Server;
} // namespace httplib

namespace kvroom::cli {

class metrics_http {
public:
  using source = std::function<std::vector<metrics_snapshot>()>;

  /// Binds `host`:`port` (0: any port) and serves until destroyed.
  static caf::expected<std::unique_ptr<metrics_http>> start(const std::string& host,
                                                            uint16_t port, source ranks);

  ~metrics_http();

  uint16_t port() const noexcept {
    return port_;
  }

private:
  metrics_http() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

} // namespace kvroom::cli
