#include "kvroom/transport/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/bulk_copy.hpp"
#include "kvroom/transport/cuda/cuda_error.hpp"
#include "kvroom/transport/cuda/device_route.hpp"
#include "kvroom/transport/host_id.hpp"
#include "kvroom/transport/log.hpp"
#include "kvroom/transport/region_table.hpp"

namespace kvroom::detail {

namespace {

caf::error cuda_fail(const std::string& what, cudaError_t err) {
  return make_error(errc::unavailable, "cuda: " + what + ": " + cuda_text(err));
}

/// The base of the allocation `ptr` lies in, through the driver's
/// cuMemGetAddressRange fetched from the runtime (no libcuda link needed;
/// its signature spelled out so the driver API header is not needed:
/// CUresult is an int-sized enum with CUDA_SUCCESS = 0, CUdeviceptr a
/// 64-bit integer).
bool allocation_base(uint64_t ptr, uint64_t& base) {
  using fn_t = int (*)(unsigned long long*, size_t*, unsigned long long);
  static fn_t fn = [] {
    void* sym = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &sym, 12000,
                                         cudaEnableDefault, &found)
          != cudaSuccess
        || found != cudaDriverEntryPointSuccess)
      return fn_t{nullptr};
    return reinterpret_cast<fn_t>(sym);
  }();
  if (fn == nullptr)
    return false;
  unsigned long long b = 0;
  size_t size = 0;
  if (fn(&b, &size, static_cast<unsigned long long>(ptr)) != 0)
    return false;
  base = static_cast<uint64_t>(b);
  return true;
}

} // namespace

backend_availability cuda_backend::probe() {
  backend_availability out{"cuda", true, false, {}};
  int n = 0;
  if (auto err = cudaGetDeviceCount(&n); err != cudaSuccess) {
    out.detail = (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                    ? std::string{err == cudaErrorNoDevice ? "no GPU" : "no driver"}
                    : std::string{"unusable"})
                 + " (" + cudaGetErrorName(err) + ")";
    cudaGetLastError();
    return out;
  }
  if (n == 0) {
    out.detail = "no GPU (cudaGetDeviceCount returned 0)";
    return out;
  }
  int driver = 0;
  int runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  out.available = true;
  out.detail = "driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10)
               + ", runtime " + std::to_string(runtime / 1000) + "."
               + std::to_string(runtime % 1000 / 10);
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
      continue;
    out.detail += "; GPU " + std::to_string(d) + ": " + prop.name + ", "
                  + std::to_string(prop.totalGlobalMem >> 30) + " GiB, sm_"
                  + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  return out;
}

cuda_backend::cuda_backend(rank_id owner) : owner_(owner) {
  // One token per process: ranks in this process address each other's
  // memory directly, ranks elsewhere go through IPC handles.
  static const std::string process_token = [] {
    std::random_device rd;
    return std::to_string(::getpid()) + "-" + std::to_string(rd());
  }();
  token_ = process_token;
}

caf::error cuda_backend::start() {
  int n = 0;
  if (auto err = cudaGetDeviceCount(&n); err != cudaSuccess) {
    cudaGetLastError();
    return cuda_fail("cudaGetDeviceCount", err);
  }
  if (n == 0)
    return make_error(errc::unavailable, "cuda: no GPU");
  return caf::none;
}

cuda_backend::~cuda_backend() {
  for (auto& kvp : xfers_)
    if (kvp.second.event != nullptr) {
      cudaEventSynchronize(kvp.second.event);
      cudaEventDestroy(kvp.second.event);
    }
  for (auto& kvp : spare_events_)
    for (auto* ev : kvp.second)
      cudaEventDestroy(ev);
  for (auto& kvp : streams_) {
    cudaStreamSynchronize(kvp.second);
    cudaStreamDestroy(kvp.second);
  }
  for (auto& kvp : opened_) {
    cudaSetDevice(kvp.first.second);
    cudaIpcCloseMemHandle(reinterpret_cast<void*>(kvp.second));
  }
}

std::string cuda_backend::name() const {
  return "cuda";
}

backend_caps cuda_backend::caps() const {
  backend_caps out;
  out.max_batch_ops = 1u << 20;
  out.strided_writes = true; // one cudaMemcpy2DAsync each
  return out;
}

endpoint_desc cuda_backend::endpoint() const {
  endpoint_desc out{"cuda", token_, host_domain(), owner_, {}, {}};
  for (auto& r : regions_)
    out.device.push_back(r.advertised);
  return out;
}

caf::expected<region_id> cuda_backend::register_memory(const mem_desc& mem) {
  auto where = region_table::range(mem.addr, mem.size_bytes);
  if (mem.addr == 0 || mem.size_bytes == 0 || mem.addr + mem.size_bytes < mem.addr)
    return make_error(errc::invalid_argument, "cuda: cannot register " + where);
  for (auto& r : regions_)
    if (r.mem.overlaps(mem))
      return make_error(errc::invalid_argument, "cuda: " + where + " overlaps a registered region");
  device_region adv{mem.addr, mem.size_bytes, mem.device_id, {}, 0};
  if (mem.device_id >= 0) {
    cudaPointerAttributes attr{};
    if (auto err = cudaPointerGetAttributes(&attr, reinterpret_cast<void*>(mem.addr));
        err != cudaSuccess) {
      cudaGetLastError();
      return cuda_fail(where + " is not CUDA memory", err);
    }
    if (attr.type != cudaMemoryTypeDevice || attr.device != mem.device_id)
      return make_error(errc::invalid_argument,
                        "cuda: " + where + " is not memory of GPU " + std::to_string(mem.device_id)
                          + " (type " + std::to_string(static_cast<int>(attr.type)) + ", device "
                          + std::to_string(attr.device) + ")");
    // Other processes on this host map the allocation through its handle.
    cudaIpcMemHandle_t handle;
    uint64_t base = 0;
    if (cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(mem.addr)) == cudaSuccess
        && allocation_base(mem.addr, base)) {
      adv.ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
      adv.offset = mem.addr - base;
    } else {
      cudaGetLastError();
      transport_warning("cuda: " + where + " has no IPC handle; only ranks in this process reach it");
    }
  }
  regions_.push_back({next_region_, mem, std::move(adv)});
  return next_region_++;
}

caf::error cuda_backend::deregister_memory(region_id id) {
  auto i = std::find_if(regions_.begin(), regions_.end(), [id](auto& r) { return r.id == id; });
  if (i == regions_.end())
    return make_error(errc::not_registered, "cuda: no registration " + std::to_string(id));
  regions_.erase(i);
  return caf::none;
}

caf::expected<uint64_t> cuda_backend::ipc_base(const device_region& r, int device) {
  auto key = std::make_pair(r.ipc_handle, device);
  if (auto i = opened_.find(key); i != opened_.end())
    return i->second;
  if (r.ipc_handle.size() != sizeof(cudaIpcMemHandle_t))
    return make_error(errc::invalid_argument, "cuda: malformed IPC handle ("
                                                + std::to_string(r.ipc_handle.size()) + " bytes)");
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, r.ipc_handle.data(), sizeof(handle));
  void* base = nullptr;
  if (auto err = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
      err != cudaSuccess) {
    cudaGetLastError();
    return cuda_fail("cudaIpcOpenMemHandle", err);
  }
  opened_.emplace(key, reinterpret_cast<uint64_t>(base));
  return reinterpret_cast<uint64_t>(base);
}

caf::expected<CUstream_st*> cuda_backend::stream_for(rank_id peer, int device) {
  auto key = std::make_pair(peer, device);
  if (auto i = streams_.find(key); i != streams_.end())
    return i->second;
  cudaStream_t s = nullptr;
  if (auto err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); err != cudaSuccess)
    return cuda_fail("cudaStreamCreateWithFlags", err);
  streams_.emplace(key, s);
  return s;
}

void cuda_backend::enable_peer_access(int from, int to) {
  if (from < 0 || to < 0 || from == to || peer_access_.count({from, to}) != 0)
    return;
  peer_access_.insert({from, to});
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can != 0) {
    auto err = cudaDeviceEnablePeerAccess(to, 0);
    if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
      transport_warning("cuda: peer access GPU " + std::to_string(from) + " -> "
                        + std::to_string(to) + ": " + cuda_text(err));
  }
  // Without peer access cudaMemcpyDefault stages through the host.
  cudaGetLastError();
}

post_result cuda_backend::post(const write_batch& batch) {
  // Every batch is posted to the device and completes later (or is
  // refused now, before anything moves).
  auto id = post_batch(batch);
  if (!id)
    return post_result::failed(std::move(id.error()));
  return post_result::in_progress(*id);
}

namespace {

/// Pitches cudaMemcpy2DAsync takes (`cudaDeviceProp::memPitch`, 2^31 - 1
/// on the GPUs we know); a strided write beyond it, or whose rows overlap,
/// is copied row by row, as one the call refuses.
constexpr uint64_t max_pitch = (uint64_t{1} << 31) - 1;

} // namespace

caf::expected<xfer_id> cuda_backend::post_batch(const write_batch& batch) {
  if (batch.peer.transport != "cuda")
    return make_error(errc::invalid_argument,
                      "cuda backend cannot reach a '" + batch.peer.transport + "' endpoint");
  if (batch.peer.domain != host_domain())
    return make_error(errc::invalid_argument, "cuda: rank " + std::to_string(batch.peer.owner)
                                                + " is on another host");
  if (batch.descriptors() > caps().max_batch_ops)
    return make_error(errc::invalid_argument, "cuda: batch too large");
  bool same_process = batch.peer.address == token_;
  int device = batch.src_device_id >= 0 ? batch.src_device_id
                                        : std::max(batch.dst_device_id, 0);
  // Every write as rows (a plain one: one row), strided ones first (as
  // expand_strided orders them), each with its span on both sides.
  // Resolve every one before enqueueing one: a bad batch moves nothing.
  std::vector<strided_write> copies;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  copies.reserve(batch.descriptors());
  spans.reserve(batch.descriptors());
  for (size_t i = 0; i < batch.strided.size(); ++i) {
    uint64_t src_span = 0, dst_span = 0;
    if (auto err = strided_spans(batch.strided[i], i, src_span, dst_span))
      return err;
    copies.push_back(batch.strided[i]);
    spans.emplace_back(src_span, dst_span);
  }
  for (auto& op : batch.ops) {
    copies.push_back({op.src_addr, op.dst_addr, op.size_bytes, 1, op.size_bytes, op.size_bytes});
    spans.emplace_back(op.size_bytes, op.size_bytes);
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    auto& c = copies[i];
    auto [src_len, dst_len] = spans[i];
    bool src_ok = c.size_bytes == 0
                  || std::any_of(regions_.begin(), regions_.end(), [&](auto& r) {
                       return r.mem.covers(c.src_addr, src_len, r.mem.device_id);
                     });
    if (!src_ok)
      return make_error(errc::out_of_range, "source " + region_table::range(c.src_addr, src_len)
                                              + " is outside the sender's registered memory");
    auto target = route_device_write(batch.peer, same_process, c.dst_addr, dst_len);
    if (!target)
      return target.error();
    if (!target->through_ipc)
      continue;
    if (auto err = cudaSetDevice(device); err != cudaSuccess)
      return cuda_fail("cudaSetDevice", err);
    auto base = ipc_base(batch.peer.device[target->region], device);
    if (!base)
      return base.error();
    c.dst_addr = *base + target->ipc_offset;
  }
  if (auto err = cudaSetDevice(device); err != cudaSuccess)
    return cuda_fail("cudaSetDevice", err);
  if (same_process)
    enable_peer_access(device, batch.dst_device_id);
  auto stream = stream_for(batch.peer.owner, device);
  if (!stream)
    return stream.error();
  auto id = next_xfer_++;
  auto& x = xfers_[id];
  auto enqueue = [&](const strided_write& c) {
    if (c.count == 1)
      return cudaMemcpyAsync(reinterpret_cast<void*>(c.dst_addr),
                             reinterpret_cast<const void*>(c.src_addr), c.size_bytes,
                             cudaMemcpyDefault, *stream);
    if (c.src_stride >= c.size_bytes && c.dst_stride >= c.size_bytes
        && c.src_stride <= max_pitch && c.dst_stride <= max_pitch) {
      // One call for a buffer's token rows: head slicing of NHD pages as
      // cudaMemcpyAsync a row was 16,384 calls a realistic chunk.
      auto err = cudaMemcpy2DAsync(reinterpret_cast<void*>(c.dst_addr), c.dst_stride,
                                   reinterpret_cast<const void*>(c.src_addr), c.src_stride,
                                   c.size_bytes, c.count, cudaMemcpyDefault, *stream);
      if (err == cudaSuccess)
        return err;
      // Refused as a whole (its arguments are checked before anything is
      // enqueued): the same rows one by one, which any device takes.
      cudaGetLastError();
    }
    for (uint64_t k = 0; k < c.count; ++k)
      if (auto err = cudaMemcpyAsync(reinterpret_cast<void*>(c.dst_addr + k * c.dst_stride),
                                     reinterpret_cast<const void*>(c.src_addr + k * c.src_stride),
                                     c.size_bytes, cudaMemcpyDefault, *stream);
          err != cudaSuccess)
        return err;
    return cudaSuccess;
  };
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].size_bytes == 0)
      continue;
    if (auto err = enqueue(copies[i]); err != cudaSuccess) {
      // Earlier copies are enqueued already: the batch fails, it is not refused.
      cudaGetLastError();
      x.status = xfer_status::failed;
      x.reason = "cuda: copy " + std::to_string(i) + " to rank "
                 + std::to_string(batch.peer.owner) + ": " + cuda_text(err);
      break;
    }
  }
  auto ev = take_event(device);
  if (!ev) {
    x.status = xfer_status::failed;
    x.reason = describe(ev.error());
    return id;
  }
  x.event = *ev;
  x.device = device;
  if (auto err = cudaEventRecord(*ev, *stream); err != cudaSuccess && x.reason.empty()) {
    x.status = xfer_status::failed;
    x.reason = "cuda: cudaEventRecord: " + cuda_text(err);
  }
  return id;
}

xfer_status cuda_backend::poll(xfer_id id, std::string& reason) {
  auto i = xfers_.find(id);
  if (i == xfers_.end()) {
    reason = "cuda: unknown transfer " + std::to_string(id);
    return xfer_status::failed;
  }
  auto& x = i->second;
  if (x.status == xfer_status::in_progress) {
    auto err = cudaEventQuery(x.event);
    if (err == cudaSuccess) {
      x.status = xfer_status::done;
    } else if (err != cudaErrorNotReady) {
      cudaGetLastError();
      x.status = xfer_status::failed;
      x.reason = "cuda: copy failed: " + cuda_text(err);
    }
  }
  if (x.status == xfer_status::failed)
    reason = x.reason;
  return x.status;
}

void cuda_backend::release(xfer_id id) {
  auto i = xfers_.find(id);
  if (i == xfers_.end())
    return;
  if (auto* ev = i->second.event) {
    // A batch released before `poll` saw it done (failed, or given up) may
    // still have copies queued: they finish first, and then its event has
    // completed, as a spare must have.
    if (i->second.status != xfer_status::done)
      cudaEventSynchronize(ev);
    give_event(ev, i->second.device);
  }
  xfers_.erase(i);
}

// Measured on an H100 (`kvroom-bench bandwidth --transports=cuda`, one write
// a batch, 8 in flight, old and new binaries alternated twice): an event
// created and destroyed per batch held one-write batches to 0.58-0.60 of a
// cudaMemcpy of the same write, 4 KiB to 4 MiB; spare events, 0.74-0.76.
caf::expected<CUevent_st*> cuda_backend::take_event(int device) {
  auto& spares = spare_events_[device];
  if (!spares.empty()) {
    auto* ev = spares.back();
    spares.pop_back();
    return ev;
  }
  cudaEvent_t ev = nullptr;
  if (auto err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); err != cudaSuccess) {
    cudaGetLastError();
    return cuda_fail("cudaEventCreate", err);
  }
  return ev;
}

void cuda_backend::give_event(CUevent_st* event, int device) {
  auto& spares = spare_events_[device];
  if (spares.size() < max_spare_events)
    spares.push_back(event);
  else
    cudaEventDestroy(event);
}

} // namespace kvroom::detail
