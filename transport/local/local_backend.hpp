#pragma once

#include <unordered_map>

#include "kvroom/transport/backend.hpp"

namespace kvroom::detail {

/// Same-process backend: a validated memcpy into a peer rank's registered
/// host memory. Peers are other `local_backend` instances of this process;
/// their registrations live in one process-wide table.
class local_backend final : public backend {
public:
  explicit local_backend(rank_id owner);
  ~local_backend() override;

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  caf::expected<xfer_id> post(const write_batch& batch) override;
  std::optional<caf::error> copy_inline(const write_batch& batch) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;

private:
  rank_id owner_;
  uint64_t instance_;
  xfer_id next_xfer_ = 1;
  /// Batches posted and not yet released; all complete inside post().
  std::unordered_map<xfer_id, xfer_status> posted_;
};

} // namespace kvroom::detail
