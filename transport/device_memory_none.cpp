// device_memory.hpp for builds without the CUDA toolkit.
#include "kvroom/transport/device_memory.hpp"

#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

caf::error not_built() {
  return make_error(errc::unavailable, "kvroom was built without CUDA (KVROOM_WITH_CUDA)");
}

} // namespace

int32_t device_of(uint64_t) noexcept {
  return -1;
}

caf::expected<int> device_count() {
  return not_built();
}

caf::expected<uint64_t> device_alloc(int, size_t) {
  return not_built();
}

void device_free(int, uint64_t) {
  // nop
}

caf::error device_upload(int, uint64_t, const void*, size_t) {
  return not_built();
}

caf::error device_download(int, void*, uint64_t, size_t) {
  return not_built();
}

caf::error device_fill(int, uint64_t, uint8_t, size_t) {
  return not_built();
}

caf::error device_copy(int, uint64_t, uint64_t, size_t) {
  return not_built();
}

} // namespace kvroom
