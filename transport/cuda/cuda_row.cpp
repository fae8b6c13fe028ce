#include "kvroom/api/errors.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/transport_table.hpp"
#ifdef KVROOM_HAVE_CUDA
#include "kvroom/transport/cuda/cuda_backend.hpp"
#endif

namespace kvroom {

// Built only when the CUDA toolkit was found, and started only when a GPU
// answers; otherwise the reason says why.
const transport_row& cuda_transport() {
  static const transport_row row = [] {
    transport_row r;
    r.name = "cuda";
    r.device_nearness = 0; // GPU memory on one host: peer copies
    r.domain_bound = true;
    r.may_be_absent = true;
#ifdef KVROOM_HAVE_CUDA
    r.make = [](const backend_config& cfg) -> caf::expected<backend_ptr> {
      auto be = std::make_unique<detail::cuda_backend>(cfg.owner);
      if (auto err = be->start())
        return err;
      return backend_ptr{std::move(be)};
    };
    r.probe = [] { return detail::cuda_backend::probe(); };
#else
    r.make = [](const backend_config&) -> caf::expected<backend_ptr> {
      return make_error(errc::unavailable, "cuda: not compiled in (" KVROOM_CUDA_REASON ")");
    };
    r.probe = [] {
      return backend_availability{"cuda", false, false, "not compiled in (" KVROOM_CUDA_REASON ")"};
    };
#endif
    return r;
  }();
  return row;
}

} // namespace kvroom
