#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"

namespace kvroom::verbs {

/// What one device and queue pair allow (ibv_device_attr / ibv_port_attr /
/// the QP's send queue); the planner and the send window stay inside them.
struct device_limits {
  uint32_t max_sge = 1;             ///< scatter-gather entries per work request
  uint64_t max_msg_bytes = 1u << 30;  ///< port max_msg_sz: bytes per work request
  uint32_t max_send_wr = 128;       ///< send queue depth of one queue pair
};

/// One local scatter-gather entry (`ibv_sge` without the lkey, which the
/// backend fills from the registration covering `addr`).
struct sge_plan {
  uint64_t addr = 0;
  uint32_t length = 0;
};

/// One RDMA WRITE: local entries gathered into one contiguous remote range.
struct wr_plan {
  uint64_t remote_addr = 0;
  uint64_t bytes = 0;
  std::vector<sge_plan> sges;
};

/// Turns a batch's writes into as few work requests as the limits allow:
/// writes are cut at `max_msg_bytes` (and at 4 GiB - 1, an sge's length
/// field); consecutive pieces whose destinations are contiguous share one
/// work request, up to `max_sge` entries and `max_msg_bytes` bytes; pieces
/// whose sources are contiguous too share one entry. Order is kept.
///
/// Zero-byte writes are skipped; limits of zero are refused
/// (`invalid_argument`), as is a plan of more than `max_planned_wrs`.
///
/// `src_region` and `dst_region`, when given, name the registration an
/// address lies in: one entry never spans two local registrations (each has
/// its own lkey) and one work request never spans two remote ones (one
/// rkey), even where they are adjacent in memory.
using region_of = std::function<int64_t(uint64_t addr)>;

caf::expected<std::vector<wr_plan>> plan_work_requests(const std::vector<write_op>& ops,
                                                       const device_limits& limits,
                                                       const region_of& src_region = nullptr,
                                                       const region_of& dst_region = nullptr);

/// A pull's RDMA READs, planned the same way: one READ reads a contiguous
/// remote range and scatters it into local entries, which is a WRITE's
/// shape turned around (each `wr_plan`'s `remote_addr` is then the source,
/// its `sges` the destinations). `limits.max_sge` should be the device's
/// `max_sge_rd`. `local_region` and `remote_region` as for writes.
/// A pull's reads in the planner's shape: `src_addr` the local destination,
/// `dst_addr` the peer's source.
std::vector<write_op> as_write_shape(const std::vector<read_op>& ops);

caf::expected<std::vector<wr_plan>> plan_read_requests(const std::vector<read_op>& ops,
                                                       const device_limits& limits,
                                                       const region_of& local_region = nullptr,
                                                       const region_of& remote_region = nullptr);

constexpr size_t max_planned_wrs = 1u << 22;

/// Credits of one queue pair's send queue. Work requests are posted
/// unsignalled except every `signal_every`-th, the last of a batch, and the
/// one that fills the queue, so completions stay few while the queue can
/// never fill with unsignalled work whose slots nothing would free: a
/// signalled completion frees its own slot and every slot before it (RC
/// completes in order).
class send_window {
public:
  send_window(uint32_t depth, uint32_t signal_every);

  /// Free send-queue slots.
  uint32_t room() const noexcept {
    return depth_ - static_cast<uint32_t>(posted_ - completed_);
  }

  /// Takes a slot for the next work request; its sequence number goes into
  /// `seq`. Returns whether it must be signalled. Requires `room() > 0`.
  bool take(bool last_of_batch, uint64_t& seq);

  /// A signalled work request with sequence number `seq` completed: it and
  /// everything posted before it left the queue.
  void completed(uint64_t seq) noexcept;

  /// Every slot is free again (the queue pair was torn down).
  void reset() noexcept;

  /// Sequence number of the last work request known complete.
  uint64_t completed_seq() const noexcept {
    return completed_;
  }

  uint64_t outstanding() const noexcept {
    return posted_ - completed_;
  }

private:
  uint32_t depth_;
  uint32_t signal_every_;
  uint64_t posted_ = 0;
  uint64_t completed_ = 0;
  uint32_t since_signal_ = 0;
};

} // namespace kvroom::verbs
