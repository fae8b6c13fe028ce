#include "kvroom/actors/control/etcd/etcd_store.hpp"

#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

directory_store etcd_directory_store() {
  directory_store row;
  row.schemes = {"etcd", "etcds"};
  row.name = "etcd directory";
  row.connect = [](const directory_options& opts) -> caf::expected<store_connection> {
    auto etcd = etcd_options_of(opts.url, opts.cacert, opts.cert, opts.key, opts.user,
                                opts.password);
    if (!etcd)
      return etcd.error();
    if (etcd->endpoints.empty())
      return make_error(errc::invalid_config, "the etcd directory needs at least one member");
    store_connection out;
    out.request_timeout_ms = etcd->request_timeout_ms;
    out.connect = [base = std::move(*etcd)](uint32_t timeout_ms) {
      auto o = base;
      if (timeout_ms > 0)
        o.request_timeout_ms = timeout_ms;
      return std::unique_ptr<store_client>{std::make_unique<etcd_gateway>(std::move(o))};
    };
    return out;
  };
  // A replacement waits out its predecessor's lease, then registers.
  row.registration_wait_ms = [](const directory_options& opts) {
    return opts.lease_ttl_ms + opts.registration_timeout_ms + 1000;
  };
  return row;
}

} // namespace kvroom
