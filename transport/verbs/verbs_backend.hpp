#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvroom/api/backend.hpp"
#include "kvroom/transport/verbs/link_fsm.hpp"
#include "kvroom/transport/verbs/wr_plan.hpp"

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_comp_channel;
struct ibv_qp;
struct ibv_mr;

namespace kvroom::detail {

/// Where the verbs backend runs and how hard it pushes.
struct verbs_options {
  std::string device;  ///< device name; empty: the first with an active port
  uint8_t port = 1;
  int gid_index = 0;   ///< RoCE: the GID table entry to source from
  uint32_t connect_timeout_ms = 5'000;
  uint32_t max_send_wr = 256;  ///< send queue depth per queue pair
  uint32_t signal_every = 32;
  uint32_t cq_depth = 4096;
};

/// RDMA WRITE over libibverbs on one port, one RC queue pair per peer
/// endpoint (a rank with several active ports offers one endpoint each:
/// the verbs row makes one backend per port, a path each).
///
/// Connection data (queue pair, lid/gid, psn, mtu, and the rkeys and ranges
/// of the memory each end exposes) travels as `transport_control` messages
/// through the rank's actors; `verbs::link_fsm` decides every step. A batch
/// is planned into work requests bounded by max_sge and the port's max
/// message size (`verbs::plan_work_requests`), posted through a bounded send
/// window (`verbs::send_window`); a dedicated thread waits on the completion
/// channel, hands completions over under a mutex and wakes the owner, which
/// applies them on its own thread.
///
/// Destinations are validated against the regions the peer advertised in
/// its hello, once the link is up and before any work request of the batch
/// is posted; a violation fails the batch and moves nothing. A failed work
/// completion fails every batch on that queue pair with the verbs status and
/// queue pair number; the pair is torn down and the next batch reconnects.
class verbs_backend final : public backend {
public:
  verbs_backend(rank_id owner, verbs_options opts);
  ~verbs_backend() override;

  /// Opens the device, protection domain, completion queue and thread.
  caf::error start();

  /// Devices, ports and limits, or why there are none.
  static backend_availability probe();

  /// Every active (device, port), of `device` only when it is named.
  static std::vector<std::pair<std::string, uint8_t>> active_ports(const std::string& device);

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  post_result post(const write_batch& batch) override;
  /// A pull: RDMA READs from the peer's advertised memory (registered for
  /// remote reads as well as writes) into this rank's, planned like writes
  /// and completed on the same queue pair and window.
  post_result post_read(const read_batch& batch) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  std::vector<transport_control> take_control() override;
  caf::error on_control(const transport_control& msg) override;
  void set_notifier(std::function<void()> notify) override;

private:
  /// Validates and posts `batch`; its id, or why nothing was posted.
  caf::expected<xfer_id> post_batch(const write_batch& batch);
  struct region {
    region_id id;
    mem_desc mem;
    ibv_mr* mr;
  };

  struct xfer {
    rank_id peer = -1;
    /// A pull: RDMA READs, `ops` as writes turned around (src: the local
    /// destination, dst: the peer's source; see verbs::plan_read_requests).
    bool read = false;
    std::vector<write_op> ops;  ///< until planned
    int32_t src_device_id = -1;
    std::vector<verbs::wr_plan> wrs;
    std::vector<uint32_t> rkeys;  ///< per work request
    size_t next_wr = 0;       ///< first work request not posted yet
    uint64_t last_seq = 0;    ///< sequence number of its last posted one
    bool validated = false;   ///< destinations checked against the peer's regions
    xfer_status status = xfer_status::in_progress;
    std::string reason;
  };

  /// One queue pair to one endpoint (port) of one peer rank.
  struct link {
    link(verbs::link_fsm f, rank_id p, std::string a)
      : fsm(std::move(f)), peer(p), address(std::move(a)) {}
    verbs::link_fsm fsm;
    rank_id peer;
    std::string address;  ///< the peer's endpoint (its device and port)
    ibv_qp* qp = nullptr;
    verbs::qp_address local;
    std::vector<verbs::remote_region> remote;  ///< what the peer exposes
    std::unique_ptr<verbs::send_window> window;
    std::deque<xfer_id> queue;  ///< batches in post order, not fully done
  };

  /// A completion as the completion thread hands it over.
  struct completion {
    uint64_t wr_id;
    int status;
    uint32_t vendor_err;
    uint32_t qp_num;
  };

  /// Where a signalled work request's completion lands.
  struct signalled_wr {
    link* to;  ///< links live as long as the backend
    uint32_t qp_num;
    uint64_t seq;
  };

  void completion_loop();
  void apply_completions();
  void drive(rank_id peer, link& l);
  void run_steps(rank_id peer, link& l, const verbs::link_fsm::result& r);
  caf::error create_qp(link& l);
  caf::error connect_qp(link& l, const verbs::qp_address& remote);
  void destroy_qp(rank_id peer, link& l, const std::string& why);
  void send_hello(rank_id peer, link& l, verbs::hello::kind what, uint64_t epoch);
  void fail_link(rank_id peer, link& l, const std::string& reason);
  caf::error plan(const link& l, xfer& x) const;
  void settle(link& l);
  /// The link to `peer`'s endpoint `address` (empty: its only one).
  link& link_to(rank_id peer, const std::string& address);
  const region* local_region(uint64_t addr, uint64_t len) const;

  rank_id owner_;
  verbs_options opts_;
  verbs::device_limits limits_;
  /// Scatter entries per READ (the device's max_sge_rd).
  uint32_t max_sge_rd_ = 1;
  std::string device_name_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  uint16_t lid_ = 0;
  std::array<uint8_t, 16> gid_{};
  uint8_t active_mtu_ = 0;
  bool ethernet_ = false;  ///< RoCE: addresses need a GRH

  std::vector<region> regions_;
  region_id next_region_ = 1;
  /// By peer rank and its endpoint: a rank with several ports has a queue
  /// pair from this port to each of its ports it is sent to.
  std::map<std::pair<rank_id, std::string>, std::unique_ptr<link>> links_;
  std::unordered_map<xfer_id, xfer> xfers_;
  std::unordered_map<uint64_t, signalled_wr> signalled_;
  uint64_t next_wr_id_ = 1;
  xfer_id next_xfer_ = 1;
  std::vector<transport_control> outbox_;

  // Shared with the completion thread.
  std::mutex done_mtx_;
  std::vector<completion> done_;
  std::function<void()> notify_;
  std::atomic<bool> stopping_{false};
  std::thread poller_;
};

} // namespace kvroom::detail
