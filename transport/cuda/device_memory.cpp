#include "kvroom/transport/device_memory.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/cuda/cuda_error.hpp"

namespace kvroom {

namespace {

caf::error fail(const char* what, cudaError_t err) {
  return make_error(errc::unavailable, std::string{what} + ": " + detail::cuda_text(err));
}

caf::error use(int device) {
  if (auto err = cudaSetDevice(device); err != cudaSuccess)
    return fail("cudaSetDevice", err);
  return caf::none;
}

} // namespace

int32_t device_of(uint64_t addr) noexcept {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, reinterpret_cast<const void*>(addr)) != cudaSuccess) {
    // No driver, or memory CUDA never saw: host memory. The call leaves
    // its error behind for the next one; take it.
    (void) cudaGetLastError();
    return -1;
  }
  // Managed memory is used as the device's (its pages live there while a
  // kernel writes them); pinned host memory stays host.
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
    return attr.device;
  return -1;
}

caf::expected<int> device_count() {
  int n = 0;
  if (auto err = cudaGetDeviceCount(&n); err != cudaSuccess)
    return fail("cudaGetDeviceCount", err);
  if (n == 0)
    return make_error(errc::unavailable, "no GPU (cudaGetDeviceCount returned 0)");
  return n;
}

caf::expected<uint64_t> device_alloc(int device, size_t bytes) {
  if (auto err = use(device))
    return err;
  void* ptr = nullptr;
  if (auto err = cudaMalloc(&ptr, bytes); err != cudaSuccess)
    return fail("cudaMalloc", err);
  return reinterpret_cast<uint64_t>(ptr);
}

void device_free(int device, uint64_t addr) {
  if (!use(device))
    cudaFree(reinterpret_cast<void*>(addr));
}

caf::error device_upload(int device, uint64_t dst, const void* src, size_t bytes) {
  if (auto err = use(device))
    return err;
  if (auto err = cudaMemcpy(reinterpret_cast<void*>(dst), src, bytes, cudaMemcpyHostToDevice);
      err != cudaSuccess)
    return fail("cudaMemcpy to device", err);
  return caf::none;
}

caf::error device_download(int device, void* dst, uint64_t src, size_t bytes) {
  if (auto err = use(device))
    return err;
  if (auto err = cudaMemcpy(dst, reinterpret_cast<const void*>(src), bytes,
                            cudaMemcpyDeviceToHost);
      err != cudaSuccess)
    return fail("cudaMemcpy to host", err);
  return caf::none;
}

caf::error device_fill(int device, uint64_t dst, uint8_t value, size_t bytes) {
  if (auto err = use(device))
    return err;
  if (auto err = cudaMemset(reinterpret_cast<void*>(dst), value, bytes); err != cudaSuccess)
    return fail("cudaMemset", err);
  return caf::none;
}

caf::error device_copy(int device, uint64_t dst, uint64_t src, size_t bytes) {
  if (auto err = use(device))
    return err;
  if (auto err = cudaMemcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
                            bytes, cudaMemcpyDeviceToDevice);
      err != cudaSuccess)
    return fail("cudaMemcpy device to device", err);
  return caf::none;
}

} // namespace kvroom
