// Bandwidth per transport over block and batch sizes, each point against a
// baseline measured in the same run between the same two buffers:
//   local, shm, verbs: a single-thread memcpy of the same writes;
//   tcp:  a plain blocking socket stream of the same bytes over loopback;
//   cuda: a synchronous device-to-device cudaMemcpy of the same writes.
// Then the realistic KV layout end to end through rooms.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/kit/testkit.hpp"
#include "kvroom/kit/engine.hpp"
#include "kvroom/api/backend.hpp"

#include "benches.hpp"
#include "report.hpp"
#include "room_driver.hpp"
#include "shapes.hpp"

namespace kvroom::bench {

namespace {

class bandwidth_config : public bench_config {
public:
  std::string blocks = "4096,16384,65536,262144,1048576,4194304";
  std::string batches = "1,8,32,128";
  /// Empty: every transport of the table (those not present here report
  /// skipped, with the reason).
  std::string transports;
  bool skip_realistic = false;
  /// Which parts run (all by default): points (the blocks x batches table),
  /// realistic, sliced, scattered, paths, integrity. One part alone is what
  /// a profile of it wants.
  std::string parts = "points,realistic,sliced,scattered,paths,integrity";
  /// Each point and its baseline are measured this many times in turn and
  /// the best of each kept: on a shared 2-core machine one window of either
  /// can lose a fifth to a neighbour (tcp at 4 MiB x 8 read 0.82-1.39 of
  /// its socket across runs of one day).
  int64_t alternations = 2;
  bool runs(const std::string& part) const {
    if (skip_realistic && (part == "realistic" || part == "sliced" || part == "scattered"))
      return false;
    return ("," + parts + ",").find("," + part + ",") != std::string::npos;
  }
  bandwidth_config() {
    opt_group{custom_options_, "global"}
      .add(blocks, "blocks", "block sizes in bytes, comma-separated")
      .add(batches, "batches", "writes per batch, comma-separated")
      .add(transports, "transports",
           "comma-separated, of the transport table (default: all; those present run)")
      .add(skip_realistic, "skip-realistic",
           "skip the realistic KV layout through rooms (realistic, sliced, scattered)")
      .add(parts, "parts",
           "parts to run, comma-separated: points,realistic,sliced,scattered,paths,integrity")
      .add(alternations, "alternations",
           "points: each point and its baseline measured this many times in turn, the best "
           "of each kept");
  }
};

/// One side's buffer where the transport needs it, by its row of the
/// transport table: GPU 0 for a GPU transport (one "auto" never picks for
/// host memory), a /dev/shm segment for one that registers only shared
/// segments (shm), else the heap.
class buffer {
public:
  static constexpr int gpu = 0;

  buffer(const std::string& transport, size_t n) : size_(n) {
    auto* row = find_transport(transport);
    if (row && row->moves_device() && row->host_nearness < 0) {
      auto p = device_alloc(gpu, n);
      if (!p) {
        error_ = describe(p.error());
        return;
      }
      addr_ = *p;
      device_ = gpu;
      (void) device_fill(gpu, addr_, 1, n);
      return;
    }
    void* p = nullptr;
    if (row && !row->registers_any_host) {
      shm_name_ = "/kvroom-bench-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++);
      int fd = ::shm_open(shm_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(n)) != 0) {
        error_ = "cannot create " + shm_name_;
        if (fd >= 0)
          ::close(fd);
        return;
      }
      p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) {
        error_ = "cannot map " + shm_name_;
        return;
      }
    } else {
      p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    }
    std::memset(p, 1, n);
    addr_ = reinterpret_cast<uint64_t>(p);
  }

  ~buffer() {
    if (addr_ == 0)
      return;
    if (device_ >= 0) {
      device_free(device_, addr_);
    } else if (!shm_name_.empty()) {
      ::munmap(reinterpret_cast<void*>(addr_), size_);
      ::shm_unlink(shm_name_.c_str());
    } else {
      std::free(reinterpret_cast<void*>(addr_));
    }
  }

  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  uint64_t addr() const { return addr_; }
  int32_t device() const { return device_; }
  const std::string& error() const { return error_; }

private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  uint64_t addr_ = 0;
  size_t size_ = 0;
  int32_t device_ = -1;
  std::string shm_name_;
  std::string error_;
};

bool send_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    auto k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    auto k = ::recv(fd, c, n, 0);
    if (k <= 0)
      return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

/// GB/s of a plain blocking TCP stream over loopback carrying `ops`' bytes
/// from their sources straight into their destinations, for `seconds`: the
/// ceiling of any socket transport between these two buffers.
double socket_stream_gbps(const std::vector<write_op>& ops, double seconds) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::listen(lfd, 1) != 0 || ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return 0;
  int out = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(out, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return 0;
  int in = ::accept(lfd, nullptr, nullptr);
  ::close(lfd);
  int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  uint64_t per_round = 0;
  for (auto& op : ops)
    per_round += op.size_bytes;
  std::atomic<uint64_t> rounds_sent{0};
  std::atomic<bool> done_sending{false};
  uint64_t received_rounds = 0;
  std::thread reader{[&] {
    for (;;) {
      if (done_sending && received_rounds == rounds_sent)
        return;
      for (auto& op : ops)
        if (!recv_all(in, reinterpret_cast<void*>(op.dst_addr), op.size_bytes))
          return;
      ++received_rounds;
    }
  }};
  auto t0 = clock_type::now();
  while (since(t0) < seconds) {
    for (auto& op : ops)
      send_all(out, reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
    ++rounds_sent;
  }
  done_sending = true;
  ::shutdown(out, SHUT_WR);
  reader.join();
  auto secs = since(t0);
  ::close(out);
  ::close(in);
  return static_cast<double>(received_rounds * per_round) / secs / 1e9;
}

struct point {
  double gbps = 0;
  double baseline_gbps = 0;
  std::string baseline;
  std::string skipped;
};

/// Moves `batch` writes of `block` bytes between two ranks' backends of
/// `name` for `seconds`, then runs the baseline over the same buffers.
point measure(const std::string& name, int64_t block, int64_t batch, double seconds,
              const std::string& tcp_hosts = {}) {
  point out;
  auto bytes = static_cast<uint64_t>(block) * static_cast<uint64_t>(batch);
  backend_config sc{name, 1, {}}, rc{name, 2, {}};
  if (!tcp_hosts.empty())
    sc.tcp_host = rc.tcp_host = tcp_hosts;
  auto sender = make_backend(sc);
  auto receiver = make_backend(rc);
  if (!sender || !receiver) {
    out.skipped = describe(sender ? receiver.error() : sender.error());
    return out;
  }
  // Several addresses: the sender's path layer spreads the batches over
  // them, as a rank's does (slices of 256 KiB or more).
  if (!tcp_hosts.empty())
    *sender = std::make_unique<multipath_backend>(std::move(*sender), path_options{});
  buffer src{name, bytes}, dst{name, bytes};
  if (!src.error().empty() || !dst.error().empty()) {
    out.skipped = src.error().empty() ? dst.error() : src.error();
    return out;
  }
  auto& s = **sender;
  auto& r = **receiver;
  if (auto a = s.register_memory({src.addr(), bytes, src.device()}); !a) {
    out.skipped = describe(a.error());
    return out;
  }
  // Every batch here is room 0 of sender rank 1: granted all of dst, as a
  // decode room grants its pages (receivers that check grants: tcp).
  if (!r.grant(0, 1, {byte_range{dst.addr(), bytes}})) {
    out.skipped = "the receiver's grant table is full";
    return out;
  }
  if (auto b = r.register_memory({dst.addr(), bytes, dst.device()}); !b) {
    out.skipped = describe(b.error());
    return out;
  }
  write_batch wb;
  wb.peer = r.endpoint();
  if (!tcp_hosts.empty()) {
    auto all = r.endpoints();
    wb.alternates.assign(all.begin() + 1, all.end());
  }
  wb.src_device_id = src.device();
  wb.dst_device_id = dst.device();
  for (int64_t i = 0; i < batch; ++i)
    wb.ops.push_back({src.addr() + static_cast<uint64_t>(i * block),
                      dst.addr() + static_cast<uint64_t>(i * block), static_cast<uint64_t>(block)});
  // Connection messages (verbs) are carried by hand here; actors do it in
  // kvroom.
  auto pump = [&] {
    for (auto& m : s.take_control())
      (void) r.on_control(m);
    for (auto& m : r.take_control())
      (void) s.on_control(m);
  };
  // Up to `depth` batches in flight, as a transfer worker keeps them for
  // many rooms: a transport that acks asynchronously (tcp, verbs) is not
  // measured one round trip at a time.
  constexpr size_t depth = 8;
  // One batch before the clock starts: what happens once per peer (a tcp
  // connection and its handshake, the receiver's shm segments mapped and
  // faulted in) is not what a point measures. Measured: shm 1 MiB x 32 in a
  // 0.1 s point read 0.29 GB/s with it inside, 19 GB/s at 0.5 s.
  {
    auto res = s.post(wb);
    std::string reason;
    auto until = clock_type::now() + std::chrono::seconds(30);
    while (res.status == xfer_status::would_block && clock_type::now() < until)
      res = s.post(wb);
    if (res.status == xfer_status::failed) {
      out.skipped = describe(res.error);
      return out;
    }
    if (res.status == xfer_status::in_progress) {
      auto st = xfer_status::in_progress;
      while (st == xfer_status::in_progress && clock_type::now() < until) {
        pump();
        st = s.poll(res.id, reason);
      }
      s.release(res.id);
      if (st != xfer_status::done) {
        out.skipped = st == xfer_status::in_progress ? "the first batch did not finish in 30 s"
                                                     : reason;
        return out;
      }
    }
  }
  std::deque<xfer_id> inflight;
  uint64_t moved = 0;
  // The clock is read every ~1 MiB posted, as the memcpy baseline reads it.
  // Counted down, not `posts % stride`: a division per post measured ~5 %
  // of a 4 KiB x 1 point's samples, a cost the baseline's loop never paid.
  auto stride = clock_stride(bytes);
  uint64_t until_clock = 0;
  bool admitting = true;
  auto t0 = clock_type::now();
  for (;;) {
    if (admitting && until_clock == 0) {
      admitting = since(t0) < seconds;
      until_clock = stride;
    }
    if (!admitting && inflight.empty())
      break;
    if (admitting && inflight.size() < depth) {
      auto res = s.post(wb);
      --until_clock;
      if (res.status == xfer_status::failed) {
        out.skipped = describe(res.error);
        return out;
      }
      if (res.status == xfer_status::done) {
        moved += bytes;
        continue;
      }
      if (res.status == xfer_status::in_progress) {
        inflight.push_back(res.id);
        continue;
      }
      // would_block: back-pressure, drain the oldest first.
    }
    if (inflight.empty())
      continue;
    std::string reason;
    auto st = s.poll(inflight.front(), reason);
    if (st == xfer_status::in_progress) {
      pump();
      continue;
    }
    s.release(inflight.front());
    inflight.pop_front();
    if (st != xfer_status::done) {
      out.skipped = reason;
      return out;
    }
    moved += bytes;
  }
  out.gbps = static_cast<double>(moved) / since(t0) / 1e9;
  if (name == "tcp") {
    out.baseline = "socket";
    out.baseline_gbps = socket_stream_gbps(wb.ops, seconds);
  } else if (name == "cuda") {
    out.baseline = "cudaMemcpy";
    uint64_t reps = 0;
    auto t1 = clock_type::now();
    while (since(t1) < seconds) {
      for (auto& op : wb.ops)
        (void) device_copy(buffer::gpu, op.dst_addr, op.src_addr, op.size_bytes);
      ++reps;
    }
    out.baseline_gbps = static_cast<double>(reps * bytes) / since(t1) / 1e9;
  } else {
    out.baseline = "memcpy";
    out.baseline_gbps = static_cast<double>(bytes) / memcpy_seconds(wb.ops, seconds) / 1e9;
  }
  return out;
}


/// GB/s landed on the decode ranks by rooms of the realistic model
/// (Llama-3-8B-like: 32 layers, 8 KV heads x 128 x bf16, 16 tokens per
/// page) between declared layouts of TP `ptp` -> `dtp`, `order` pages on
/// both sides, for `seconds`.
/// Counts what the rank's data plane is asked to post: batches and their
/// descriptors (writes), to show what coalescing leaves per room.
class counting_backend : public forwarding_backend {
public:
  counting_backend(backend_ptr inner, std::shared_ptr<std::atomic<uint64_t>> descriptors)
    : forwarding_backend(std::move(inner)), descriptors_(std::move(descriptors)) {
    // nop
  }

  post_result post(const write_batch& batch) override {
    descriptors_->fetch_add(batch.descriptors(), std::memory_order_relaxed);
    return forwarding_backend::post(batch);
  }

private:
  std::shared_ptr<std::atomic<uint64_t>> descriptors_;
};

struct scatter_point {
  double gbps = 0;
  double descriptors_per_room = 0;
};

/// Rooms of 4,096 pages of 4 KiB in each of 2 buffers (32 MiB a room, 2 in
/// flight) on `transport`, through rooms in one process: decode's pages in
/// the prefill's order (runs coalesce into one descriptor per buffer), or a
/// random permutation of them (a descriptor per page).
scatter_point scattered_gbps(caf::actor_system& sys, const std::string& transport,
                             bool scattered, double seconds) {
  constexpr int64_t ppr = 4096, conc = 2;
  kv_shape shape;
  shape.num_buffers = 2;
  shape.page_size_bytes = 4096;
  shape.num_pages = static_cast<uint64_t>(ppr * conc);
  shape.num_aux = 1;
  shape.aux_slots = static_cast<uint64_t>(conc);
  shape.aux_item_bytes = 64;
  auto descriptors = std::make_shared<std::atomic<uint64_t>>(0);
  runtime rt{sys};
  auto g = local_group::start(rt, 1, shape, [&](rank_config& rc) {
    rc.transport = transport;
    rc.network = transport != "local"; // endpoints other processes can reach
    rc.data_plane = [descriptors](const backend_config& bc) -> caf::expected<backend_ptr> {
      auto inner = make_backend(bc);
      if (!inner)
        return inner.error();
      return backend_ptr{std::make_unique<counting_backend>(std::move(*inner), descriptors)};
    };
  });
  if (!g) {
    std::fprintf(stderr, "scattered pages on %s: %s\n", transport.c_str(),
                 describe(g.error()).c_str());
    return {};
  }
  bench_group bg{std::move(*g), ppr};
  room_driver d{bg, conc};
  if (scattered) {
    d.decode_order.resize(ppr);
    for (int64_t i = 0; i < ppr; ++i)
      d.decode_order[static_cast<size_t>(i)] = i;
    std::shuffle(d.decode_order.begin(), d.decode_order.end(), std::mt19937_64{42});
  }
  auto warm = clock_type::now();
  while (d.succeeded == 0 && since(warm) < 10)
    if (!d.step())
      std::this_thread::yield();
  d.succeeded = 0;
  descriptors->store(0);
  auto t0 = clock_type::now();
  while (since(t0) < seconds)
    if (!d.step())
      std::this_thread::yield();
  auto secs = since(t0);
  auto posted = descriptors->load();
  auto done = d.succeeded;
  d.finish();
  scatter_point out;
  auto room_bytes = static_cast<double>(shape.num_buffers * ppr * shape.page_size_bytes);
  out.gbps = static_cast<double>(done) * room_bytes / secs / 1e9;
  out.descriptors_per_room = done > 0 ? static_cast<double>(posted) / static_cast<double>(done)
                                      : 0.0;
  return out;
}

double mapped_gbps(caf::actor_system& sys, int ptp, int dtp, page_order order, double seconds) {
  runtime rt{sys};
  constexpr int64_t ppr = 16, conc = 4;
  parallel_layout model;
  model.layers = 32;
  model.total_kv_heads = 8;
  model.head_dim = 128;
  model.bytes_per_element = 2;
  model.tokens_per_page = 16;
  model.order = order;
  bench_group g{rt, ptp, dtp, model, realistic_shape(1, conc, ppr), ppr};
  room_driver d{g, conc};
  auto secs = d.run_for(seconds);
  uint64_t room_bytes = 0;
  for (auto& m : g.decode_mem)
    room_bytes += m->shape().num_buffers * ppr * m->shape().page_size_bytes;
  return static_cast<double>(d.succeeded * room_bytes) / secs / 1e9;
}

/// What the copies alone allow head slicing: one prefill rank's part of a
/// realistic room (64 buffers x 16 pages of 4 heads) for its two decode
/// ranks at 2P -> 4D (pages of 2 heads each), posted to a local backend as
/// a room posts a chunk (the two decode ranks' batches together,
/// `backend::post_group`, in the planner's page-by-page order), against
/// the whole pages of equal TP (one write a buffer), in GB/s of bytes
/// landed: the backend's checks and copies without the rooms around them.
/// NHD slices are 512 B (one token's two heads) at a 1 KiB stride, one
/// strided write a buffer as a room plans them for a local data plane;
/// HND slices are 8 KiB (two heads' tokens).
double sliced_copy_ratio(page_order order, double seconds) {
  constexpr uint64_t buffers = 64, pages = 16, tokens = 16, head_bytes = 256;
  constexpr uint64_t src_page = 4 * tokens * head_bytes, dst_page = 2 * tokens * head_bytes;
  constexpr uint64_t bytes = buffers * pages * src_page;
  auto sender = make_backend(backend_config{"local", 1, {}});
  auto receiver = make_backend(backend_config{"local", 2, {}});
  if (!sender || !receiver)
    return 0.0;
  auto src = std::make_unique<uint8_t[]>(bytes);
  auto dst = std::make_unique<uint8_t[]>(bytes);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  auto at = [](const std::unique_ptr<uint8_t[]>& p, uint64_t off) {
    return reinterpret_cast<uint64_t>(p.get()) + off;
  };
  if (!(*sender)->register_memory({at(src, 0), bytes, -1})
      || !(*receiver)->register_memory({at(dst, 0), bytes, -1}))
    return 0.0;
  // Decode rank d's pages of buffer b sit in its half of `dst`.
  auto dst_at = [&](uint64_t d, uint64_t b, uint64_t p) {
    return at(dst, d * bytes / 2 + (b * pages + p) * dst_page);
  };
  write_batch whole, sliced[2];
  for (auto* wb : {&whole, &sliced[0], &sliced[1]})
    wb->peer = (*receiver)->endpoint();
  for (uint64_t b = 0; b < buffers; ++b) {
    auto base = b * pages * src_page;
    whole.ops.push_back({at(src, base), at(dst, base), pages * src_page});
    for (uint64_t p = 0; p < pages; ++p) {
      auto page = base + p * src_page;
      for (uint64_t d = 0; d < 2; ++d) {
        if (order == page_order::hnd) {
          sliced[d].ops.push_back({at(src, page + d * dst_page), dst_at(d, b, p), dst_page});
          continue;
        }
        if (p == 0)
          sliced[d].strided.push_back({at(src, page + d * 2 * head_bytes), dst_at(d, b, p),
                                       2 * head_bytes, pages * tokens, 4 * head_bytes,
                                       2 * head_bytes});
      }
    }
  }
  auto& be = **sender;
  std::vector<const write_batch*> group{&sliced[0], &sliced[1]};
  auto rate = [&](auto post) {
    uint64_t n = 0;
    auto t0 = clock_type::now();
    do {
      post();
      ++n;
    } while (since(t0) < seconds);
    return static_cast<double>(n * bytes) / since(t0);
  };
  auto whole_rate = rate([&] { (void) be.post(whole); });
  auto sliced_rate = rate([&] { (void) be.post_group(group); });
  return whole_rate > 0 ? sliced_rate / whole_rate : 0.0;
}

/// Head slicing in GPU memory (the cuda transport): one prefill rank's NHD
/// part of a realistic room for its two decode ranks, `sliced_copy_ratio`'s
/// shape, posted as a room plans it (one strided write a buffer: one
/// cudaMemcpy2DAsync), as the plain writes those stand for (one
/// cudaMemcpyAsync a 512 B token row: how every transport moved them
/// before), and as equal TP's whole pages, in GB/s landed.
struct device_sliced {
  double strided = 0, rows = 0, whole = 0;
  std::string skipped;
};

device_sliced device_sliced_gbps(const std::string& name, double seconds) {
  constexpr uint64_t buffers = 64, pages = 16, tokens = 16, head_bytes = 256;
  constexpr uint64_t src_page = 4 * tokens * head_bytes, dst_page = 2 * tokens * head_bytes;
  constexpr uint64_t bytes = buffers * pages * src_page;
  device_sliced out;
  auto sender = make_backend(backend_config{name, 1, {}});
  auto receiver = make_backend(backend_config{name, 2, {}});
  buffer src{name, bytes}, dst{name, bytes};
  if (!sender || !receiver || !src.error().empty() || !dst.error().empty()) {
    out.skipped = !sender     ? describe(sender.error())
                  : !receiver ? describe(receiver.error())
                              : src.error() + dst.error();
    return out;
  }
  auto& s = **sender;
  auto& r = **receiver;
  if (!s.register_memory({src.addr(), bytes, src.device()})
      || !r.register_memory({dst.addr(), bytes, dst.device()})) {
    out.skipped = "cannot register the buffers";
    return out;
  }
  write_batch whole, sliced[2], rows[2];
  for (auto* wb : {&whole, &sliced[0], &sliced[1]}) {
    wb->peer = r.endpoint();
    wb->src_device_id = src.device();
    wb->dst_device_id = dst.device();
  }
  for (uint64_t b = 0; b < buffers; ++b) {
    auto base = b * pages * src_page;
    whole.ops.push_back({src.addr() + base, dst.addr() + base, pages * src_page});
    for (uint64_t d = 0; d < 2; ++d)
      sliced[d].strided.push_back({src.addr() + base + d * 2 * head_bytes,
                                   dst.addr() + d * bytes / 2 + b * pages * dst_page,
                                   2 * head_bytes, pages * tokens, 4 * head_bytes,
                                   2 * head_bytes});
  }
  for (int d = 0; d < 2; ++d)
    rows[d] = expand_strided(sliced[d]);
  // GB/s of `group` posted again and again, each round waited for.
  auto rate = [&](std::vector<const write_batch*> group) {
    uint64_t n = 0;
    auto t0 = clock_type::now();
    do {
      for (auto& res : s.post_group(group)) {
        if (res.status == xfer_status::failed) {
          out.skipped = describe(res.error);
          return 0.0;
        }
        if (res.status != xfer_status::in_progress)
          continue;
        std::string reason;
        auto st = xfer_status::in_progress;
        while (st == xfer_status::in_progress)
          st = s.poll(res.id, reason);
        s.release(res.id);
        if (st != xfer_status::done) {
          out.skipped = reason;
          return 0.0;
        }
      }
      ++n;
    } while (since(t0) < seconds);
    return static_cast<double>(n * bytes) / since(t0) / 1e9;
  };
  out.whole = rate({&whole});
  out.strided = rate({&sliced[0], &sliced[1]});
  out.rows = rate({&rows[0], &rows[1]});
  return out;
}

} // namespace

int bench_bandwidth(int argc, char** argv) {
  bandwidth_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto blocks = parse_list(cfg.blocks);
  auto batches = parse_list(cfg.batches);
  if (blocks.empty() || batches.empty()) {
    std::fprintf(stderr, "bad --blocks or --batches list\n");
    return 2;
  }
  std::vector<std::string> names;
  if (cfg.transports.empty())
    for (auto* row : transport_table())
      names.emplace_back(row->name);
  else
    names = split_list(cfg.transports);
  constexpr uint64_t max_batch_bytes = 64ull << 20;
  auto per_point = cfg.seconds / 10;
  std::string listed;
  for (auto& n : names)
    listed += (listed.empty() ? "" : ",") + n;
  if (cfg.alternations < 1) {
    std::fprintf(stderr, "--alternations must be at least 1\n");
    return 2;
  }
  std::printf("kvroom-bench bandwidth: transports %s; each point %.2f s and its baseline %.2f s, "
              "in turn %lld times, the best of each; same buffers (memcpy: local, shm, verbs; "
              "plain socket stream: tcp; cudaMemcpy: cuda)\n",
              listed.c_str(), per_point, per_point, static_cast<long long>(cfg.alternations));
  std::printf("%-9s %10s %6s %10s %10s %-10s %7s\n", "transport", "block", "batch", "GB/s",
              "base GB/s", "baseline", "ratio");
  std::vector<std::string> rows;
  std::vector<goal> goals;
  std::vector<std::string> device_sliced_rows;
  for (auto& name : names) {
    bool skip = !cfg.runs("points");
    if (!skip && name == "cuda") {
      auto ds = device_sliced_gbps(name, std::max(0.2, per_point));
      if (ds.skipped.empty()) {
        std::printf("cuda head-sliced 2P -> 4D NHD copies (16 MiB, 512 B token rows): strided "
                    "%.2f GB/s, row by row %.2f GB/s, whole pages (equal TP) %.2f GB/s "
                    "(%.0f%% / %.0f%% of whole pages)\n",
                    ds.strided, ds.rows, ds.whole, 100 * ds.strided / ds.whole,
                    100 * ds.rows / ds.whole);
        device_sliced_rows.push_back(json_object{}
                                       .str("transport", name)
                                       .num("strided_gb_per_s", ds.strided)
                                       .num("rows_gb_per_s", ds.rows)
                                       .num("whole_pages_gb_per_s", ds.whole)
                                       .dump(6));
      } else {
        std::printf("cuda head-sliced copies skipped: %s\n", ds.skipped.c_str());
      }
      std::fflush(stdout);
    }
    for (auto block : blocks) {
      for (auto batch : batches) {
        auto bytes = static_cast<uint64_t>(block) * static_cast<uint64_t>(batch);
        if (skip || block <= 0 || batch <= 0 || bytes > max_batch_bytes)
          continue;
        auto p = measure(name, block, batch, per_point);
        for (int64_t a = 1; a < cfg.alternations && p.skipped.empty(); ++a) {
          auto again = measure(name, block, batch, per_point);
          p.gbps = std::max(p.gbps, again.gbps);
          p.baseline_gbps = std::max(p.baseline_gbps, again.baseline_gbps);
        }
        if (!p.skipped.empty()) {
          std::printf("%-9s skipped: %s\n", name.c_str(), p.skipped.c_str());
          rows.push_back(json_object{}.str("transport", name).str("skipped", p.skipped).dump(6));
          skip = true;
          continue;
        }
        auto ratio = p.baseline_gbps > 0 ? p.gbps / p.baseline_gbps : 0.0;
        // Issue #33's goals at the points it names: tcp at a socket's speed
        // (80 % at 4 KiB x 1, 95 % from 64 KiB), shm at 80 % of memcpy.
        char what[96];
        std::snprintf(what, sizeof(what), "%s %lld B x %lld / %s", name.c_str(),
                      static_cast<long long>(block), static_cast<long long>(batch),
                      p.baseline.c_str());
        if (name == "tcp" && block == 4096 && batch == 1)
          goals.push_back({what, p.gbps, p.baseline_gbps, 0.8});
        else if (name == "tcp" && block >= 65536)
          goals.push_back({what, p.gbps, p.baseline_gbps, 0.95});
        else if (name == "shm")
          goals.push_back({what, p.gbps, p.baseline_gbps, 0.8});
        std::printf("%-9s %10lld %6lld %10.2f %10.2f %-10s %6.0f%%\n", name.c_str(),
                    static_cast<long long>(block), static_cast<long long>(batch), p.gbps,
                    p.baseline_gbps, p.baseline.c_str(), 100 * ratio);
        std::fflush(stdout);
        rows.push_back(json_object{}
                         .str("transport", name)
                         .num("block_bytes", static_cast<double>(block))
                         .num("batch", static_cast<double>(batch))
                         .num("gb_per_s", p.gbps)
                         .str("baseline", p.baseline)
                         .num("baseline_gb_per_s", p.baseline_gbps)
                         .num("ratio", ratio)
                         .dump(6));
      }
    }
  }
  // The realistic layout, end to end through rooms (local transport).
  double kv_gbps = 0, kv_base = 0, kv_warm = 0;
  if (cfg.runs("realistic")) {
    caf::actor_system sys{cfg};
    runtime rt{sys};
    constexpr int64_t ppr = 16, conc = 4;
    bench_group g{rt, 1, realistic_shape(1, conc, ppr), ppr};
    auto& shape = g.prefill_mem[0]->shape();
    auto room_bytes = shape.num_buffers * ppr * shape.page_size_bytes + shape.aux_item_bytes;
    // The baseline copies what the rooms copy: every slot's pages in turn
    // (the driver's rooms take slots round robin), 4 x 32 MiB each way. One
    // slot copied again and again stays partly in the last-level cache,
    // which no stream of rooms gets; it is printed beside it, not compared.
    auto layout = g.prefill_mem[0]->layout();
    auto dst = g.decode_mem[0]->layout();
    auto slot_ops = [&](int64_t slot) {
      std::vector<write_op> ops;
      auto off = static_cast<uint64_t>(slot * ppr) * shape.page_size_bytes;
      for (size_t b = 0; b < layout.kv.size(); ++b)
        ops.push_back({layout.kv[b].mem.addr + off, dst.kv[b].mem.addr + off,
                       ppr * shape.page_size_bytes});
      return ops;
    };
    std::vector<write_op> every_slot;
    for (int64_t slot = 0; slot < conc; ++slot)
      for (auto& op : slot_ops(slot))
        every_slot.push_back(op);
    // Rooms and memcpy alternated, the best of two windows each: on a shared
    // machine one window of either can lose a third to a neighbour.
    auto each = std::max(0.2, cfg.seconds / 2);
    for (int rep = 0; rep < 2; ++rep) {
      room_driver d{g, conc, static_cast<room_id>(1 + rep * 1000000)};
      auto secs = d.run_for(each);
      kv_gbps = std::max(kv_gbps, static_cast<double>(d.succeeded * room_bytes) / secs / 1e9);
      kv_base = std::max(kv_base, static_cast<double>(conc * room_bytes)
                                    / memcpy_seconds(every_slot, each / 2) / 1e9);
    }
    kv_warm = static_cast<double>(room_bytes) / memcpy_seconds(slot_ops(0), 0.25) / 1e9;
    goals.push_back({"realistic KV through rooms / memcpy", kv_gbps, kv_base, 0.9});
    std::printf("realistic KV (64 buffers x 16 pages x %llu B per room, 1P x 1D, 4 rooms in "
                "flight): %.2f GB/s vs memcpy of the same 4 slots %.2f GB/s (%.0f%%; one "
                "slot again and again, cache-warm: %.2f GB/s)\n",
                static_cast<unsigned long long>(shape.page_size_bytes), kv_gbps, kv_base,
                100 * kv_gbps / kv_base, kv_warm);
  }
  // Head slicing against whole pages, the same model and bytes: 2P -> 4D
  // (each decode rank takes half of one prefill rank's heads) against
  // 2P -> 2D, HND and NHD, alternated and the best of two each (noise).
  std::vector<std::string> mapped;
  if (cfg.runs("sliced")) {
    caf::actor_system sys{cfg};
    auto each = std::max(0.2, cfg.seconds / 2);
    for (auto order : {page_order::hnd, page_order::nhd}) {
      double equal = 0, sliced = 0;
      for (int rep = 0; rep < 2; ++rep) {
        equal = std::max(equal, mapped_gbps(sys, 2, 2, order, each));
        sliced = std::max(sliced, mapped_gbps(sys, 2, 4, order, each));
      }
      auto ratio = equal > 0 ? sliced / equal : 0.0;
      goals.push_back({"head-sliced 2P -> 4D " + to_string(order) + " / equal TP 2P -> 2D", sliced,
                       equal, 0.8});
      // The ceiling the memory itself sets: the same copies alone.
      auto bound = sliced_copy_ratio(order, std::max(0.1, each / 2));
      std::printf("realistic KV, head-sliced 2P -> 4D %s: %.2f GB/s vs equal TP 2P -> 2D %.2f GB/s "
                  "(%.0f%%; the same copies alone: %.0f%%)\n",
                  to_string(order).c_str(), sliced, equal, 100 * ratio, 100 * bound);
      std::fflush(stdout);
      mapped.push_back(json_object{}
                         .str("layout", "2P->4D " + to_string(order))
                         .num("gb_per_s", sliced)
                         .str("baseline", "2P->2D " + to_string(order))
                         .num("baseline_gb_per_s", equal)
                         .num("ratio", ratio)
                         .num("copies_alone_ratio", bound)
                         .dump(6));
    }
  }
  // Scattered pages against contiguous ones, through rooms: what a
  // scheduler's fragmented free list costs (issue #33: >= 80 %).
  std::vector<std::string> scatter;
  if (cfg.runs("scattered")) {
    caf::actor_system sys{cfg};
    auto each = std::max(0.3, cfg.seconds / 2);
    for (auto& name : names) {
      if (name != "local" && name != "shm" && name != "tcp")
        continue;
      auto whole = scattered_gbps(sys, name, false, each);
      auto spread = scattered_gbps(sys, name, true, each);
      auto ratio = whole.gbps > 0 ? spread.gbps / whole.gbps : 0.0;
      std::printf("rooms of 4096 x 4 KiB pages x 2 buffers on %s, decode's pages randomly "
                  "permuted: %.2f GB/s (%.0f descriptors a room) vs in order %.2f GB/s (%.0f) "
                  "(%.0f%%)\n",
                  name.c_str(), spread.gbps, spread.descriptors_per_room, whole.gbps,
                  whole.descriptors_per_room, 100 * ratio);
      std::fflush(stdout);
      goals.push_back({"4096 permuted pages / in order, through rooms on " + name, spread.gbps,
                       whole.gbps, 0.8});
      scatter.push_back(json_object{}
                          .str("transport", name)
                          .num("gb_per_s", spread.gbps)
                          .num("descriptors_per_room", spread.descriptors_per_room)
                          .str("baseline", "pages in order")
                          .num("baseline_gb_per_s", whole.gbps)
                          .num("baseline_descriptors_per_room", whole.descriptors_per_room)
                          .num("ratio", ratio)
                          .dump(6));
    }
  }
  // tcp over one path and over two (two loopback addresses), through the
  // path layer both times, alternated, the best of two each (noise).
  std::vector<std::string> multi;
  if (cfg.runs("paths") && std::find(names.begin(), names.end(), "tcp") != names.end()) {
    for (int64_t block : {int64_t{1} << 20, int64_t{4} << 20}) {
      double one = 0, two = 0;
      for (int rep = 0; rep < 2; ++rep) {
        one = std::max(one, measure("tcp", block, 4, per_point, "127.0.0.1").gbps);
        two = std::max(two, measure("tcp", block, 4, per_point, "127.0.0.1,127.0.0.2").gbps);
      }
      std::printf("tcp, %lld KiB x 4 per batch: %.2f GB/s over two paths vs %.2f GB/s over one "
                  "(%.0f%%)\n",
                  static_cast<long long>(block >> 10), two, one, one > 0 ? 100 * two / one : 0.0);
      std::fflush(stdout);
      multi.push_back(json_object{}
                        .num("block_bytes", static_cast<double>(block))
                        .num("gb_per_s", two)
                        .str("baseline", "one path")
                        .num("baseline_gb_per_s", one)
                        .num("ratio", one > 0 ? two / one : 0.0)
                        .dump(6));
    }
  }
  // The integrity check's cost: XXH3 of a part's bytes (one side's work)
  // against a memcpy of the same writes, at 64 KiB and 1 MiB blocks.
  std::vector<std::string> hashed;
  for (uint64_t block : {uint64_t{64} << 10, uint64_t{1} << 20}) {
    if (!cfg.runs("integrity"))
      break;
    constexpr uint64_t count = 16;
    std::vector<uint8_t> src(block * count, 1), dst(block * count, 0);
    std::vector<write_op> ops;
    for (uint64_t i = 0; i < count; ++i)
      ops.push_back({reinterpret_cast<uint64_t>(src.data()) + i * block,
                     reinterpret_cast<uint64_t>(dst.data()) + i * block, block});
    auto each = std::max(0.2, cfg.seconds / 2);
    uint64_t reps = 0;
    volatile uint64_t sink = 0;
    auto t0 = clock_type::now();
    while (since(t0) < each) {
      sink = sink + digest_sources(ops);
      ++reps;
    }
    auto gbps = static_cast<double>(reps * block * count) / since(t0) / 1e9;
    auto base = static_cast<double>(block * count) / memcpy_seconds(ops, each) / 1e9;
    std::printf("integrity xxh3, %llu KiB blocks: %.2f GB/s hashed vs memcpy %.2f GB/s "
                "(%.0f%%)\n",
                static_cast<unsigned long long>(block >> 10), gbps, base, 100 * gbps / base);
    std::fflush(stdout);
    hashed.push_back(json_object{}
                       .num("block_bytes", static_cast<double>(block))
                       .num("gb_per_s", gbps)
                       .str("baseline", "memcpy")
                       .num("baseline_gb_per_s", base)
                       .num("ratio", base > 0 ? gbps / base : 0.0)
                       .dump(6));
  }
  auto goals_json = report_goals(goals);
  auto out = json_object{}
               .str("bench", "bandwidth")
               .str("transports", listed)
               .raw("points", json_array(rows))
               .num("realistic_kv_gb_per_s", kv_gbps)
               .num("realistic_kv_memcpy_gb_per_s", kv_base)
               .num("realistic_kv_memcpy_one_slot_gb_per_s", kv_warm)
               .raw("head_sliced", json_array(mapped))
               .raw("device_head_sliced", json_array(device_sliced_rows))
               .raw("scattered_pages", json_array(scatter))
               .raw("tcp_two_paths", json_array(multi))
               .raw("integrity_xxh3", json_array(hashed))
               .raw("goals", goals_json)
               .dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

} // namespace kvroom::bench
