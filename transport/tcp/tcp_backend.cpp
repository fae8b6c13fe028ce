#include "kvroom/transport/tcp/tcp_backend.hpp"

#include <algorithm>
#include <climits>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kvroom/messages/clock.hpp"
#include "kvroom/transport/log.hpp"
#include "kvroom/transport/socket_io.hpp"
#include "kvroom/transport/tcp/tcp_handshake.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

namespace {

constexpr uint32_t wire_magic = 0x4b56524d; // "KVRM"
/// Version 2 appends the batch's key to version 1's header; a receiver
/// reads both (a version-1 batch is unkeyed).
constexpr uint16_t wire_version = 2;
/// A read request (a pull): version 1's header, then descriptors of this
/// rank's memory to send back; no key, no payload. Answered by an ack of
/// status `ack_data` followed by the bytes, or by a refusal.
constexpr uint16_t wire_read_version = 3;
constexpr uint32_t max_reason = 4096;
/// Pages a receiver reads in one go before it asks the room's grant
/// again (a room that concluded mid-batch has the rest dropped): at 4 KiB
/// pages, 1 MiB a call.
constexpr size_t scatter_group = 256;

struct wire_header {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t xfer;
  uint64_t room;
  uint32_t nops;
  uint32_t reserved2;
  uint64_t total_bytes;
};

struct wire_key {
  uint64_t key;
};

struct wire_op {
  uint64_t dst_addr;
  uint64_t size_bytes;
};

struct wire_ack {
  uint32_t magic;
  uint32_t status; // 0: written, 1: refused (the receiver closes), 2: refused (it reads on)
  uint64_t xfer;
  uint32_t reason_len;
  uint32_t reserved;
};

std::string sys_error(const char* what) {
  return std::string{what} + ": " + std::strerror(errno);
}

/// Writes all of `len` bytes; false on error or a closed peer. `more`:
/// more of the same message follows (MSG_MORE), so a header and a small
/// payload leave in one segment.
bool send_all(int fd, const void* buf, size_t len, bool more = false) {
  auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    auto n = ::send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}


/// Writes every byte `iov` names in as few system calls as the kernel takes
/// them (one for a small batch: header, descriptors and payload together,
/// where separate sends cost one call each); at most IOV_MAX entries a
/// call, the rest following with MSG_MORE. Consumes `iov`. False on an
/// error or a closed peer (errno says which).
bool send_all(int fd, std::vector<iovec>& iov) {
  size_t at = 0;
  while (at < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + at;
    msg.msg_iovlen = std::min<size_t>(iov.size() - at, IOV_MAX);
    bool more = at + msg.msg_iovlen < iov.size();
    auto n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    for (auto left = static_cast<size_t>(n); left > 0;) {
      auto& v = iov[at];
      if (left < v.iov_len) {
        v.iov_base = static_cast<char*>(v.iov_base) + left;
        v.iov_len -= left;
        left = 0;
      } else {
        left -= v.iov_len;
        ++at;
      }
    }
  }
  return true;
}

/// `iov` plus `len` bytes at `buf` (none when `len` is 0: an empty entry
/// would make a send of only empty entries read as a closed peer).
void add_iov(std::vector<iovec>& iov, const void* buf, size_t len) {
  if (len > 0)
    iov.push_back(iovec{const_cast<void*>(buf), len});
}


void set_timeouts(int fd, uint32_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

enum : uint32_t { ack_written = 0, ack_refused_closing = 1, ack_refused = 2, ack_data = 3 };

/// True when the peer closed `fd` (nothing is expected from it: no batch
/// of ours is unacknowledged).
bool closed_by_peer(int fd) {
  char byte;
  auto n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void send_ack(int fd, uint64_t xfer, uint32_t status, const std::string& reason) {
  wire_ack ack{wire_magic, status, xfer,
               static_cast<uint32_t>(std::min<size_t>(reason.size(), max_reason)), 0};
  if (send_all(fd, &ack, sizeof(ack)) && ack.reason_len > 0)
    send_all(fd, reason.data(), ack.reason_len);
}

} // namespace

tcp_backend::tcp_backend(rank_id owner, std::vector<std::string> hosts,
                         uint32_t io_timeout_ms, deployment_secret secret)
  : owner_(owner), secret_(std::move(secret)), io_timeout_ms_(io_timeout_ms) {
  for (auto& h : hosts)
    listeners_.push_back(listener{std::move(h), 0, -1, nullptr});
}

caf::error tcp_backend::start() {
  if (listeners_.empty())
    return make_error(errc::invalid_config, "tcp: no address to listen on");
  if (listeners_.size() > max_hosts)
    return make_error(errc::invalid_config, "tcp: " + std::to_string(listeners_.size())
                                              + " addresses (at most "
                                              + std::to_string(max_hosts) + ")");
  for (auto& l : listeners_)
    if (auto err = start(l))
      return err;
  return caf::none;
}

caf::error tcp_backend::start(listener& l) {
  l.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd < 0)
    return make_error(errc::unavailable, sys_error("tcp: socket"));
  int one = 1;
  ::setsockopt(l.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, l.host.c_str(), &addr.sin_addr) != 1)
    return make_error(errc::invalid_config,
                      "tcp: '" + l.host + "' is not an IPv4 address");
  if (::bind(l.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return make_error(errc::unavailable, sys_error(("tcp: bind " + l.host).c_str()));
  // The kernel's queue as deep as it allows: with a shallow one, a burst of
  // connects overflows it and each dropped SYN stalls its client a second.
  if (::listen(l.fd, SOMAXCONN) != 0)
    return make_error(errc::unavailable, sys_error("tcp: listen"));
  socklen_t len = sizeof(addr);
  ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&addr), &len);
  l.port = ntohs(addr.sin_port);
  auto label = "tcp: rank " + std::to_string(owner_);
  l.gate = std::make_unique<membership_gate>(
    [secret = secret_, owner = owner_] {
      return std::make_unique<tcp_door>(secret, owner, make_nonce());
    },
    membership_gate::limits{max_handshakes, max_handshakes, handshake_ms},
    membership_gate::naming{label, "tcp-refused-connection", "tcp-unauthenticated"});
  l.gate->listen(l.fd, [this](int fd, door_handshake& proven) {
    on_member(fd, static_cast<tcp_door&>(proven).sender());
  });
  return caf::none;
}

tcp_backend::~tcp_backend() {
  stopping_ = true;
  // No member is passed on after this.
  for (auto& l : listeners_) {
    if (l.gate)
      l.gate->stop();
    if (l.fd >= 0)
      ::close(l.fd);
  }
  {
    std::lock_guard<std::mutex> guard{conns_mtx_};
    // Unblocks every connection thread stuck in recv.
    for (auto& c : inbound_)
      if (c.fd >= 0)
        ::shutdown(c.fd, SHUT_RDWR);
  }
  for (auto& c : inbound_)
    if (c.thread.joinable())
      c.thread.join();
  for (auto& kvp : out_)
    ::close(kvp.second.fd);
}

void tcp_backend::reap_locked() {
  for (auto i = inbound_.begin(); i != inbound_.end();) {
    if (!i->done) {
      ++i;
      continue;
    }
    i->thread.join();
    i = inbound_.erase(i);
  }
}

void tcp_backend::on_member(int fd, rank_id sender) {
  std::lock_guard<std::mutex> guard{conns_mtx_};
  reap_locked();
  size_t same = 0;
  for (auto& c : inbound_)
    same += c.sender == sender && !c.done ? 1 : 0;
  std::string why;
  if (inbound_.size() >= max_connections)
    why = std::to_string(max_connections) + " peers connected already";
  else if (same >= max_per_peer * listeners_.size())
    why = "rank " + std::to_string(sender) + " holds " + std::to_string(same) + " already";
  if (why.empty()) {
    // Idle between batches for longer than a batch may take: a sender whose
    // other path stalled it for a while keeps this connection.
    set_timeouts(fd, std::max(io_timeout_ms_, idle_ms));
    auto& conn = inbound_.emplace_back();
    conn.fd = fd;
    conn.sender = sender;
    try {
      conn.thread = std::thread{[this, &conn, sender] { serve(conn, sender); }};
      return;
    } catch (const std::system_error& e) {
      // Out of threads or address space: refuse this peer, keep the rank.
      inbound_.pop_back();
      why = e.what();
    }
  }
  ::close(fd);
  transport_warning_limited("tcp-refused-connection", "tcp: rank " + std::to_string(owner_)
                                                        + " refuses a connection: " + why);
}

void tcp_backend::serve(inbound& conn, rank_id sender) {
  int fd = conn.fd;
  std::vector<wire_op> ops;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<char> scratch;
  std::vector<iovec> places;
  // Several small batches arrive in one read; a large payload is read
  // straight into its pages.
  detail::stream_reader in{fd};
  auto refuse = [&](uint64_t xfer, const std::string& bad, uint32_t status) {
    transport_warning_limited("tcp-refused-batch",
                              "tcp: rank " + std::to_string(owner_) + " refuses a batch: "
                                + bad);
    send_ack(fd, xfer, status, bad);
  };
  while (!stopping_) {
    wire_header h{};
    // Idle between batches: the socket's receive timeout closes a silent
    // peer. From the first byte on, the batch has one deadline.
    if (!in.wait())
      break; // peer closed or idle past the timeout
    auto deadline = monotonic_ms() + io_timeout_ms_;
    if (!in.read_by(&h, sizeof(h), deadline))
      break;
    std::string bad;
    wire_key key{0};
    if (h.magic != wire_magic
        || (h.version != 1 && h.version != wire_version && h.version != wire_read_version))
      bad = "malformed batch header (magic or version)";
    else if (h.version == wire_version && !in.read_by(&key, sizeof(key), deadline))
      break;
    else if (h.nops == 0 || h.nops > max_ops)
      bad = "batch with " + std::to_string(h.nops) + " writes (limit "
            + std::to_string(max_ops) + ")";
    if (!bad.empty()) {
      refuse(h.xfer, bad, ack_refused_closing);
      break;
    }
    // Descriptors are read as they arrive: memory follows the bytes a peer
    // actually sent, not the count it announced.
    ops.clear();
    constexpr size_t chunk = 4096;
    bool complete = true;
    for (size_t have = 0; have < h.nops && complete;) {
      auto take = std::min<size_t>(chunk, h.nops - have);
      ops.resize(have + take);
      complete = in.read_by(ops.data() + have, take * sizeof(wire_op), deadline);
      have += take;
    }
    if (!complete)
      break;
    if (h.version == wire_read_version) {
      ranges.clear();
      for (auto& op : ops)
        ranges.emplace_back(op.dst_addr, op.size_bytes);
      if (!serve_read(fd, sender, h.xfer, h.room, h.total_bytes, ranges))
        break;
      continue;
    }
    // Validate every range before any byte lands; keep the view open while the
    // payload is written so nothing is deregistered under it.
    auto regions = regions_.read();
    uint64_t total = 0;
    size_t hint = 0;
    for (size_t i = 0; i < ops.size() && bad.empty(); ++i) {
      auto& op = ops[i];
      if (op.size_bytes == 0 || !regions.covers(op.dst_addr, op.size_bytes, hint))
        bad = "write " + std::to_string(i) + ": destination range "
              + region_table::range(op.dst_addr, op.size_bytes)
              + " is outside rank " + std::to_string(owner_)
              + "'s registered memory";
      total += op.size_bytes;
    }
    if (bad.empty() && total != h.total_bytes)
      bad = "batch announces " + std::to_string(h.total_bytes)
            + " payload bytes but its writes sum to " + std::to_string(total);
    // Registered is not enough: the pages must be this sender's, for a live
    // room (the batch's room).
    if (!bad.empty()) {
      refuse(h.xfer, bad, ack_refused_closing);
      break; // the unread payload makes the stream unusable: drop it
    }
    grant_table::permit permit;
    ranges.clear();
    for (auto& op : ops)
      ranges.emplace_back(op.dst_addr, op.size_bytes);
    permit = grants_.admit(h.room, sender, ranges, bad);
    // Not granted (most often: a late batch of a room that concluded here):
    // its payload is read and dropped below, and the connection stays up
    // for the sender's other rooms. A copy of a batch that already landed
    // over another path is read and dropped too, and acknowledged.
    bool ok = true;
    bool again = permit && grants_.applied_before(h.room, sender, key.key);
    bool revoked = !permit || again;
    // Many small pages (a fragmented cache) land straight in place, a group
    // of them per system call: otherwise each costs a copy through the
    // reader's buffer. Pages as large as the buffer go straight in one by
    // one anyway, and a small payload goes through the buffer, which also
    // takes the next batches' headers in the same call.
    bool scattered = h.total_bytes >= in.capacity()
                     && h.total_bytes / ops.size() < in.capacity();
    size_t group = scattered ? scatter_group : 1;
    for (size_t i = 0; i < ops.size() && ok;) {
      // The room concluded mid-batch: the rest is read and dropped, so
      // nothing lands once poll() said Success or Failed.
      revoked = revoked || permit.revoked();
      if (revoked) {
        auto& op = ops[i++];
        scratch.resize(std::min<uint64_t>(op.size_bytes, 1 << 16));
        for (uint64_t left = op.size_bytes; left > 0 && ok;) {
          auto take = std::min<uint64_t>(left, scratch.size());
          ok = in.read_by(scratch.data(), take, deadline);
          left -= take;
        }
        continue;
      }
      if (group == 1) {
        auto& op = ops[i++];
        ok = in.read_by(reinterpret_cast<void*>(op.dst_addr), op.size_bytes, deadline);
        continue;
      }
      places.clear();
      for (auto end = std::min(ops.size(), i + group); i < end; ++i)
        places.push_back(iovec{reinterpret_cast<void*>(ops[i].dst_addr), ops[i].size_bytes});
      ok = in.read_into_by(places.data(), places.size(), deadline);
    }
    if (!ok)
      break; // short or late payload: the sender sees its connection fail
    if (!revoked && !permit.revoked())
      grants_.mark_applied(h.room, sender, key.key);
    permit = grant_table::permit{};
    // Refused for its room's sake: the stream is intact and the sender's
    // other rooms go on on it.
    if (!bad.empty())
      refuse(h.xfer, bad, ack_refused);
    else if (again)
      send_ack(fd, h.xfer, ack_written, {});
    else if (revoked)
      send_ack(fd, h.xfer, ack_refused,
               "room " + std::to_string(h.room) + " concluded while this batch arrived: the "
                 + "rest was dropped");
    else
      send_ack(fd, h.xfer, ack_written, {});
    if (ops.capacity() > chunk)
      std::vector<wire_op>{}.swap(ops); // a large batch's descriptors go
  }
  // The next member's arrival (or the destructor) joins this thread.
  std::lock_guard<std::mutex> guard{conns_mtx_};
  ::close(fd);
  conn.fd = -1;
  conn.done = true;
}

std::string tcp_backend::name() const {
  return "tcp";
}

backend_caps tcp_backend::caps() const {
  backend_caps out;
  out.max_batch_ops = max_ops;
  out.reads = true;
  return out;
}

endpoint_desc tcp_backend::endpoint() const {
  return endpoints().front();
}

std::vector<endpoint_desc> tcp_backend::endpoints() const {
  std::vector<endpoint_desc> out;
  for (auto& l : listeners_)
    out.push_back(endpoint_desc{"tcp", l.host + ":" + std::to_string(l.port), 0, owner_, {}, {}});
  return out;
}

caf::expected<region_id> tcp_backend::register_memory(const mem_desc& mem) {
  return regions_.add(mem);
}

caf::error tcp_backend::deregister_memory(region_id id) {
  return regions_.remove(id);
}

tcp_backend::connection* tcp_backend::connection_to(const std::string& address, rank_id peer,
                                                    std::string& reason) {
  if (auto i = out_.find(address); i != out_.end())
    return &i->second;
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    reason = "malformed tcp endpoint '" + address + "'";
    return nullptr;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port <= 0 || port > 65535
      || ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    reason = "malformed tcp endpoint '" + address + "'";
    return nullptr;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    reason = sys_error("tcp: socket");
    return nullptr;
  }
  set_timeouts(fd, io_timeout_ms_);
  // A send (and the connect) waits for room at most a stall's length: the
  // worker's thread serves every path, and a link that takes nothing for
  // that long is dead to this batch.
  timeval stall{static_cast<time_t>(stall_ms() / 1000),
                static_cast<suseconds_t>((stall_ms() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    reason = sys_error(("tcp: connect " + address).c_str());
    ::close(fd);
    return nullptr;
  }
  // The receiver's challenge, answered with this rank's proof.
  auto why = tcp_prove(fd, secret_, owner_, peer, monotonic_ms() + io_timeout_ms_);
  if (!why.empty()) {
    reason = "tcp: " + address + " " + why;
    ::close(fd);
    return nullptr;
  }
  auto& c = out_[address];
  c.fd = fd;
  return &c;
}

void tcp_backend::fail_connection(const std::string& address, const std::string& why) {
  auto i = out_.find(address);
  if (i == out_.end())
    return;
  for (auto id : i->second.unacked) {
    if (auto r = posted_.find(id); r != posted_.end())
      r->second = result{xfer_status::failed, "tcp to " + address + ": " + why, address, 0};
    reads_.erase(id);  // its answer can no longer come
  }
  ::close(i->second.fd);
  out_.erase(i);
}

bool tcp_backend::apply_acks(connection& c, const std::string& address, std::string& why) {
  while (c.inbox.size() >= sizeof(wire_ack)) {
    wire_ack ack{};
    std::memcpy(&ack, c.inbox.data(), sizeof(ack));
    if (ack.magic != wire_magic || ack.reason_len > max_reason) {
      why = "malformed ack";
      return false;
    }
    if (c.inbox.size() < sizeof(ack) + ack.reason_len)
      return true;
    if (c.unacked.empty() || c.unacked.front() != ack.xfer) {
      why = "ack for batch " + std::to_string(ack.xfer) + ", which is not the oldest in flight";
      return false;
    }
    auto id = c.unacked.front();
    // Writes' acks (the hot path) look up nothing while no read is in flight.
    auto pending = reads_.empty() ? reads_.end() : reads_.find(id);
    if (ack.status == ack_data) {
      // A read's answer: its bytes follow; landed once all of them are here.
      if (pending == reads_.end() || ack.reason_len != 0) {
        why = "data for batch " + std::to_string(id) + ", which is not a read";
        return false;
      }
      if (c.inbox.size() < sizeof(ack) + pending->second.total)
        return true;
      c.inbox.erase(0, sizeof(ack));
      c.unacked.pop_front();
      land_read(c, id, pending->second);
      reads_.erase(pending);
      continue;
    }
    std::string reason = c.inbox.substr(sizeof(ack), ack.reason_len);
    c.inbox.erase(0, sizeof(ack) + ack.reason_len);
    c.unacked.pop_front();
    if (pending != reads_.end())
      reads_.erase(pending);
    auto r = posted_.find(id);
    if (ack.status == ack_written) {
      if (r != posted_.end())
        r->second = result{xfer_status::done, {}, address, 0};
      continue;
    }
    auto refused = "refused by rank " + std::to_string(c.peer) + ": " + reason;
    if (r != posted_.end())
      r->second = result{xfer_status::failed, "tcp to " + address + ": " + refused, address, 0,
                         true};
    if (ack.status == ack_refused)
      continue;
    // The receiver closes after this refusal: what followed is lost too.
    why = "rank " + std::to_string(c.peer) + " refused an earlier batch (" + reason + ")";
    return false;
  }
  return true;
}

bool tcp_backend::pump_acks(const std::string& address, bool block) {
  auto i = out_.find(address);
  if (i == out_.end())
    return false;
  auto& c = i->second;
  char buf[4096];
  while (!block || !c.unacked.empty()) {
    auto n = ::recv(c.fd, buf, sizeof(buf), block ? 0 : MSG_DONTWAIT);
    if (n > 0) {
      c.inbox.append(buf, static_cast<size_t>(n));
      std::string why;
      if (!apply_acks(c, address, why)) {
        fail_connection(address, why);
        return false;
      }
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    fail_connection(address, n == 0 ? "connection closed by rank " + std::to_string(c.peer)
                             : n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                               ? "no ack within " + std::to_string(io_timeout_ms_) + " ms"
                               : sys_error("waiting for acks"));
    return false;
  }
  return true;
}

caf::error tcp_backend::check_shape(const endpoint_desc& peer, int32_t device_a,
                                    int32_t device_b, size_t ops, const char* batch,
                                    const char* what) const {
  if (peer.transport != "tcp")
    return make_error(errc::invalid_argument,
                      "tcp backend cannot reach a '" + peer.transport + "' endpoint");
  if (device_a >= 0 || device_b >= 0)
    return make_error(errc::unsupported, "tcp backend moves host memory only");
  if (ops == 0 || ops > max_ops)
    return make_error(errc::invalid_argument,
                      std::string{batch} + " with " + std::to_string(ops) + " " + what);
  return caf::none;
}

tcp_backend::connection* tcp_backend::connection_for(const endpoint_desc& peer,
                                                     post_result& out) {
  auto& address = peer.address;
  std::string reason;
  auto fresh = [&]() -> connection* {
    auto* c = connection_to(address, peer.owner, reason);
    if (c != nullptr)
      c->peer = peer.owner;
    return c;
  };
  auto* c = fresh();
  if (c != nullptr && c->unacked.empty() && closed_by_peer(c->fd)) {
    // The receiver closed it while it was idle: start over on a fresh one.
    fail_connection(address, "closed while idle");
    c = fresh();
  }
  // Bounded pipelining: a peer that acks slowly pushes back.
  if (c != nullptr && c->unacked.size() >= max_unacked && pump_acks(address, false)
      && c->unacked.size() >= max_unacked) {
    out = post_result::would_block();
    return nullptr;
  }
  if (c != nullptr && out_.find(address) == out_.end())
    c = fresh(); // the connection failed while reading acks: start over
  if (c == nullptr)
    out = post_result::failed(
      make_error(errc::transport_error, "tcp to " + address + ": " + reason));
  return c;
}

post_result tcp_backend::posted_as(xfer_id id) {
  auto r = posted_.find(id);
  if (r == posted_.end() || r->second.status != xfer_status::failed)
    return post_result::in_progress(id);
  // A refused batch is the batch's fault, not the path's (another path
  // would be refused too): a code `is_path_fault` says no to.
  auto err = make_error(r->second.refused ? errc::out_of_range : errc::transport_error,
                        r->second.reason);
  posted_.erase(r);
  return post_result::failed(std::move(err));
}

post_result tcp_backend::post(const write_batch& batch) {
  // Strided writes move as the plain writes they stand for (no caps
  // `strided_writes`: a rank plans none for this backend alone).
  if (!batch.strided.empty())
    return post(expand_strided(batch));
  if (auto err = check_shape(batch.peer, batch.src_device_id, batch.dst_device_id,
                             batch.ops.size(), "batch", "writes"))
    return post_result::failed(std::move(err));
  {
    auto regions = regions_.read();
    size_t hint = 0;
    for (size_t i = 0; i < batch.ops.size(); ++i)
      if (!regions.covers(batch.ops[i].src_addr, batch.ops[i].size_bytes, hint))
        return post_result::failed(
          make_error(errc::not_registered,
                     "write " + std::to_string(i) + ": source range "
                       + region_table::range(batch.ops[i].src_addr, batch.ops[i].size_bytes)
                       + " is outside the sender's registered memory"));
  }
  // From here on the batch has an id: a failure this post finds is answered
  // at once (`posted_as`), a later one by poll, each with the connection's
  // reason (a refusal read from the peer's ack included).
  auto id = next_xfer_++;
  auto& peer = batch.peer.address;
  post_result early;
  auto* c = connection_for(batch.peer, early);
  if (c == nullptr)
    return early;
  wire_header h{wire_magic, wire_version, 0, id, batch.room,
                static_cast<uint32_t>(batch.ops.size()), 0, batch.total_bytes()};
  wire_key key{batch.key};
  std::vector<wire_op> ops;
  ops.reserve(batch.ops.size());
  for (auto& op : batch.ops)
    ops.push_back(wire_op{op.dst_addr, op.size_bytes});
  c->unacked.push_back(id);
  posted_[id] = result{xfer_status::in_progress, {}, peer, monotonic_ms() + io_timeout_ms_};
  std::vector<iovec> iov;
  iov.reserve(3 + batch.ops.size());
  add_iov(iov, &h, sizeof(h));
  add_iov(iov, &key, sizeof(key));
  add_iov(iov, ops.data(), ops.size() * sizeof(wire_op));
  for (auto& op : batch.ops)
    add_iov(iov, reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
  if (!send_all(c->fd, iov)) {
    int err = errno;
    // A send that found no room for a stall's length: the path does not
    // drain (a dead link); waiting longer would stall every other path too.
    // Otherwise the receiver closed: one that refused a batch said why in
    // its ack first, which is read (it has arrived), so this batch fails
    // with that reason if it is ours.
    auto send_error = err == EAGAIN || err == EWOULDBLOCK
                        ? "the path took no bytes for " + std::to_string(stall_ms()) + " ms"
                        : sys_error("send");
    if (err == EAGAIN || err == EWOULDBLOCK || pump_acks(peer, false))
      fail_connection(peer, send_error);
    if (posted_[id].status == xfer_status::in_progress)
      posted_[id] = result{xfer_status::failed, "tcp to " + peer + ": " + send_error, peer, 0};
  }
  return posted_as(id);
}

bool tcp_backend::serve_read(int fd, rank_id reader, uint64_t xfer, room_id room, uint64_t total,
                             const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::string bad;
  // Registered, and granted to this reader for a live room: checked before
  // a byte leaves; the view and the permit are held while the bytes go, so
  // nothing is deregistered or revoked (the room's pages freed) under them.
  auto regions = regions_.read();
  uint64_t sum = 0;
  size_t hint = 0;
  for (size_t i = 0; i < ranges.size() && bad.empty(); ++i) {
    auto [addr, size] = ranges[i];
    if (size == 0 || !regions.covers(addr, size, hint))
      bad = "read " + std::to_string(i) + ": source range " + region_table::range(addr, size)
            + " is outside rank " + std::to_string(owner_) + "'s registered memory";
    sum += size;
  }
  if (bad.empty() && sum != total)
    bad = "read request announces " + std::to_string(total) + " bytes but its reads sum to "
          + std::to_string(sum);
  grant_table::permit permit;
  if (bad.empty())
    permit = read_grants_.admit(room, reader, ranges, bad);
  if (!bad.empty()) {
    // Nothing followed the request: the stream is intact.
    transport_warning_limited("tcp-refused-read", "tcp: rank " + std::to_string(owner_)
                                                    + " refuses a read: " + bad);
    send_ack(fd, xfer, ack_refused, bad);
    return true;
  }
  wire_ack ack{wire_magic, ack_data, xfer, 0, 0};
  std::vector<iovec> iov;
  iov.reserve(1 + ranges.size());
  add_iov(iov, &ack, sizeof(ack));
  for (auto& r : ranges)
    add_iov(iov, reinterpret_cast<const void*>(r.first), r.second);
  return send_all(fd, iov);
}

post_result tcp_backend::post_read(const read_batch& batch) {
  if (auto err = check_shape(batch.peer, batch.remote_device_id, batch.local_device_id,
                             batch.ops.size(), "read batch", "reads"))
    return post_result::failed(std::move(err));
  pending_read r;
  {
    auto regions = regions_.read();
    size_t hint = 0;
    for (size_t i = 0; i < batch.ops.size(); ++i) {
      auto& op = batch.ops[i];
      if (op.size_bytes == 0 || !regions.covers(op.local_addr, op.size_bytes, hint))
        return post_result::failed(
          make_error(errc::out_of_range, "read " + std::to_string(i) + ": destination range "
                                           + region_table::range(op.local_addr, op.size_bytes)
                                           + " is outside the reader's registered memory"));
      r.to.emplace_back(op.local_addr, op.size_bytes);
      r.total += op.size_bytes;
    }
  }
  auto id = next_xfer_++;
  auto& peer = batch.peer.address;
  post_result early;
  auto* c = connection_for(batch.peer, early);
  if (c == nullptr)
    return early;
  wire_header h{wire_magic, wire_read_version, 0, id, batch.room,
                static_cast<uint32_t>(batch.ops.size()), 0, r.total};
  std::vector<wire_op> ops;
  ops.reserve(batch.ops.size());
  for (auto& op : batch.ops)
    ops.push_back(wire_op{op.remote_addr, op.size_bytes});
  c->unacked.push_back(id);
  reads_[id] = std::move(r);
  posted_[id] = result{xfer_status::in_progress, {}, peer, monotonic_ms() + io_timeout_ms_};
  std::vector<iovec> iov;
  add_iov(iov, &h, sizeof(h));
  add_iov(iov, ops.data(), ops.size() * sizeof(wire_op));
  if (!send_all(c->fd, iov)) {
    auto send_error = sys_error("send");
    fail_connection(peer, send_error);
  }
  return posted_as(id);
}

void tcp_backend::land_read(connection& c, xfer_id id, pending_read& r) {
  // The answer's bytes are at the front of the inbox. A read released
  // meanwhile (its room concluded here) lands nothing.
  if (!r.released) {
    auto regions = regions_.read();
    size_t at = 0;
    bool still = true;
    size_t hint = 0;
    for (auto& [addr, size] : r.to)
      still = still && regions.covers(addr, size, hint);
    for (auto& [addr, size] : r.to) {
      if (still)
        std::memcpy(reinterpret_cast<void*>(addr), c.inbox.data() + at, size);
      at += size;
    }
    if (auto p = posted_.find(id); p != posted_.end())
      p->second = still ? result{xfer_status::done, {}, p->second.address, 0}
                        : result{xfer_status::failed,
                                 "tcp: the reader's memory was deregistered under the read",
                                 p->second.address, 0};
  }
  c.inbox.erase(0, r.total);
}

xfer_status tcp_backend::poll(xfer_id id, std::string& reason) {
  auto i = posted_.find(id);
  if (i == posted_.end()) {
    reason = "unknown transfer id " + std::to_string(id);
    return xfer_status::failed;
  }
  if (i->second.status == xfer_status::in_progress) {
    auto address = i->second.address;
    auto deadline = i->second.deadline_ms;
    if (pump_acks(address, false) && posted_[id].status == xfer_status::in_progress
        && monotonic_ms() >= deadline)
      fail_connection(address, "no ack within " + std::to_string(io_timeout_ms_) + " ms");
    i = posted_.find(id);
  }
  reason = i->second.reason;
  return i->second.status;
}

bool tcp_backend::refused(xfer_id id) const {
  auto i = posted_.find(id);
  return i != posted_.end() && i->second.refused;
}

void tcp_backend::release(xfer_id id) {
  posted_.erase(id);
  if (auto r = reads_.find(id); r != reads_.end())
    r->second.released = true;
}

} // namespace kvroom::detail
