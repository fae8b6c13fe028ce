#pragma once

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvroom/api/backend.hpp"

struct CUstream_st;
struct CUevent_st;

namespace kvroom::detail {

/// GPU memory on one host through the CUDA runtime (linked statically, so
/// the binary runs, and reports why, without a driver).
///
/// Registration records each range's kind and device (checked with
/// cudaPointerGetAttributes) and, for GPU memory, the CUDA IPC handle of
/// its allocation, so ranks in other processes on this host can map it.
/// A batch is validated whole against both sides' registrations, then
/// enqueued as cudaMemcpyAsync calls (cudaMemcpy2DAsync for a strided
/// write's rows) on a non-blocking stream per (peer, device) with one event
/// behind them; `poll` queries the event, on the
/// transfer worker's thread, never an actor scheduler thread.
class cuda_backend final : public backend {
public:
  explicit cuda_backend(rank_id owner);
  ~cuda_backend() override;

  /// Fails with the runtime's reason when no GPU is usable.
  caf::error start();

  /// GPUs with their names and memory, or why there are none.
  static backend_availability probe();

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  post_result post(const write_batch& batch) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;

private:
  /// Validates and posts `batch`; its id, or why nothing was posted.
  caf::expected<xfer_id> post_batch(const write_batch& batch);
  struct region {
    region_id id;
    mem_desc mem;
    device_region advertised;
  };
  struct xfer {
    CUevent_st* event = nullptr;
    int device = 0; // the event's: events belong to their device's context
    xfer_status status = xfer_status::in_progress;
    std::string reason;
  };

  /// An event of `device` for a batch's completion: a spare one, or new.
  caf::expected<CUevent_st*> take_event(int device);
  /// Back to the spares once complete (destroyed beyond `max_spare_events`).
  void give_event(CUevent_st* event, int device);

  caf::expected<uint64_t> ipc_base(const device_region& r, int device);
  caf::expected<CUstream_st*> stream_for(rank_id peer, int device);
  void enable_peer_access(int from, int to);

  rank_id owner_;
  std::string token_;
  std::vector<region> regions_;
  region_id next_region_ = 1;
  std::map<std::pair<rank_id, int>, CUstream_st*> streams_;
  /// Opened IPC handles (handle bytes, opening device) -> mapped base.
  std::map<std::pair<std::string, int>, uint64_t> opened_;
  std::set<std::pair<int, int>> peer_access_;
  std::unordered_map<xfer_id, xfer> xfers_;
  /// Events of finished batches, by device, for the next batches. Creating
  /// and destroying one per batch was most of what a one-write batch cost
  /// beyond its cudaMemcpyAsync (see `take_event`).
  std::map<int, std::vector<CUevent_st*>> spare_events_;
  /// Spares kept per device: more than a worker keeps in flight.
  static constexpr size_t max_spare_events = 64;
  xfer_id next_xfer_ = 1;
};

} // namespace kvroom::detail
