#include "metrics_http.hpp"

#include <httplib.h>

#include "kvroom/messages/error.hpp"

namespace kvroom::cli {

caf::expected<std::unique_ptr<metrics_http>>
metrics_http::start(const std::string& host, uint16_t port, source ranks) {
  std::unique_ptr<metrics_http> out{new metrics_http};
  out->server_ = std::make_unique<httplib::Server>();
  auto& srv = *out->server_;
  // A scrape is small and quick; a slow client gets little of our time.
  srv.set_read_timeout(2, 0);
  srv.set_write_timeout(2, 0);
  srv.set_keep_alive_max_count(16);
  srv.Get("/metrics", [ranks](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(ranks(), process_refusals()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  srv.Get("/health", [ranks](const httplib::Request&, httplib::Response& res) {
    auto h = health_of(ranks());
    res.status = h.ready ? 200 : 503;
    res.set_content(h.body, "application/json");
  });
  int bound = port == 0 ? srv.bind_to_any_port(host) : (srv.bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    return make_error(errc::unavailable, "cannot listen for metrics on " + host + ":"
                                           + std::to_string(port));
  out->port_ = static_cast<uint16_t>(bound);
  out->thread_ = std::thread{[&srv] { srv.listen_after_bind(); }};
  return out;
}

metrics_http::~metrics_http() {
  if (server_)
    server_->stop();
  if (thread_.joinable())
    thread_.join();
}

} // namespace kvroom::cli
