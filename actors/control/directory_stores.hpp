#pragma once

// The stores a deployment's directory can live in, one row each, chosen by
// the scheme of `directory_options::url`. A store is a folder of its own
// (etcd/): a `store_client` (directory/store_client.hpp) and a row that
// connects it; the directory itself (door, admission, push, lease, watch)
// is the one core over any of them. Adding a store is its folder and its
// line in directory_stores.cpp.

#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/directory/store_client.hpp"
#include "kvroom/api/config.hpp"

namespace kvroom {

class membership;

/// A store reached: how to make a client of it, and its calls' ordinary
/// limit.
struct store_connection {
  store_connector connect;
  uint32_t request_timeout_ms = 3000;
};

struct directory_store {
  /// The URL schemes it serves ("etcd", "etcds").
  std::vector<std::string> schemes;
  /// What logs and errors call a directory in it ("etcd directory").
  const char* name = "";
  /// The store `opts.url` names, with its TLS and auth from `opts`; an
  /// error says what in `opts` is wrong. Reaches nothing yet.
  caf::expected<store_connection> (*connect)(const directory_options& opts);
  /// How long a rank may wait for its registration: a store that holds a
  /// dead rank's id until its lease ends makes a replacement wait that long.
  uint32_t (*registration_wait_ms)(const directory_options& opts);
};

/// Every store this build has.
const std::vector<directory_store>& directory_stores();

/// The store serving `url`'s scheme, or an error naming the schemes known.
caf::expected<const directory_store*> directory_store_of(const std::string& url);

/// Reaches `store` as `opts` says (retrying until `timeout_ms`) and spawns
/// the directory core over it (directory/directory_core.hpp), the actor
/// every rank of the process registers with.
caf::expected<caf::actor> spawn_store_directory(caf::actor_system& sys,
                                                const directory_store& store,
                                                const directory_options& opts,
                                                std::shared_ptr<const membership> members,
                                                uint32_t max_ranks, uint32_t timeout_ms);

} // namespace kvroom
