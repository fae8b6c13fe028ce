#pragma once

#include "kvroom/api/backend.hpp"
#include "kvroom/transport/region_table.hpp"

namespace kvroom::detail {

/// Same-process backend: a validated memcpy into a peer rank's registered
/// host memory (or, for a pull, out of it). Peers are other
/// `local_backend` instances of this process, found in one process-wide
/// directory of their registrations.
class local_backend final : public backend {
public:
  /// `streaming_copy_bytes`: see backend_config.
  local_backend(rank_id owner, uint64_t streaming_copy_bytes);
  ~local_backend() override;

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  /// Done or failed inside the call, from any thread: a validated memcpy,
  /// lock-free (the tables are read under `grace_period`).
  post_result post(const write_batch& batch) override;
  /// The batches' writes copied op by op in turn (bulk_copy.hpp), each
  /// batch checked on its own first.
  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override;
  bool completes_inline(const write_batch& batch) const override;
  /// A pull: the same validated memcpy, from the peer's memory into ours.
  post_result post_read(const read_batch& batch) override;
  bool reads_inline(const read_batch& batch) const override;

private:
  rank_id owner_;
  uint64_t streaming_;
  /// What this rank registered; listed in the directory from construction
  /// to destruction (made before `instance_`, which lists it).
  region_table regions_;
  uint64_t instance_;
};

} // namespace kvroom::detail
