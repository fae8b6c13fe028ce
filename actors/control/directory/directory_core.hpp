#pragma once

// A deployment's directory kept in a store (store_client.hpp: etcd is one).
// To this process's rank managers it is a registry like the built-in one
// (same handshake, same `directory_update` and `rank_down` messages), so a
// manager cannot tell them apart; behind it, every rank of the process has
// its entry under the deployment prefix on the process's one lease, and a
// watch of the prefix tells every change. Nothing here knows which store.
//
//   register  a transaction: read the prefix, apply the admission rules
//             (directory_rules.hpp) to the verified entries, put the entry
//             only if no key under the prefix changed since the read;
//             retried (bounded, jittered) when one did.
//   watch     a thread streams the prefix's changes; entries are verified
//             (signed_entry.hpp) before they count. A deleted entry is a
//             rank gone for good (`rank_down{final}`): its lease expired
//             or it left.
//   lease     renewed every third of its TTL (lease_keeper.hpp); when the
//             store lost it (this process was cut off longer than the TTL)
//             a new one is taken and every local rank registers again.

#include <cstdint>
#include <memory>
#include <string>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/directory/store_client.hpp"
#include "kvroom/actors/control/membership.hpp"

namespace kvroom {

struct directory_core_options {
  /// What logs and errors call it ("etcd directory").
  std::string name = "directory";
  /// The deployment's keys live under this (several deployments can share
  /// one store).
  std::string prefix = "/kvroom/default";
  /// A process that stops renewing is gone this long after (rounded up to
  /// whole seconds, at least 2: etcd's own floor).
  uint32_t lease_ttl_ms = 5000;
  uint32_t max_ranks = 4096;
  /// A registration the store does not answer (unreachable, overloaded) is
  /// tried again this long before it fails.
  uint32_t registration_timeout_ms = 15'000;
  /// The store's calls' ordinary limit (lease renewals derive theirs from
  /// it: lease_timing.hpp).
  uint32_t request_timeout_ms = 3000;
};

/// Reaches the store through `connect` (retrying with backoff until
/// `timeout_ms`), takes the process's lease, reads the prefix and spawns the
/// directory actor (its own thread; its watch and lease keeper one each). An
/// error says what failed how.
caf::expected<caf::actor> spawn_directory(caf::actor_system& sys, directory_core_options opts,
                                          store_connector connect,
                                          std::shared_ptr<const membership> members,
                                          uint32_t timeout_ms);

} // namespace kvroom
