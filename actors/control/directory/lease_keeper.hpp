#pragma once

// Keeps the process's lease in the directory's store alive from a thread of
// its own, so that no registration or watch the directory actor is busy
// with (each a blocking call to the store) delays a renewal. It tells the directory one thing: that
// the store lost the lease and a new one replaces it (`lease_atom, old, new`).

#include <atomic>
#include <cstdint>
#include <thread>

#include "caf/actor.hpp"
#include "caf/atom.hpp"

#include "kvroom/actors/control/directory/lease_timing.hpp"
#include "kvroom/actors/control/directory/store_client.hpp"

namespace kvroom {

/// lease_keeper -> directory: the store lost lease `old`; `fresh` replaces it.
using lease_atom = caf::atom_constant<caf::atom("lease")>;

class lease_keeper {
public:
  /// Starts renewing `lease` (granted with `timing.ttl_s()`); `target`
  /// hears of a replacement.
  lease_keeper(const store_connector& connect, std::string name, lease_timing timing,
               int64_t lease, caf::actor target);

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

  std::unique_ptr<store_client> client_;
  std::string name_;
  lease_timing timing_;
  std::atomic<int64_t> lease_;
  caf::actor target_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

} // namespace kvroom
