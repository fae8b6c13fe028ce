#pragma once

#include <cstdint>

namespace kvroom {

/// Milliseconds on the steady clock: every deadline, timeout and age in
/// kvroom is read from this one clock (rooms, links, leases, the data
/// plane's batches and connections), so two of them always compare.
uint64_t monotonic_ms() noexcept;

} // namespace kvroom
