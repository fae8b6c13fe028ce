#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvroom/transport/auth/door_handshake.hpp"

namespace kvroom {

/// Holds connections until they prove membership, all on one thread of its
/// own, then passes each socket on. Used at two doors: the control endpoints
/// (CAF's middleman accepts, `admit` hands the socket over) and the tcp data
/// plane (the gate accepts from the listener itself, `listen`), each with
/// its own handshake (door_handshake.hpp).
///
/// A stranger costs no thread and nothing lasting: `max_pending`
/// connections in all, `max_per_host` from one address, each for at most
/// `deadline_ms` however slowly it trickles; past a bound a connection is
/// closed at once. A listener is drained until the kernel has nothing
/// queued, so a connect/close loop never finds the accept queue full (a
/// dropped SYN stalls the client a second). Refusals are logged at most once
/// a second, counted.
class membership_gate {
public:
  struct limits {
    size_t max_pending = 64;
    size_t max_per_host = 16;
    uint32_t deadline_ms = 1000;
  };

  /// How refusals read in the log and in the process's refusal counts.
  struct naming {
    /// Starts every refusal line, e.g. "control endpoint" or "tcp: rank 3".
    std::string label = "control endpoint";
    /// Rate-limiting kinds (log.hpp): for a full gate, for a failed proof.
    const char* full_kind = "control-gate";
    const char* proof_kind = "control-gate";
  };

  struct counters {
    uint64_t passed = 0;
    uint64_t refused_full = 0;
    uint64_t refused_proof = 0;
    uint64_t timed_out = 0;
  };

  /// A fresh handshake for each connection.
  using handshake_factory = std::function<std::unique_ptr<door_handshake>()>;

  /// Called on the gate's thread with a socket (blocking again) that
  /// proved membership, and the handshake it passed; it owns the socket
  /// from then on.
  using pass_fn = std::function<void(int fd, door_handshake& proven)>;

  membership_gate(handshake_factory make, limits lim);
  membership_gate(handshake_factory make, limits lim, naming names);
  ~membership_gate();

  membership_gate(const membership_gate&) = delete;
  membership_gate& operator=(const membership_gate&) = delete;

  /// Takes an accepted socket (any thread). Closed unless it proves
  /// membership in time; passed to `pass` if it does.
  void admit(int fd, pass_fn pass);

  /// Accepts from `listener` (bound, listening; the caller keeps it open
  /// until `stop`) on the gate's thread, every accepted socket admitted
  /// with `pass`. At most one listener per gate.
  void listen(int listener, pass_fn pass);

  /// Closes every pending connection and joins the thread; later admits
  /// close their socket at once, the listener is no longer read.
  void stop();

  counters stats() const;

  /// Connections held right now.
  size_t pending() const;

private:
  struct conn;

  void run();
  void wake();
  /// Takes a slot for `fd` (under the lock), or says why not.
  conn* take(int fd, pass_fn pass, std::string& why);
  /// Closes `fd` at once; `why` starts with the peer's address.
  void refuse_full(int fd, const std::string& why);
  void accept_all(std::vector<conn*>& held);
  /// Moves `c` on by what `ev` says is ready: true while it stays held.
  bool step(conn& c, short ev, int64_t now);
  void hand_over(conn& c);
  void release(const conn& c);
  void refuse(conn& c, const std::string& why, std::atomic<uint64_t>& counter);

  handshake_factory make_;
  limits limits_;
  naming names_;
  mutable std::mutex mtx_;
  std::vector<conn*> incoming_;            // admitted, not yet on the thread
  std::map<std::string, size_t> per_host_; // held, by peer address
  size_t held_ = 0;
  bool stopped_ = false;
  int listener_ = -1;
  pass_fn on_listener_;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<uint64_t> passed_{0}, refused_full_{0}, refused_proof_{0}, timed_out_{0};
};

} // namespace kvroom
