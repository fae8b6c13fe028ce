#include "kvroom/transport/verbs/verbs_backend.hpp"

#include <infiniband/verbs.h>

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/transport/log.hpp"

namespace kvroom::detail {

namespace {

std::string errno_text(int err) {
  return std::strerror(err != 0 ? err : EIO);
}

std::string hex(uint64_t x) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(x));
  return buf;
}

std::string range(uint64_t addr, uint64_t len) {
  return "[" + hex(addr) + ", +" + std::to_string(len) + ")";
}

int mtu_bytes(int mtu) {
  return mtu >= 1 && mtu <= 5 ? 128 << mtu : 0;
}

/// Frees a device list however the scope ends.
struct device_list {
  ibv_device** list = nullptr;
  int count = 0;
  int error = 0;
  device_list() {
    errno = 0;
    list = ibv_get_device_list(&count);
    error = errno;
  }
  ~device_list() {
    if (list != nullptr)
      ibv_free_device_list(list);
  }
  /// Why there is no device, or empty when there is one.
  std::string why_none() const {
    if (list == nullptr)
      return "no RDMA device (ibv_get_device_list: " + errno_text(error == 0 ? ENODEV : error) + ")";
    if (count == 0)
      return "no RDMA device (ibv_get_device_list found none)";
    return {};
  }
};

} // namespace

// -- discovery ------------------------------------------------------------------

backend_availability verbs_backend::probe() {
  backend_availability out{"verbs", true, false, {}};
  device_list devs;
  if (auto why = devs.why_none(); !why.empty()) {
    out.detail = why;
    return out;
  }
  for (int i = 0; i < devs.count; ++i) {
    std::string name = ibv_get_device_name(devs.list[i]);
    auto* ctx = ibv_open_device(devs.list[i]);
    if (ctx == nullptr) {
      out.detail += (out.detail.empty() ? "" : "; ") + name + ": cannot open ("
                    + errno_text(errno) + ")";
      continue;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, port, &pa) != 0)
          continue;
        bool active = pa.state == IBV_PORT_ACTIVE;
        out.available |= active;
        out.detail += (out.detail.empty() ? "" : "; ") + name + " port " + std::to_string(port)
                      + ": " + ibv_port_state_str(pa.state) + ", "
                      + (pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand")
                      + ", mtu " + std::to_string(mtu_bytes(pa.active_mtu)) + ", max_msg "
                      + std::to_string(pa.max_msg_sz) + " B, max_sge "
                      + std::to_string(attr.max_sge) + ", max_qp_wr "
                      + std::to_string(attr.max_qp_wr);
      }
    }
    ibv_close_device(ctx);
  }
  if (!out.available && out.detail.find("ACTIVE") == std::string::npos)
    out.detail = "no active RDMA port: " + out.detail;
  return out;
}

std::vector<std::pair<std::string, uint8_t>> verbs_backend::active_ports(const std::string& device) {
  std::vector<std::pair<std::string, uint8_t>> out;
  device_list devs;
  if (!devs.why_none().empty())
    return out;
  for (int i = 0; i < devs.count; ++i) {
    std::string name = ibv_get_device_name(devs.list[i]);
    if (!device.empty() && name != device)
      continue;
    auto* ctx = ibv_open_device(devs.list[i]);
    if (ctx == nullptr)
      continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0)
      for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
          out.emplace_back(name, port);
      }
    ibv_close_device(ctx);
  }
  return out;
}

// -- set-up and tear-down ------------------------------------------------------

verbs_backend::verbs_backend(rank_id owner, verbs_options opts)
  : owner_(owner), opts_(std::move(opts)) {
  // nop
}

caf::error verbs_backend::start() {
  device_list devs;
  if (auto why = devs.why_none(); !why.empty())
    return make_error(errc::unavailable, "verbs: " + why);
  for (int i = 0; i < devs.count && ctx_ == nullptr; ++i) {
    std::string name = ibv_get_device_name(devs.list[i]);
    if (!opts_.device.empty() && name != opts_.device)
      continue;
    auto* ctx = ibv_open_device(devs.list[i]);
    if (ctx == nullptr)
      continue;
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, opts_.port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
      ibv_close_device(ctx);
      continue;
    }
    ctx_ = ctx;
    device_name_ = name;
    lid_ = pa.lid;
    active_mtu_ = static_cast<uint8_t>(pa.active_mtu);
    ethernet_ = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    limits_.max_msg_bytes = pa.max_msg_sz;
  }
  if (ctx_ == nullptr)
    return make_error(errc::unavailable,
                      "verbs: no device " + (opts_.device.empty() ? std::string{"with"} : opts_.device + " or no")
                        + " active port " + std::to_string(opts_.port));
  ibv_device_attr attr{};
  if (ibv_query_device(ctx_, &attr) != 0)
    return make_error(errc::unavailable, "verbs: ibv_query_device failed: " + errno_text(errno));
  // Enough to gather a layer's pages; larger lists only grow each WQE.
  limits_.max_sge = static_cast<uint32_t>(std::clamp(attr.max_sge, 1, 16));
  max_sge_rd_ = static_cast<uint32_t>(std::clamp(attr.max_sge_rd, 1, 16));
  limits_.max_send_wr = std::min<uint32_t>(opts_.max_send_wr,
                                           static_cast<uint32_t>(std::max(attr.max_qp_wr, 1)));
  ibv_gid gid{};
  if (ibv_query_gid(ctx_, opts_.port, opts_.gid_index, &gid) == 0)
    std::memcpy(gid_.data(), gid.raw, gid_.size());
  else if (ethernet_)
    return make_error(errc::unavailable, "verbs: RoCE port without GID index "
                                           + std::to_string(opts_.gid_index));
  if ((pd_ = ibv_alloc_pd(ctx_)) == nullptr)
    return make_error(errc::unavailable, "verbs: ibv_alloc_pd failed: " + errno_text(errno));
  if ((channel_ = ibv_create_comp_channel(ctx_)) == nullptr)
    return make_error(errc::unavailable,
                      "verbs: ibv_create_comp_channel failed: " + errno_text(errno));
  auto cq_depth = static_cast<int>(std::min<uint32_t>(opts_.cq_depth,
                                                      static_cast<uint32_t>(attr.max_cqe)));
  if ((cq_ = ibv_create_cq(ctx_, cq_depth, nullptr, channel_, 0)) == nullptr)
    return make_error(errc::unavailable, "verbs: ibv_create_cq failed: " + errno_text(errno));
  if (ibv_req_notify_cq(cq_, 0) != 0)
    return make_error(errc::unavailable, "verbs: ibv_req_notify_cq failed");
  poller_ = std::thread{[this] { completion_loop(); }};
  return caf::none;
}

verbs_backend::~verbs_backend() {
  stopping_ = true;
  if (poller_.joinable())
    poller_.join();
  for (auto& kvp : links_)
    if (kvp.second->qp != nullptr)
      ibv_destroy_qp(kvp.second->qp);
  for (auto& r : regions_)
    ibv_dereg_mr(r.mr);
  if (cq_ != nullptr)
    ibv_destroy_cq(cq_);
  if (channel_ != nullptr)
    ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr)
    ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr)
    ibv_close_device(ctx_);
}

// -- the completion thread -------------------------------------------------------

void verbs_backend::completion_loop() {
  pollfd pfd{channel_->fd, POLLIN, 0};
  std::vector<ibv_wc> wcs(64);
  std::vector<completion> batch;
  while (!stopping_) {
    // Wakes on a completion event; the timeout only bounds shutdown.
    if (::poll(&pfd, 1, 50) > 0) {
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      if (ibv_get_cq_event(channel_, &ev_cq, &ev_ctx) == 0) {
        ibv_ack_cq_events(ev_cq, 1);
        ibv_req_notify_cq(cq_, 0);
      }
    }
    batch.clear();
    // Re-armed before draining, so nothing that lands meanwhile is missed.
    for (;;) {
      int n = ibv_poll_cq(cq_, static_cast<int>(wcs.size()), wcs.data());
      if (n <= 0)
        break;
      for (int i = 0; i < n; ++i)
        batch.push_back({wcs[i].wr_id, static_cast<int>(wcs[i].status), wcs[i].vendor_err,
                         wcs[i].qp_num});
    }
    if (batch.empty())
      continue;
    std::function<void()> notify;
    {
      std::lock_guard<std::mutex> guard{done_mtx_};
      done_.insert(done_.end(), batch.begin(), batch.end());
      notify = notify_;
    }
    if (notify)
      notify();
  }
}

void verbs_backend::set_notifier(std::function<void()> notify) {
  std::lock_guard<std::mutex> guard{done_mtx_};
  notify_ = std::move(notify);
}

// -- the backend interface -------------------------------------------------------

std::string verbs_backend::name() const {
  return "verbs";
}

backend_caps verbs_backend::caps() const {
  backend_caps out;
  out.max_batch_ops = 1u << 20;
  out.reads = true;  // RDMA READ (no read grants: the NIC serves it)
  return out;
}

endpoint_desc verbs_backend::endpoint() const {
  // Domain 0: reachable from any host of the fabric.
  return endpoint_desc{"verbs", device_name_ + ":" + std::to_string(opts_.port), 0, owner_, {}, {}};
}

caf::expected<region_id> verbs_backend::register_memory(const mem_desc& mem) {
  if (mem.addr == 0 || mem.size_bytes == 0 || mem.addr + mem.size_bytes < mem.addr)
    return make_error(errc::invalid_argument, "verbs: cannot register " + range(mem.addr, mem.size_bytes));
  for (auto& r : regions_)
    if (r.mem.overlaps(mem))
      return make_error(errc::invalid_argument, "verbs: " + range(mem.addr, mem.size_bytes)
                                                  + " overlaps a registered region");
  auto* mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(mem.addr), mem.size_bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
                          | IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    std::string why = "verbs: ibv_reg_mr " + range(mem.addr, mem.size_bytes) + " failed: "
                      + errno_text(errno);
    if (mem.device_id >= 0)
      why += " (GPU " + std::to_string(mem.device_id)
             + " memory needs GPUDirect RDMA: the nvidia-peermem module)";
    return make_error(errc::unavailable, why);
  }
  regions_.push_back({next_region_, mem, mr});
  // Connected peers learn the new range (an update: a reply to no attempt).
  for (auto& kvp : links_)
    if (kvp.second->fsm.state() == verbs::link_state::ready)
      send_hello(kvp.second->peer, *kvp.second, verbs::hello::kind::reply, 0);
  return next_region_++;
}

caf::error verbs_backend::deregister_memory(region_id id) {
  auto i = std::find_if(regions_.begin(), regions_.end(), [id](auto& r) { return r.id == id; });
  if (i == regions_.end())
    return make_error(errc::not_registered, "verbs: no registration " + std::to_string(id));
  // From here on the NIC refuses writes into it (remote access error).
  ibv_dereg_mr(i->mr);
  regions_.erase(i);
  for (auto& kvp : links_)
    if (kvp.second->fsm.state() == verbs::link_state::ready)
      send_hello(kvp.second->peer, *kvp.second, verbs::hello::kind::reply, 0);
  return caf::none;
}

const verbs_backend::region* verbs_backend::local_region(uint64_t addr, uint64_t len) const {
  for (auto& r : regions_)
    if (r.mem.addr <= addr && addr - r.mem.addr <= r.mem.size_bytes
        && len <= r.mem.size_bytes - (addr - r.mem.addr))
      return &r;
  return nullptr;
}

post_result verbs_backend::post(const write_batch& batch) {
  // Strided writes move as the plain writes they stand for (no caps
  // `strided_writes`: a rank plans none for this backend alone).
  if (!batch.strided.empty())
    return post(expand_strided(batch));
  // Every batch is posted to the device and completes later (or is
  // refused now, before anything moves).
  auto id = post_batch(batch);
  if (!id)
    return post_result::failed(std::move(id.error()));
  return post_result::in_progress(*id);
}

caf::expected<xfer_id> verbs_backend::post_batch(const write_batch& batch) {
  if (batch.peer.transport != "verbs")
    return make_error(errc::invalid_argument, "verbs backend cannot reach a '"
                                                + batch.peer.transport + "' endpoint");
  if (batch.peer.owner < 0 || batch.peer.owner == owner_)
    return make_error(errc::invalid_argument,
                      "verbs: bad peer rank " + std::to_string(batch.peer.owner));
  if (batch.ops.size() > caps().max_batch_ops)
    return make_error(errc::invalid_argument, "verbs: batch of " + std::to_string(batch.ops.size())
                                                + " writes exceeds the limit");
  for (auto& op : batch.ops) {
    auto* r = op.size_bytes == 0 ? nullptr : local_region(op.src_addr, op.size_bytes);
    if (op.size_bytes != 0 && r == nullptr)
      return make_error(errc::out_of_range, "source " + range(op.src_addr, op.size_bytes)
                                              + " lies outside the sender's registered memory");
  }
  auto id = next_xfer_++;
  auto& x = xfers_[id];
  x.peer = batch.peer.owner;
  x.ops = batch.ops;
  x.src_device_id = batch.src_device_id;
  auto& l = link_to(x.peer, batch.peer.address);
  l.queue.push_back(id);
  drive(x.peer, l);
  return id;
}

post_result verbs_backend::post_read(const read_batch& batch) {
  if (batch.peer.transport != "verbs")
    return post_result::failed(make_error(errc::invalid_argument,
                                          "verbs backend cannot reach a '" + batch.peer.transport
                                            + "' endpoint"));
  if (batch.peer.owner < 0 || batch.peer.owner == owner_)
    return post_result::failed(make_error(
      errc::invalid_argument, "verbs: bad peer rank " + std::to_string(batch.peer.owner)));
  if (batch.ops.size() > caps().max_batch_ops)
    return post_result::failed(make_error(errc::invalid_argument,
                                          "verbs: batch of " + std::to_string(batch.ops.size())
                                            + " reads exceeds the limit"));
  for (auto& op : batch.ops)
    if (op.size_bytes != 0 && local_region(op.local_addr, op.size_bytes) == nullptr)
      return post_result::failed(make_error(
        errc::out_of_range, "destination " + range(op.local_addr, op.size_bytes)
                              + " lies outside the reader's registered memory"));
  auto id = next_xfer_++;
  auto& x = xfers_[id];
  x.peer = batch.peer.owner;
  x.read = true;
  x.ops = verbs::as_write_shape(batch.ops);
  x.src_device_id = batch.local_device_id;
  auto& l = link_to(x.peer, batch.peer.address);
  l.queue.push_back(id);
  drive(x.peer, l);
  return post_result::in_progress(id);
}

xfer_status verbs_backend::poll(xfer_id id, std::string& reason) {
  apply_completions();
  for (auto& kvp : links_)
    if (!kvp.second->queue.empty())
      drive(kvp.second->peer, *kvp.second);
  auto i = xfers_.find(id);
  if (i == xfers_.end()) {
    reason = "verbs: unknown transfer " + std::to_string(id);
    return xfer_status::failed;
  }
  if (i->second.status == xfer_status::failed)
    reason = i->second.reason;
  return i->second.status;
}

void verbs_backend::release(xfer_id id) {
  xfers_.erase(id);
}

std::vector<transport_control> verbs_backend::take_control() {
  std::vector<transport_control> out;
  out.swap(outbox_);
  return out;
}

caf::error verbs_backend::on_control(const transport_control& msg) {
  if (msg.transport != "verbs" || msg.to != owner_ || msg.from < 0 || msg.from == owner_)
    return make_error(errc::invalid_argument, "verbs: control message for rank "
                                                + std::to_string(msg.to) + " from rank "
                                                + std::to_string(msg.from) + " is not for this rank");
  if (!msg.to_address.empty() && msg.to_address != endpoint().address)
    return make_error(errc::invalid_argument, "verbs: control message for endpoint "
                                                + msg.to_address + ", this is "
                                                + endpoint().address);
  auto h = verbs::decode(msg.payload);
  if (!h)
    return h.error();
  auto& l = link_to(msg.from, msg.from_address);
  l.remote = std::move(h->regions);
  auto r = l.fsm.on_hello(*h, monotonic_ms());
  run_steps(msg.from, l, r);
  drive(msg.from, l);
  return caf::none;
}

// -- links -------------------------------------------------------------------------

verbs_backend::link& verbs_backend::link_to(rank_id peer, const std::string& address) {
  auto key = std::make_pair(peer, address);
  auto i = links_.find(key);
  if (i == links_.end())
    i = links_.emplace(key, std::make_unique<link>(
                              verbs::link_fsm{owner_, peer, opts_.connect_timeout_ms}, peer,
                              address))
          .first;
  return *i->second;
}

void verbs_backend::run_steps(rank_id peer, link& l, const verbs::link_fsm::result& r) {
  using k = verbs::link_step::kind;
  for (auto& step : r.steps) {
    caf::error err;
    switch (step.what) {
      case k::create_qp: err = create_qp(l); break;
      case k::destroy_qp: destroy_qp(peer, l, r.reason); break;
      case k::connect_qp: err = connect_qp(l, step.remote); break;
      case k::send_request: send_hello(peer, l, verbs::hello::kind::request, step.epoch); break;
      case k::send_reply: send_hello(peer, l, verbs::hello::kind::reply, step.epoch); break;
    }
    if (err) {
      fail_link(peer, l, "verbs link to rank " + std::to_string(peer) + ": " + describe(err));
      return;
    }
  }
  if (r.verdict == verbs::link_verdict::fail && !r.reason.empty()) {
    for (auto xid : l.queue)
      if (auto i = xfers_.find(xid); i != xfers_.end() && i->second.status == xfer_status::in_progress) {
        i->second.status = xfer_status::failed;
        i->second.reason = r.reason;
      }
    l.queue.clear();
  }
}

caf::error verbs_backend::create_qp(link& l) {
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = limits_.max_send_wr;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = limits_.max_sge;
  ia.cap.max_recv_sge = 1;
  auto* qp = ibv_create_qp(pd_, &ia);
  if (qp == nullptr)
    return make_error(errc::unavailable, "ibv_create_qp failed: " + errno_text(errno));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = opts_.port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
                                       | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    ibv_destroy_qp(qp);
    return make_error(errc::unavailable, "ibv_modify_qp to INIT failed: " + errno_text(rc));
  }
  // The driver may grant less than asked.
  limits_.max_sge = std::min(limits_.max_sge, std::max<uint32_t>(ia.cap.max_send_sge, 1));
  static thread_local std::mt19937 rng{std::random_device{}()};
  l.qp = qp;
  l.local.qpn = qp->qp_num;
  l.local.psn = rng() & 0xffffff;
  l.local.lid = lid_;
  l.local.gid = gid_;
  l.local.mtu = active_mtu_;
  l.window = std::make_unique<verbs::send_window>(
    std::min(limits_.max_send_wr, std::max<uint32_t>(ia.cap.max_send_wr, 1)), opts_.signal_every);
  return caf::none;
}

caf::error verbs_backend::connect_qp(link& l, const verbs::qp_address& remote) {
  if (l.qp == nullptr)
    return make_error(errc::invalid_argument, "no queue pair to connect");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(active_mtu_, remote.mtu));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = opts_.port;
  a.ah_attr.dlid = remote.lid;
  bool any_gid = std::any_of(remote.gid.begin(), remote.gid.end(), [](uint8_t b) { return b != 0; });
  if (ethernet_ || any_gid) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(opts_.gid_index);
    a.ah_attr.grh.hop_limit = 64;
  }
  if (int rc = ibv_modify_qp(l.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU
                                         | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
                                         | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0)
    return make_error(errc::unavailable, "ibv_modify_qp " + hex(l.qp->qp_num)
                                           + " to RTR failed: " + errno_text(rc));
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;  // 4.096 us * 2^14 = 67 ms per retry
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = l.local.psn;
  a.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(l.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT
                                         | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN
                                         | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0)
    return make_error(errc::unavailable, "ibv_modify_qp " + hex(l.qp->qp_num)
                                           + " to RTS failed: " + errno_text(rc));
  return caf::none;
}

void verbs_backend::destroy_qp(rank_id peer, link& l, const std::string& why) {
  // Work already posted on this queue pair may have been flushed: it can
  // never count as done (the window's credits are reset below).
  for (auto xid : l.queue)
    if (auto i = xfers_.find(xid);
        i != xfers_.end() && i->second.status == xfer_status::in_progress && i->second.next_wr > 0) {
      i->second.status = xfer_status::failed;
      i->second.reason = "verbs queue pair to rank " + std::to_string(peer) + " was replaced with "
                         + "writes in flight" + (why.empty() ? std::string{} : ": " + why);
    }
  if (l.qp != nullptr)
    ibv_destroy_qp(l.qp);
  l.qp = nullptr;
  if (l.window)
    l.window->reset();
  // Completions still in flight for it change nothing now.
  for (auto i = signalled_.begin(); i != signalled_.end();)
    i = i->second.to == &l ? signalled_.erase(i) : std::next(i);
}

void verbs_backend::send_hello(rank_id peer, link& l, verbs::hello::kind what, uint64_t epoch) {
  verbs::hello h;
  h.what = what;
  h.epoch = epoch;
  h.qp = l.local;
  for (auto& r : regions_)
    h.regions.push_back({r.mem.addr, r.mem.size_bytes, r.mr->rkey});
  if (h.qp.qpn == 0)
    return;  // no queue pair (an update before any connection)
  outbox_.push_back(transport_control{"verbs", owner_, peer, verbs::encode(h), l.address,
                                       endpoint().address});
}

void verbs_backend::fail_link(rank_id peer, link& l, const std::string& reason) {
  transport_warning(reason);
  for (auto xid : l.queue)
    if (auto i = xfers_.find(xid); i != xfers_.end() && i->second.status == xfer_status::in_progress) {
      i->second.status = xfer_status::failed;
      i->second.reason = reason;
    }
  l.queue.clear();
  auto r = l.fsm.on_qp_error(reason);
  for (auto& step : r.steps)
    if (step.what == verbs::link_step::kind::destroy_qp)
      destroy_qp(peer, l, reason);
}

// -- moving bytes ------------------------------------------------------------------

caf::error verbs_backend::plan(const link& l, xfer& x) const {
  auto remote_of = [&l](uint64_t addr, uint64_t len) -> int64_t {
    for (size_t i = 0; i < l.remote.size(); ++i) {
      auto& r = l.remote[i];
      if (r.addr <= addr && addr - r.addr <= r.size_bytes && len <= r.size_bytes - (addr - r.addr))
        return static_cast<int64_t>(i);
    }
    return -1;
  };
  // Every remote range first: a bad one fails the batch before a byte
  // moves (a write's destination, a read's source).
  for (auto& op : x.ops)
    if (op.size_bytes != 0 && remote_of(op.dst_addr, op.size_bytes) < 0)
      return make_error(errc::out_of_range, std::string{x.read ? "source " : "destination "}
                                              + range(op.dst_addr, op.size_bytes)
                                              + " lies outside rank " + std::to_string(x.peer)
                                              + "'s registered memory");
  auto local_index = [this](uint64_t addr) -> int64_t {
    auto* r = local_region(addr, 1);
    return r == nullptr ? -1 : static_cast<int64_t>(r - regions_.data());
  };
  // A read's ops are already turned around (local: src, remote: dst); only
  // its scatter list is bounded by max_sge_rd.
  auto limits = limits_;
  if (x.read)
    limits.max_sge = std::min(limits.max_sge, max_sge_rd_);
  auto planned = verbs::plan_work_requests(
    x.ops, limits, local_index, [&](uint64_t addr) { return remote_of(addr, 1); });
  if (!planned)
    return planned.error();
  x.wrs = std::move(*planned);
  for (auto& wr : x.wrs)
    x.rkeys.push_back(l.remote[static_cast<size_t>(remote_of(wr.remote_addr, wr.bytes))].rkey);
  x.ops.clear();
  x.ops.shrink_to_fit();
  return caf::none;
}

void verbs_backend::drive(rank_id peer, link& l) {
  if (l.queue.empty())
    return;
  if (l.fsm.state() != verbs::link_state::ready) {
    auto r = l.fsm.need(monotonic_ms());
    run_steps(peer, l, r);
    if (l.fsm.state() != verbs::link_state::ready)
      return;
  }
  // Build as many work requests as the send window takes, in batch order.
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;
  std::vector<size_t> sge_start;
  auto room = l.window->room();
  wrs.reserve(room);
  for (auto xid : l.queue) {
    if (room == 0)
      break;
    auto xi = xfers_.find(xid);
    if (xi == xfers_.end() || xi->second.status != xfer_status::in_progress)
      continue;  // released early, or failed before posting
    auto& x = xi->second;
    if (x.wrs.empty() && !x.ops.empty()) {
      if (auto err = plan(l, x)) {
        x.status = xfer_status::failed;
        x.reason = describe(err);
        continue;
      }
    }
    while (x.next_wr < x.wrs.size() && room > 0) {
      auto& plan = x.wrs[x.next_wr];
      uint64_t seq = 0;
      bool last = x.next_wr + 1 == x.wrs.size();
      bool signalled = l.window->take(last, seq);
      --room;
      ibv_send_wr wr{};
      wr.opcode = x.read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = plan.remote_addr;
      wr.wr.rdma.rkey = x.rkeys[x.next_wr];
      wr.num_sge = static_cast<int>(plan.sges.size());
      if (signalled) {
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr_id = next_wr_id_++;
        signalled_[wr.wr_id] = {&l, l.qp->qp_num, seq};
      }
      sge_start.push_back(sges.size());
      for (auto& s : plan.sges)
        sges.push_back({s.addr, s.length, local_region(s.addr, s.length)->mr->lkey});
      wrs.push_back(wr);
      x.last_seq = seq;
      ++x.next_wr;
    }
    if (x.next_wr < x.wrs.size())
      break;  // window full: later batches wait behind this one
  }
  if (!wrs.empty()) {
    // Link the list only now: the vectors no longer move.
    for (size_t i = 0; i < wrs.size(); ++i) {
      wrs[i].sg_list = sges.data() + sge_start[i];
      wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(l.qp, wrs.data(), &bad); rc != 0) {
      fail_link(peer, l, "verbs: ibv_post_send on QP " + hex(l.qp->qp_num) + " to rank "
                           + std::to_string(peer) + " failed: " + errno_text(rc)
                           + "; the queue pair is re-established for later rooms");
      return;
    }
  }
  settle(l);
}

void verbs_backend::settle(link& l) {
  // Batches leave the queue in order once their last work request is
  // complete (or they failed before posting anything).
  while (!l.queue.empty()) {
    auto i = xfers_.find(l.queue.front());
    if (i == xfers_.end()) {
      l.queue.pop_front();
      continue;
    }
    auto& x = i->second;
    if (x.status == xfer_status::in_progress && x.ops.empty() && x.next_wr == x.wrs.size()
        && x.last_seq <= l.window->completed_seq())
      x.status = xfer_status::done;
    if (x.status == xfer_status::in_progress)
      break;
    l.queue.pop_front();
  }
}

void verbs_backend::apply_completions() {
  std::vector<completion> batch;
  {
    std::lock_guard<std::mutex> guard{done_mtx_};
    batch.swap(done_);
  }
  for (auto& c : batch) {
    auto s = signalled_.find(c.wr_id);
    if (s == signalled_.end())
      continue;  // its queue pair was torn down already
    auto info = s->second;
    signalled_.erase(s);
    auto& l = *info.to;
    if (l.qp == nullptr || l.qp->qp_num != c.qp_num)
      continue;
    if (c.status != IBV_WC_SUCCESS) {
      fail_link(l.peer, l,
                "verbs RDMA WRITE to rank " + std::to_string(l.peer) + " (" + l.address + ") failed: "
                  + ibv_wc_status_str(static_cast<ibv_wc_status>(c.status)) + " (status "
                  + std::to_string(c.status) + ", vendor error " + hex(c.vendor_err) + ") on QP "
                  + hex(c.qp_num) + "; the queue pair is torn down and re-established for later rooms");
      continue;
    }
    l.window->completed(info.seq);
    settle(l);
  }
}

} // namespace kvroom::detail
