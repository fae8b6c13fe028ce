#pragma once

#include <cstddef>
#include <cstdint>

namespace kvroom {

/// Every time rule of the control plane's links and registration in one
/// place, as `room_timing` is for rooms. The link table and the control
/// actor's registration take time and jitter as arguments (tests pass them
/// in); only the control actor reads the clock and draws the jitter.
class link_timing {
public:
  link_timing() = default;

  link_timing(uint32_t query_timeout_ms, uint32_t idle_link_ms)
    : attempt_ms_(query_timeout_ms < 500 ? 500 : query_timeout_ms), idle_ms_(idle_link_ms) {
    // nop
  }

  /// How long one attempt may take: a connect to a peer's (or the
  /// registry's) control endpoint, or a handshake once connected. The
  /// query timeout, but at least 500 ms.
  uint64_t attempt_ms() const noexcept {
    return attempt_ms_;
  }

  /// How long a link may carry nothing before this side asks its peer to
  /// close it (0: links stay).
  uint64_t idle_ms() const noexcept {
    return idle_ms_;
  }

  /// Connected, and no answer to a handshake message for this long: it was
  /// lost (CAF drops what was in flight on a connection it closes as a
  /// duplicate); the attempt starts again.
  static constexpr uint64_t stalled_ms = 500;

  /// Nothing published at a peer's endpoint (it is still starting): the
  /// next attempt after this.
  static constexpr uint64_t unpublished_ms = 200;

  /// A peer failed the membership proof (a different secret, or a stranger
  /// on its port): the next attempt after this.
  static constexpr uint64_t bad_proof_ms = 1000;

  /// Two nodes dialling each other at once make CAF 0.17 close one
  /// connection as a duplicate, and what was in flight on it is lost. Of
  /// two ranks the lower id dials at once; the higher yields: it dials this
  /// long after it wanted the link, unless the peer's link came first.
  /// `draw` is a random number.
  ///
  /// The 20 ms floor is what protects: the lower id's connect and
  /// handshake (a few round trips, TLS included) are over by then. The
  /// jitter above it only spreads many dialers of one rank over its accept
  /// queue, while the first room between a decode rank and a prefill rank
  /// waits for all of it whenever the prefill rank did not dial first (its
  /// rooms want no link to decode before one reaches them, unless they
  /// declare a layout): 20-119 ms read 44-135 ms from the first open to the
  /// first room done in `kvroom-bench processes`, 20-39 ms 34-64 ms.
  static uint64_t yield_ms(uint32_t draw) noexcept {
    return 20 + draw % 20;
  }

  /// The pause after the `attempts`-th failed connect: between half and all
  /// of 50 ms doubled per attempt, at most 1 s. Jittered: a rank that
  /// restarts is dialled by every rank that needs it, and they should not
  /// come back in step.
  static uint64_t dial_backoff_ms(uint32_t attempts, uint32_t draw) noexcept {
    uint64_t cap = 50ull << (attempts < 5 ? attempts : 5);
    if (cap > 1000)
      cap = 1000;
    return cap / 2 + draw % (cap / 2 + 1);
  }

  /// Handshakes that others started and did not finish, at most this many
  /// at once, each for at most `accepting_ms`: what a stranger can make a
  /// rank hold.
  static constexpr size_t max_accepting = 1024;
  static constexpr uint64_t accepting_ms = 5000;

  /// The pause before the next reconnect to a lost registry: 50 ms, doubled
  /// after each (`previous`, 0 at first), at most 500 ms.
  static uint32_t reconnect_ms(uint32_t previous) noexcept {
    if (previous == 0)
      return 50;
    return previous * 2 < 500 ? previous * 2 : 500;
  }

  /// The pause before registering again after a registry that did not
  /// answer in time (many ranks starting at once keep it busy): 50 to
  /// 299 ms, jittered.
  static uint64_t rejoin_ms(uint32_t draw) noexcept {
    return 50 + draw % 250;
  }

  /// A joining rank tries again only with at least this much of its
  /// registration window left.
  static constexpr uint64_t join_slack_ms = 200;

  /// At most one log line per this long about strangers (the rest are
  /// counted into the next line).
  static constexpr uint64_t stranger_log_ms = 1000;

private:
  uint64_t attempt_ms_ = 500;
  uint64_t idle_ms_ = 0;
};

} // namespace kvroom
