#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"

namespace kvroom::detail {

/// Where one write lands in a peer's registered memory, as the cuda backend
/// must address it: directly (same process), or through the IPC mapping of
/// the allocation the destination lies in (another process on this host).
struct device_target {
  size_t region = 0;        ///< index into the peer endpoint's `device`
  bool through_ipc = false;
  uint64_t ipc_offset = 0;  ///< from the mapped allocation's base
};

/// Resolves `[addr, addr + len)` against what `peer` advertised. Refuses,
/// with a reason naming the range and rank: ranges outside every region;
/// host memory of another process (only shm reaches that); GPU memory of
/// another process advertised without an IPC handle.
caf::expected<device_target> route_device_write(const endpoint_desc& peer, bool same_process,
                                                uint64_t addr, uint64_t len);

} // namespace kvroom::detail
