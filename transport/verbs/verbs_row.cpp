#include "kvroom/api/errors.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/transport_table.hpp"
#ifdef KVROOM_HAVE_VERBS
#include "kvroom/transport/router/router_backend.hpp"
#include "kvroom/transport/verbs/verbs_backend.hpp"
#endif

namespace kvroom {

// Built only when libibverbs was found, and started only when a device has
// an active port; otherwise the reason says why.
const transport_row& verbs_transport() {
  static const transport_row row = [] {
    transport_row r;
    r.name = "verbs";
    r.host_nearness = 2;   // the NIC beats a socket
    r.device_nearness = 1; // GPUDirect: GPU memory across hosts
    r.needs_network = true;
    r.may_be_absent = true;
#ifdef KVROOM_HAVE_VERBS
    // One backend per active port: each is an endpoint, so a data path
    // (the path layer spreads rooms over them and moves them off a port
    // whose link failed); several sit behind one router as one transport.
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      auto ports = detail::verbs_backend::active_ports(cfg.verbs_device);
      if (ports.empty()) {
        // start() says why: no device, none of that name, no active port.
        detail::verbs_options opts;
        opts.device = cfg.verbs_device;
        auto be = std::make_unique<detail::verbs_backend>(cfg.owner, opts);
        if (auto err = be->start())
          return err;
        return backend_ptr{std::move(be)};
      }
      std::vector<backend_ptr> parts;
      for (auto& [device, port] : ports) {
        detail::verbs_options opts;
        opts.device = device;
        opts.port = port;
        auto be = std::make_unique<detail::verbs_backend>(cfg.owner, opts);
        if (auto err = be->start())
          return err;
        parts.push_back(std::move(be));
      }
      if (parts.size() == 1)
        return std::move(parts.front());
      std::vector<bool> optional(parts.size(), false);
      return backend_ptr{
        std::make_unique<detail::router_backend>(std::move(parts), std::move(optional))};
    };
    r.probe = [] { return detail::verbs_backend::probe(); };
#else
    r.make = [](const backend_config&) -> caf::expected<backend_ptr> {
      return make_error(errc::unavailable, "verbs: not compiled in (" KVROOM_VERBS_REASON ")");
    };
    r.probe = [] {
      return backend_availability{"verbs", false, false,
                                  "not compiled in (" KVROOM_VERBS_REASON ")"};
    };
#endif
    return r;
  }();
  return row;
}

} // namespace kvroom
