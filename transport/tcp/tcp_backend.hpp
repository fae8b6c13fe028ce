#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvroom/transport/auth/membership_gate.hpp"
#include "kvroom/api/secret.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/region_table.hpp"
#include "kvroom/transport/grants.hpp"

namespace kvroom::detail {

/// Data plane between hosts over plain TCP sockets.
///
/// Receiving: a membership gate (auth/membership_gate.hpp) accepts peers
/// on one thread and challenges each: it must answer a fresh nonce with an
/// HMAC keyed by the deployment secret, naming its rank, within
/// `handshake_ms`, or it is closed unread (tcp_handshake.hpp). A stranger
/// costs no thread, so a connect/close loop runs at the kernel's pace. A
/// member's connection gets a thread of its own (bounded, reaped once its
/// connection ended), which reads a batch header and its write descriptors,
/// validates every destination range against this rank's registered memory
/// before a byte is read into it, receives the payload straight into place
/// and acks. A bad batch is refused with a reason and the connection closed.
/// Once a batch's first byte arrived, all of it must arrive within
/// `io_timeout_ms` (a trickling peer cannot hold a slot); an idle
/// connection is closed after `idle_ms` (or `io_timeout_ms`, if longer); descriptors are read as they
/// come, so a header announcing many writes costs nothing until they
/// arrive; refusals are logged at most once a second, with a count.
///
/// Several addresses (`hosts`) are several paths: each has its listener
/// and gate, and all share one table of registered memory and grants, so a
/// batch may arrive on any of them.
///
/// Sending: one connection per peer address; `post` writes the whole batch (on the
/// worker's dedicated thread) and returns; acks are read, without blocking,
/// by `poll`, so up to `max_unacked` batches per peer are in flight and the
/// round trip of one ack does not idle the stream. A batch unacked after
/// `io_timeout_ms` fails, and with it its connection.
class tcp_backend final : public backend {
public:
  /// Listens on each of `hosts` (IPv4 addresses: one path per network
  /// interface); a peer reaches it on any of them.
  tcp_backend(rank_id owner, std::vector<std::string> hosts, uint32_t io_timeout_ms,
              deployment_secret secret = {});
  ~tcp_backend() override;

  /// Binds the listeners; the backend is unusable when this fails.
  caf::error start();

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  std::vector<endpoint_desc> endpoints() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  post_result post(const write_batch& batch) override;
  bool enforces_grants() const override {
    return true;
  }
  bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges) override {
    return grants_.grant(room, sender, std::move(ranges));
  }
  void revoke(room_id room) override {
    grants_.revoke(room);
  }
  /// A pull: a read request on the connection to the peer, answered by its
  /// connection thread with the bytes (inside what it granted this rank for
  /// the room) or a refusal; the bytes land in this rank's registered
  /// memory when `poll` reads the answer.
  post_result post_read(const read_batch& batch) override;
  bool enforces_read_grants() const override {
    return true;
  }
  bool grant_read(room_id room, rank_id reader, std::vector<byte_range> ranges) override {
    return read_grants_.grant(room, reader, std::move(ranges));
  }
  void revoke_read(room_id room) override {
    read_grants_.revoke(room);
  }
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  bool refused(xfer_id id) const override;

  /// Most writes in one batch, and connections of proven members.
  static constexpr uint32_t max_ops = 1u << 20;
  static constexpr size_t max_connections = 256;
  /// Connections still in their handshake, beside those: what strangers
  /// can hold (each for at most `handshake_ms`).
  static constexpr size_t max_handshakes = 64;
  /// Connections per authenticated sender and address (it uses one; more
  /// while an old one winds down): a member cannot take the others' slots.
  static constexpr size_t max_per_peer = 4;
  /// Addresses one rank listens on.
  static constexpr size_t max_hosts = 8;
  static constexpr size_t max_unacked = 16;
  /// A member's connection idle this long (or `io_timeout_ms`, if longer)
  /// is closed.
  static constexpr uint32_t idle_ms = 30'000;
  /// A connection that has not proven membership by then is closed.
  static constexpr uint32_t handshake_ms = 1000;

private:
  /// Longest a send waits for room in a path's socket (and a connect): a
  /// quarter of `io_timeout_ms`, at least 50 ms.
  uint32_t stall_ms() const noexcept {
    return std::max<uint32_t>(50, io_timeout_ms_ / 4);
  }

  /// One address this rank listens on, with its membership gate.
  struct listener {
    std::string host;
    uint16_t port = 0;
    int fd = -1;
    std::unique_ptr<membership_gate> gate;
  };
  caf::error start(listener& l);

  /// One member's inbound connection and the thread serving it; reaped once
  /// done, so connections that come and go cost nothing that lasts.
  struct inbound {
    int fd = -1; ///< closed by its thread when done (under conns_mtx_)
    std::thread thread;
    bool done = false; ///< under conns_mtx_
    rank_id sender = -1;
  };

  /// On the gate's thread: a connection that proved it is `sender`'s.
  void on_member(int fd, rank_id sender);
  /// Joins the threads of ended connections; under conns_mtx_.
  void reap_locked();
  void serve(inbound& conn, rank_id sender);
  /// Answers one read request (its descriptors read): the bytes, or a
  /// refusal that leaves the stream intact. False when the connection failed.
  bool serve_read(int fd, rank_id reader, uint64_t xfer, room_id room, uint64_t total,
                  const std::vector<std::pair<uint64_t, uint64_t>>& ranges);
  struct connection {
    int fd = -1;
    rank_id peer = -1;
    std::deque<xfer_id> unacked;  ///< sent, in order, ack not applied yet
    std::string inbox;            ///< ack bytes read but not parsed yet
  };
  /// What `post` answers for batch `id` it has just posted: `in_progress`,
  /// or `failed` (and the id forgotten) when it already knows the batch
  /// failed: a send that found the connection gone.
  post_result posted_as(xfer_id id);
  connection* connection_to(const std::string& address, rank_id peer, std::string& reason);
  /// A batch's peer, memory kinds and op count (writes and reads alike).
  caf::error check_shape(const endpoint_desc& peer, int32_t device_a, int32_t device_b,
                         size_t ops, const char* batch, const char* what) const;
  /// The connection a batch to `peer` goes on, ready for it; or null with
  /// `out` set: would_block (nothing posted), or failed (no connection).
  connection* connection_for(const endpoint_desc& peer, post_result& out);
  /// Reads what acks arrived (blocking: until none is outstanding); false
  /// when the connection failed, which fails every batch still on it.
  bool pump_acks(const std::string& address, bool block);
  bool apply_acks(connection& c, const std::string& address, std::string& why);
  void fail_connection(const std::string& address, const std::string& why);

  rank_id owner_;
  deployment_secret secret_;
  uint32_t io_timeout_ms_;
  std::vector<listener> listeners_;
  std::atomic<bool> stopping_{false};
  // Members' inbound connections (stable addresses: each thread holds its
  // own), for the per-peer bound, reaping and shutdown.
  std::mutex conns_mtx_;
  std::list<inbound> inbound_;
  region_table regions_;
  grant_table grants_;
  /// What peers may read of this rank's memory (pulls), per room.
  grant_table read_grants_{1u << 20, "read"};
  // Sending side: used by the one worker thread only.
  std::unordered_map<std::string, connection> out_;
  struct result {
    xfer_status status;
    std::string reason;
    std::string address;
    uint64_t deadline_ms = 0;
    bool refused = false;  ///< the receiver refused the batch, not the path
  };
  std::unordered_map<xfer_id, result> posted_;
  /// Reads in flight: where their bytes go. Kept until their answer is
  /// consumed, even once released (the bytes are then read and dropped).
  struct pending_read {
    std::vector<std::pair<uint64_t, uint64_t>> to;  ///< local address, size
    uint64_t total = 0;
    bool released = false;
  };
  std::unordered_map<xfer_id, pending_read> reads_;
  /// Lands a read's answer (its bytes at the front of `c.inbox`).
  void land_read(connection& c, xfer_id id, pending_read& r);
  xfer_id next_xfer_ = 1;
};

} // namespace kvroom::detail
