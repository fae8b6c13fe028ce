#include "kvroom/api/config.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/tcp/tcp_backend.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

const transport_row& tcp_transport() {
  static const transport_row row = [] {
    transport_row r;
    r.name = "tcp";
    r.host_nearness = 3; // reaches anyone, slowest
    r.needs_network = true;
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      auto tcp = std::make_unique<detail::tcp_backend>(cfg.owner, split_hosts(cfg.tcp_host),
                                                       cfg.io_timeout_ms, cfg.secret);
      if (auto err = tcp->start())
        return err;
      return backend_ptr{std::move(tcp)};
    };
    r.probe = [] {
      return backend_availability{"tcp", true, true, "sockets, receiver-side range validation"};
    };
    return r;
  }();
  return row;
}

} // namespace kvroom
