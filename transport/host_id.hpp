#pragma once

#include <cstdint>

namespace kvroom::detail {

/// Identifies this host (a hash of its boot id): endpoints with the same
/// value are on one machine (shm, cuda IPC).
uint64_t host_domain();

} // namespace kvroom::detail
