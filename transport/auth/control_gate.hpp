#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvroom/transport/auth/gate_handshake.hpp"
#include "kvroom/transport/auth/secret.hpp"

namespace kvroom {

/// Holds accepted control-plane connections until they prove membership
/// (gate_handshake.hpp), on one thread of its own, then passes each socket
/// on. What a stranger can make it hold is bounded: `max_pending`
/// connections in all, `max_per_host` from one address, each for at most
/// `deadline_ms` however slowly it trickles; past a bound a connection is
/// closed at once. Refusals are logged at most once a second, counted.
class control_gate {
public:
  struct limits {
    size_t max_pending = 64;
    size_t max_per_host = 16;
    uint32_t deadline_ms = 1000;
  };

  struct counters {
    uint64_t passed = 0;
    uint64_t refused_full = 0;
    uint64_t refused_proof = 0;
    uint64_t timed_out = 0;
  };

  /// Called on the gate's thread with a socket that proved membership; it
  /// owns the socket from then on.
  using pass_fn = std::function<void(int fd)>;

  explicit control_gate(deployment_secret secret);
  control_gate(deployment_secret secret, limits lim);
  ~control_gate();

  control_gate(const control_gate&) = delete;
  control_gate& operator=(const control_gate&) = delete;

  /// Takes an accepted socket (any thread). Closed unless it proves
  /// membership in time; passed to `pass` if it does.
  void admit(int fd, pass_fn pass);

  /// Closes every pending connection and joins the thread; later admits
  /// close their socket at once.
  void stop();

  counters stats() const;

  /// Connections held right now.
  size_t pending() const;

private:
  struct conn;

  void run();
  void wake();
  void release(const conn& c);
  void refuse(conn& c, const std::string& why, std::atomic<uint64_t>& counter);

  deployment_secret secret_;
  limits limits_;
  mutable std::mutex mtx_;
  std::vector<conn*> incoming_;            // admitted, not yet on the thread
  std::map<std::string, size_t> per_host_; // held, by peer address
  size_t held_ = 0;
  bool stopped_ = false;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<uint64_t> passed_{0}, refused_full_{0}, refused_proof_{0}, timed_out_{0};
};

/// What became of a connection at a peer's gate.
struct gate_outcome {
  enum kind_t {
    passed,  ///< both proofs held; the socket is at CAF's first byte
    refused, ///< a proof failed (ours or the endpoint's): another secret
    failed,  ///< no answer in time, closed, not a gate: worth a retry
  };
  kind_t kind = failed;
  std::string why;
};

/// The client's side on a connected socket: answers the gate and checks
/// the server's proof, all by `deadline_ms` from now.
gate_outcome pass_gate(int fd, const deployment_secret& secret, uint32_t deadline_ms);

} // namespace kvroom
