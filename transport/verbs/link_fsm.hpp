#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/ids.hpp"

namespace kvroom::verbs {

/// Where one end of an RC queue pair is: what the other end needs to move
/// its queue pair to RTR (ibv_qp_attr's dest_qp_num, rq_psn, ah_attr).
struct qp_address {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint8_t mtu = 0;  ///< enum ibv_mtu value (1 = 256 B .. 5 = 4096 B)
};

/// A registered range a peer may write: address, length and rkey.
struct remote_region {
  uint64_t addr = 0;
  uint64_t size_bytes = 0;
  uint32_t rkey = 0;
};

/// The one connection message, in two kinds: a request from the end that
/// needs the link, and the reply. Both carry the sender's queue pair and the
/// memory it exposes, so either end can write once connected.
struct hello {
  enum class kind : uint8_t { request = 1, reply = 2 };
  kind what = kind::request;
  uint64_t epoch = 0;  ///< the requester's attempt; a reply echoes it
  qp_address qp;
  std::vector<remote_region> regions;
};

/// Bounds on what a peer may send (a limit on everything).
constexpr size_t max_hello_regions = 1u << 16;

/// The versioned wire encoding of `hello` (little-endian).
std::string encode(const hello& x);

/// Decodes a payload; anything short, long, of another version or with
/// impossible values is refused with a reason.
caf::expected<hello> decode(const std::string& payload);

/// The state of the link to one peer.
enum class link_state : uint8_t { idle, connecting, ready };

std::string to_string(link_state x);

/// One step for the backend to perform, in order.
struct link_step {
  enum class kind : uint8_t {
    create_qp,   ///< a fresh queue pair, moved to INIT
    destroy_qp,  ///< tear down the current one; its work fails
    connect_qp,  ///< move it to RTR and RTS towards `remote`
    send_request,
    send_reply,
  };
  kind what;
  qp_address remote;  ///< connect_qp only
  uint64_t epoch = 0; ///< send_request / send_reply
};

/// What a post that needs the link should do now.
enum class link_verdict : uint8_t { go, wait, fail };

/// The connection state machine of one queue pair to one peer, without any
/// verbs call, so it is tested on its own. The backend feeds it events and
/// performs the steps it returns.
///
/// Protocol: the end that needs the link creates a queue pair and sends a
/// request; the other end creates (or reuses) one, connects it and replies;
/// the reply connects the requester. When both ends request at once, the
/// lower rank's request wins and the higher rank answers it with the queue
/// pair it already created. A request to an end that is ready with another
/// queue pair means the peer re-established: the old one is torn down. A
/// queue-pair error tears it down; the next need reconnects.
class link_fsm {
public:
  link_fsm(rank_id self, rank_id peer, uint32_t connect_timeout_ms);

  struct result {
    std::vector<link_step> steps;
    link_verdict verdict = link_verdict::wait;
    std::string reason;  ///< set with `fail`
  };

  /// A post needs the link.
  result need(uint64_t now_ms);

  result on_hello(const hello& msg, uint64_t now_ms);

  /// The queue pair reported an error (a failed completion, a failed
  /// transition).
  result on_qp_error(const std::string& reason);

  link_state state() const noexcept {
    return state_;
  }

  /// The peer queue pair this link is connected to (ready only).
  uint32_t remote_qpn() const noexcept {
    return remote_qpn_;
  }

  /// Why the link went down last; empty if it never did.
  const std::string& last_error() const noexcept {
    return last_error_;
  }

private:
  rank_id self_;
  rank_id peer_;
  uint32_t connect_timeout_ms_;
  link_state state_ = link_state::idle;
  uint64_t epoch_ = 0;
  uint64_t deadline_ms_ = 0;
  uint32_t remote_qpn_ = 0;
  std::string last_error_;
};

} // namespace kvroom::verbs
