#pragma once

#include <cstddef>
#include <cstdint>

#include "caf/error.hpp"
#include "caf/expected.hpp"

namespace kvroom {

// GPU memory for tests, benchmarks and tools that must not include CUDA
// headers themselves. Without CUDA compiled in (or without a GPU), every
// call returns `errc::unavailable` with the reason.

/// The GPU whose memory `addr` points into, or -1 for host memory (also
/// for pinned host memory, and always without CUDA or a driver).
int32_t device_of(uint64_t addr) noexcept;

/// Number of usable GPUs, or why there are none.
caf::expected<int> device_count();

caf::expected<uint64_t> device_alloc(int device, size_t bytes);

void device_free(int device, uint64_t addr);

caf::error device_upload(int device, uint64_t dst, const void* src, size_t bytes);

caf::error device_download(int device, void* dst, uint64_t src, size_t bytes);

caf::error device_fill(int device, uint64_t dst, uint8_t value, size_t bytes);

/// A synchronous copy between two ranges of GPU `device` (cudaMemcpy): the
/// baseline the cuda backend is measured against.
caf::error device_copy(int device, uint64_t dst, uint64_t src, size_t bytes);

} // namespace kvroom
