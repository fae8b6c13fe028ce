#pragma once

#include <mutex>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvroom/api/backend.hpp"
#include "kvroom/transport/region_table.hpp"

namespace kvroom::detail {

/// Same-host data plane through POSIX shared memory, one copy.
///
/// Receiving: memory registered here must live in a named shm segment
/// (/dev/shm, e.g. `host_kv_cache` with `shared = true`); the backend finds
/// each range's segment in /proc/self/maps and advertises it. Sending: the
/// first write to a peer maps each of its segments once (read-write, shared)
/// and every write is a memcpy into the mapping, after checking it lies in a
/// region the peer advertised and inside the segment's real size. A pull
/// (`post_read`) is the same memcpy out of the peer's mapping.
class shm_backend final : public backend {
public:
  explicit shm_backend(rank_id owner);
  ~shm_backend() override;

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  /// Done or failed inside the call, from any thread: a memcpy into the
  /// peer's mapped segment (rooms post small batches without the worker's
  /// thread hop).
  post_result post(const write_batch& batch) override;
  bool completes_inline(const write_batch& batch) const override;
  /// A pull: a memcpy out of the peer's mapped segment, checked the same way.
  post_result post_read(const read_batch& batch) override;
  bool reads_inline(const read_batch& batch) const override;

private:
  caf::error copy(const write_batch& batch);
  caf::error copy_in(const read_batch& batch);
  caf::error check_peer(const endpoint_desc& peer, int32_t device_a, int32_t device_b) const;
  /// Where [addr, addr + len) of the peer's advertised memory is mapped
  /// here; under `mapped_mtx_`. Errors name op `i` of `kind` and its `side`.
  caf::expected<uint8_t*> peer_bytes(const endpoint_desc& peer, uint64_t addr, uint64_t len,
                                     const char* kind, size_t i, const char* side);

  struct mapping {
    uint8_t* base = nullptr;
    uint64_t size = 0;
  };

  /// The local mapping of a peer segment, mapping it on first use.
  caf::expected<mapping> map_segment(const std::string& name);

  rank_id owner_;
  region_table regions_;
  std::map<region_id, shm_region> exposed_;
  /// Guards `mapped_`: the worker and rooms' inline copies both map.
  std::mutex mapped_mtx_;
  std::unordered_map<std::string, mapping> mapped_;
};

} // namespace kvroom::detail
