#pragma once

// Every time rule of a process's etcd lease, derived from its TTL in one
// place, and the renewal rule as a plain class with time passed in (tested
// without etcd or threads; lease_keeper carries it out).
//
// Why these numbers. etcd's new leader refreshes every lease to a full TTL
// when it takes over, so an election by itself costs no lease: what costs
// one is a renewal stuck on a member that cannot answer (cut off, frozen,
// leaderless) for longer than the TTL has left. So one member gets a sixth
// of the TTL to answer before the next is asked, a round over three members
// fits in half the TTL, and a failed round is tried again after a short
// pause, not a period later.

#include <cstdint>

namespace kvroom {

class lease_timing {
public:
  /// `ttl_ms` as configured (rounded up to whole seconds, at least 2:
  /// etcd's own floor); `request_timeout_ms` the calls' ordinary limit.
  lease_timing(uint32_t ttl_ms, uint32_t request_timeout_ms) noexcept;

  /// The lease's TTL as etcd is asked for it.
  int64_t ttl_s() const noexcept {
    return ttl_s_;
  }

  /// Renewed this often after a renewal etcd confirmed: a third of the TTL.
  uint32_t renew_every_ms() const noexcept {
    return static_cast<uint32_t>(ttl_s_ * 1000 / 3);
  }

  /// How long one member may take to answer a renewal before the next is
  /// asked: a sixth of the TTL, at most the ordinary call timeout, at least
  /// 200 ms.
  uint32_t call_timeout_ms() const noexcept;

  /// The pause after a round in which no member answered.
  uint32_t retry_ms() const noexcept {
    return 100;
  }

private:
  int64_t ttl_s_;
  uint32_t request_timeout_ms_;
};

/// The renewal rule of one lease. The lease is lost only when etcd says so
/// (a renewal answered with 0 seconds left); calls that fail are retried
/// and never read as a loss, however long they fail.
class lease_renewal {
public:
  lease_renewal(lease_timing timing, uint64_t now_ms) noexcept;

  /// When the next renewal is due.
  uint64_t due_ms() const noexcept {
    return due_ms_;
  }

  enum class outcome {
    renewed,
    /// etcd does not have the lease: it expired or was revoked, and every
    /// key on it is gone.
    lost,
  };

  /// etcd answered a renewal with `ttl_s` seconds left.
  outcome answered(int64_t ttl_s, uint64_t now_ms) noexcept;

  /// No member answered. True when this is worth a warning: the first
  /// failure after a success, then at most once per TTL.
  bool failed(uint64_t now_ms) noexcept;

  /// A new lease replaces the lost one.
  void replaced(uint64_t now_ms) noexcept;

  /// Since when etcd last confirmed the lease (0: never).
  uint64_t confirmed_ms() const noexcept {
    return confirmed_ms_;
  }

  /// How many rounds failed since the last confirmation.
  uint32_t failures() const noexcept {
    return failures_;
  }

private:
  lease_timing timing_;
  uint64_t due_ms_;
  uint64_t confirmed_ms_;
  uint64_t warned_ms_ = 0;
  uint32_t failures_ = 0;
};

} // namespace kvroom
