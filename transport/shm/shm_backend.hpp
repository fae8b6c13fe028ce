#pragma once

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvroom/api/backend.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/transport/grace_period.hpp"
#include "kvroom/transport/region_table.hpp"

namespace kvroom::detail {

/// Same-host data plane through POSIX shared memory, one copy.
///
/// Receiving: memory registered here must live in a named shm segment
/// (/dev/shm, e.g. `host_kv_cache` with `shared = true`); the backend finds
/// each range's segment in /proc/self/maps and advertises it. Sending: the
/// first write to a peer maps each of its segments once (read-write, shared;
/// unmapped once its owner unlinked it and a new segment is mapped)
/// and every write is a memcpy into the mapping, after checking it lies in a
/// region the peer advertised and inside the segment's real size. A pull
/// (`post_read`) is the same memcpy out of the peer's mapping.
class shm_backend final : public backend {
public:
  /// `streaming_copy_bytes`: see backend_config.
  shm_backend(rank_id owner, uint64_t streaming_copy_bytes);
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
  /// The batches' writes copied op by op in turn (bulk_copy.hpp), each
  /// batch checked on its own first.
  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override;
  bool completes_inline(const write_batch& batch) const override;
  /// A pull: a memcpy out of the peer's mapped segment, checked the same way.
  post_result post_read(const read_batch& batch) override;
  bool reads_inline(const read_batch& batch) const override;

private:
  post_result copy(const write_batch& batch);
  post_result copy_in(const read_batch& batch);

  /// How a direction names its parts in errors, and which way it copies.
  struct copy_names {
    const char* kind;       ///< "write" or "read"
    const char* own_side;   ///< our range's role: "source" of a write
    const char* own_rank;   ///< "the sender", "the reader"
    const char* peer_side;  ///< the peer's range's role
    errc own_code;          ///< our range outside our registrations
    bool into_peer;         ///< a write: ours -> the peer's
  };

  /// Checks every op (`own(op)`: its address in our memory, `theirs(op)`
  /// in the peer's) against both sides' registrations, then copies.
  template <class Op, class Own, class Theirs>
  post_result checked_copy(const std::vector<Op>& ops, const endpoint_desc& peer,
                           const copy_names& names, Own own, Theirs theirs);
  /// Whether `peer` is this transport's on this host, host memory to host.
  bool reachable(const endpoint_desc& peer, int32_t device_a, int32_t device_b) const noexcept;
  /// Why `peer` is not reachable (none when it is).
  caf::error check_peer(const endpoint_desc& peer, int32_t device_a, int32_t device_b) const;

  struct mapping {
    uint8_t* base = nullptr;
    uint64_t size = 0;
    /// The file mapped (a name can come back as another file).
    uint64_t device = 0;
    uint64_t inode = 0;
  };
  /// Peer segments mapped here, by name. A mapping goes only when its file
  /// is gone (its owner unlinked it: a peer that ended) and a new segment
  /// is mapped; it is unmapped after every copy that could use it ended.
  using mappings = std::unordered_map<std::string, mapping>;

  /// The checks of `checked_copy`, inside the caller's view of `regions`:
  /// where each op's peer range is mapped goes to `at_peer[i]`; stops at a
  /// segment not mapped yet (`missing`).
  template <class Op, class Own, class Theirs>
  caf::error resolve_all(const region_table::view& regions, const mappings& maps,
                         const std::vector<Op>& ops, const endpoint_desc& peer,
                         const copy_names& names, Own own, Theirs theirs, uint8_t** at_peer,
                         const std::string*& missing) const;

  /// The same for `batch`'s strided writes, each span checked whole: into
  /// `out`, each with its destination where the peer's span is mapped here.
  caf::error resolve_strided(const region_table::view& regions, const mappings& maps,
                             const write_batch& batch, std::vector<strided_write>& out,
                             const std::string*& missing) const;

  /// The peer region the last op fell in, and its mapping: a batch's ops
  /// run through one buffer after another, and a scan of the peer's regions
  /// (a buffer per layer and K/V) plus a look-up of its segment by name per
  /// op cost more than a small page's copy.
  struct peer_hint {
    const shm_region* region = nullptr;
    mapping map;
  };

  /// Where [addr, addr + len) is mapped here when it lies in `hint`'s
  /// region and inside its segment, else null (ask `resolve`).
  static uint8_t* hinted(const peer_hint& hint, uint64_t addr, uint64_t len) noexcept {
    auto* r = hint.region;
    if (!r || !mem_desc{r->addr, r->size_bytes, -1}.covers(addr, len, -1))
      return nullptr;
    auto at = r->offset + (addr - r->addr);
    if (at < r->offset || len > hint.map.size || at > hint.map.size - len)
      return nullptr;
    return hint.map.base + at;
  }

  /// Finds the peer region holding [addr, addr + len), points `hint` at it
  /// and returns where the range is mapped here; or null, with `missing`
  /// set to a segment not mapped yet (the caller maps it outside its
  /// section and tries again), or not (`unresolved` says why).
  uint8_t* resolve(const mappings& maps, const endpoint_desc& peer, uint64_t addr, uint64_t len,
                   peer_hint& hint, const std::string*& missing) const noexcept;

  /// Why `resolve` found no bytes, naming op `i` of `kind` and its `side`:
  /// made only for an error, as copies are the hot path.
  static caf::error unresolved(const endpoint_desc& peer, uint64_t addr, uint64_t len,
                               const peer_hint& hint, const char* kind, size_t i,
                               const char* side);

  /// Maps a peer segment if it is not yet (outside any reader section),
  /// and unmaps those whose file is gone: what a sender maps is bounded by
  /// the peers' live segments, not by every peer it ever wrote to.
  caf::error map_segment(const std::string& name);

  rank_id owner_;
  uint64_t streaming_;
  /// This host's id (`host_domain()`), read once.
  uint64_t domain_;
  region_table regions_;
  std::map<region_id, shm_region> exposed_;
  /// Serialises `map_segment`; copies read `mapped_` with no lock.
  std::mutex map_mtx_;
  published<mappings> mapped_;
};

} // namespace kvroom::detail
