#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvroom/transport/forwarding_backend.hpp"
#include "kvroom/transport/paths/path_health.hpp"

namespace kvroom {

/// Several data paths per peer behind one backend (Mooncake TENT's
/// multi-rail failover): a batch names every path to its peer (`peer`, then
/// `alternates`, nearest transport first). The layer slices a large batch
/// over the healthy paths of the nearest transport, and moves a slice whose
/// path failed (reset, timeout, failed completion, a refused connection) to
/// a path it has not tried; the batch fails only when every path failed it,
/// with the reason of each, or when the receiver refused it (that is the
/// batch's fault: no path would take it). Each path has a `path_health`:
/// repeated errors rest it, a rested path carries one probe batch before it
/// carries more, and a transport whose every path rests hands its batches
/// to the next transport the peer offers. A batch with one path passes
/// straight through (its failures still count against the path).
///
/// Retries never land twice in a way that matters: a slice keeps its key on
/// every path (a keyed batch is applied at most once by a receiver that
/// checks grants), a slice moves again only once its path reported it
/// failed, and a batch reports failure only once none of its slices is
/// moving, so the transfer worker's fence still means nothing of the room
/// is in flight.
///
/// Threads: `post` of a batch that `completes_inline` may run on any
/// thread; everything else on the transfer worker's.
class multipath_backend final : public forwarding_backend {
public:
  multipath_backend(backend_ptr inner, path_options opts);

  post_result post(const write_batch& batch) override;
  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  bool refused(xfer_id id) const override;
  bool injected(xfer_id id) const override;
  bool completes_inline(const write_batch& batch) const override;
  post_result post_read(const read_batch& batch) override;

  /// Every path used so far, any thread.
  std::vector<path_report> paths() const;
  path_counters counters() const;

private:
  struct slice {
    write_batch batch;  ///< peer set per attempt; ops only with alternates
    size_t path = 0;
    bool moving = false;
    bool done = false;
    xfer_id inner = 0;
    std::vector<bool> tried;
  };
  struct transfer {
    std::vector<endpoint_desc> paths;
    std::vector<size_t> tier;  ///< per path: 0 for the nearest transport
    std::vector<std::string> why;  ///< per path: its last failure here
    std::vector<slice> slices;
    size_t cursor = 0;  ///< round robin over the paths of a tier
    bool failed = false;
    bool refused = false;
    /// A failure of it was injected (the fault decorator's).
    bool injected = false;
    std::string reason;
  };
  struct path_entry {
    path_health health;
    std::string transport;
    std::string address;
    rank_id peer = -1;
    uint64_t used_ms = 0;
  };

  enum class launched { moving, done, waiting, exhausted };
  /// Posts `s` on the best path it has not tried; retries at once on the
  /// next when a post fails for the path's sake.
  launched launch(transfer& t, slice& s, uint64_t now);
  /// Path `p` for slice `s` (none tried by it or in `full`), or none left.
  bool pick(transfer& t, const slice& s, uint64_t now, const std::vector<bool>& full,
            size_t& p);
  void slice_failed(transfer& t, slice& s, const std::string& why, uint64_t now, bool injected);
  void give_up(transfer& t, std::string reason, bool refused, bool injected);
  /// Drives the transfer: polls what moves, relaunches what waits.
  xfer_status advance(transfer& t, uint64_t now);
  xfer_status outcome(const transfer& t, std::string& reason) const;

  // -- health table (any thread, under health_mtx_) ----------------------------
  path_entry& entry_locked(const endpoint_desc& ep, uint64_t now);
  bool available(const endpoint_desc& ep, uint64_t now);
  uint64_t rest_until(const endpoint_desc& ep);
  void took(const endpoint_desc& ep, uint64_t now);
  void succeeded(const endpoint_desc& ep, uint64_t now);
  void path_failed(const endpoint_desc& ep, uint64_t now, const std::string& why);

  path_options opts_;
  mutable std::mutex health_mtx_;
  std::unordered_map<std::string, path_entry> health_;
  // Transfers: the worker's, except an inline post that (wrongly) stays in
  // progress; the lock covers the table, not the transfers.
  mutable std::mutex table_mtx_;
  std::unordered_map<xfer_id, transfer> transfers_;
  std::atomic<xfer_id> next_id_{1};
  /// Marks the id of a read in progress (the inner backend's, passed
  /// through); this backend's own ids never reach it.
  static constexpr xfer_id read_id_bit = xfer_id{1} << 62;
  std::atomic<uint64_t> next_key_{1};
  std::atomic<uint64_t> turn_{0};
  std::array<std::atomic<uint64_t>, max_path_transports> retries_{}, fallbacks_{};
  std::atomic<uint64_t> rests_{0}, sliced_{0}, exhausted_{0};
};

/// Cuts `batch` into `k` batches of about equal bytes (an op split where
/// needed), in order, aux writes staying last in each; `key` of each is
/// `first_key + i`. Fewer when the batch has fewer bytes than `k`.
std::vector<write_batch> slice_batch(const write_batch& batch, size_t k, uint64_t first_key);

} // namespace kvroom
