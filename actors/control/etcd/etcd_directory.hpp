#pragma once

// The deployment's directory on etcd. To this process's rank managers it is
// a registry like the built-in one (same handshake, same `directory_update`
// and `rank_down` messages), so a manager cannot tell them apart; behind it,
// every rank of the process has its entry under the deployment prefix on
// the process's one lease, and a watch of the prefix tells every change.
//
//   register  a transaction: read the prefix, apply the admission rules
//             (directory_rules.hpp) to the verified entries, put the entry
//             only if no key under the prefix changed since the read;
//             retried (bounded, jittered) when one did.
//   watch     a thread streams the prefix's changes; entries are verified
//             (signed_entry.hpp) before they count. A deleted entry is a
//             rank gone for good (`rank_down{final}`): its lease expired
//             or it left.
//   lease     renewed every third of its TTL; when etcd lost it (this
//             process was cut off longer than the TTL) a new one is taken
//             and every local rank registers again.

#include <cstdint>
#include <memory>
#include <string>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/directory_stores.hpp"
#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/actors/control/membership.hpp"

namespace kvroom {

struct etcd_directory_options {
  etcd_options etcd;
  /// The deployment's keys live under this (several deployments can share
  /// one etcd).
  std::string prefix = "/kvroom/default";
  /// A process that stops renewing is gone this long after (rounded up to
  /// whole seconds, at least 2: etcd's own floor).
  uint32_t lease_ttl_ms = 5000;
  uint32_t max_ranks = 4096;
  /// A registration etcd does not answer (unreachable, overloaded) is
  /// tried again this long before it fails.
  uint32_t registration_timeout_ms = 15'000;
};

/// Connects to etcd (retrying with backoff until `timeout_ms`), takes the
/// process's lease, reads the prefix and spawns the directory actor (its
/// own thread; its watch another). An error says which member failed how.
caf::expected<caf::actor> spawn_etcd_directory(caf::actor_system& sys,
                                               etcd_directory_options opts,
                                               std::shared_ptr<const membership> members,
                                               uint32_t timeout_ms);

/// etcd's row of the directory stores (`etcd://`, `etcds://`).
directory_store etcd_directory_store();

} // namespace kvroom
