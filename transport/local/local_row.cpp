#include "kvroom/api/backend.hpp"
#include "kvroom/transport/local/local_backend.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

const transport_row& local_transport() {
  static const transport_row row = [] {
    transport_row r;
    r.name = "local";
    r.host_nearness = 0; // a memcpy beats everything
    r.domain_bound = true;
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      return backend_ptr{std::make_unique<detail::local_backend>(cfg.owner, cfg.streaming_copy_bytes)};
    };
    r.probe = [] { return backend_availability{"local", true, true, "same-process memcpy"}; };
    return r;
  }();
  return row;
}

} // namespace kvroom
