#include "kvroom/transport/cuda/device_route.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/region_table.hpp"

namespace kvroom::detail {

caf::expected<device_target> route_device_write(const endpoint_desc& peer, bool same_process,
                                                uint64_t addr, uint64_t len) {
  auto who = "rank " + std::to_string(peer.owner);
  for (size_t i = 0; i < peer.device.size(); ++i) {
    auto& r = peer.device[i];
    mem_desc mem{r.addr, r.size_bytes, r.device_id};
    if (!mem.covers(addr, len, r.device_id))
      continue;
    device_target out;
    out.region = i;
    if (same_process)
      return out;
    if (r.device_id < 0)
      return make_error(errc::unsupported,
                        "destination " + region_table::range(addr, len) + " is host memory of "
                          + who + " in another process; cuda reaches only its GPU memory there");
    if (r.ipc_handle.empty())
      return make_error(errc::unsupported, "destination " + region_table::range(addr, len)
                                             + " of " + who
                                             + " has no CUDA IPC handle (same process only)");
    out.through_ipc = true;
    out.ipc_offset = r.offset + (addr - r.addr);
    return out;
  }
  return make_error(errc::out_of_range, "destination " + region_table::range(addr, len)
                                          + " lies outside " + who + "'s registered memory");
}

} // namespace kvroom::detail
