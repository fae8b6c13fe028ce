#pragma once

// The stores a deployment's directory can live in, one row each, chosen by
// the scheme of `directory_options::url`. A store is a folder of its own
// (etcd/) that provides a row; adding one is that folder and its line in
// directory_stores.cpp.

#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/config.hpp"

namespace kvroom {

class membership;

struct directory_store {
  /// The URL schemes it serves ("etcd", "etcds").
  std::vector<std::string> schemes;
  /// Reaches the store (retrying until `timeout_ms`) and spawns the
  /// directory actor every rank of the process registers with. An error
  /// says what failed how.
  caf::expected<caf::actor> (*spawn)(caf::actor_system& sys, const directory_options& opts,
                                     std::shared_ptr<const membership> members,
                                     uint32_t max_ranks, uint32_t timeout_ms);
  /// How long a rank may wait for its registration: a store that holds a
  /// dead rank's id until its lease ends makes a replacement wait that long.
  uint32_t (*registration_wait_ms)(const directory_options& opts);
};

/// Every store this build has.
const std::vector<directory_store>& directory_stores();

/// The store serving `url`'s scheme, or an error naming the schemes known.
caf::expected<const directory_store*> directory_store_of(const std::string& url);

} // namespace kvroom
