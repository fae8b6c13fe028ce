#include "kvroom/api/backend.hpp"
#include "kvroom/transport/shm/shm_backend.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

const transport_row& shm_transport() {
  static const transport_row row = [] {
    transport_row r;
    r.name = "shm";
    r.host_nearness = 1; // a shared mapping beats the NIC
    r.domain_bound = true;
    r.needs_network = true;
    r.registers_any_host = false; // only memory in a shared segment
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      return backend_ptr{std::make_unique<detail::shm_backend>(cfg.owner, cfg.streaming_copy_bytes)};
    };
    r.probe = [] {
      return backend_availability{"shm", true, true,
                                  "same host, POSIX shared memory (/dev/shm), one copy"};
    };
    return r;
  }();
  return row;
}

} // namespace kvroom
