#include "kvroom/messages/error.hpp"
#include "kvroom/transport/factory.hpp"
#include "kvroom/transport/transport_table.hpp"
#ifdef KVROOM_HAVE_VERBS
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
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      detail::verbs_options opts;
      opts.device = cfg.verbs_device;
      auto be = std::make_unique<detail::verbs_backend>(cfg.owner, opts);
      if (auto err = be->start())
        return err;
      return backend_ptr{std::move(be)};
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
