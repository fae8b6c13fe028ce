#pragma once

// Keeps the process's etcd lease alive from a thread of its own, so that no
// registration or watch the directory actor is busy with (each a blocking
// call to etcd) delays a renewal. It tells the directory one thing: that
// etcd lost the lease and a new one replaces it (`lease_atom, old, new`).

#include <atomic>
#include <cstdint>
#include <thread>

#include "caf/actor.hpp"
#include "caf/atom.hpp"

#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/actors/control/etcd/lease_timing.hpp"

namespace kvroom {

/// lease_keeper -> directory: etcd lost lease `old`; `fresh` replaces it.
using lease_atom = caf::atom_constant<caf::atom("lease")>;

class lease_keeper {
public:
  /// Starts renewing `lease` (granted with `timing.ttl_s()`); `target`
  /// hears of a replacement.
  lease_keeper(etcd_options opts, lease_timing timing, int64_t lease, caf::actor target);

  ~lease_keeper();

  lease_keeper(const lease_keeper&) = delete;
  lease_keeper& operator=(const lease_keeper&) = delete;

  /// The lease now held (a replacement is visible here before its message
  /// arrives).
  int64_t lease() const noexcept {
    return lease_.load();
  }

  /// Stops renewing and joins the thread (within one call's timeout).
  void stop();

private:
  void run();

  etcd_gateway client_;
  lease_timing timing_;
  std::atomic<int64_t> lease_;
  caf::actor target_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

} // namespace kvroom
