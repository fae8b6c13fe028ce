#pragma once

// One per process: how many links its ranks hold to each peer process. One
// CAF connection carries them all, so it may close only once the last of
// them went. The ranks' control actors tell the keeper; it owns the counts.

#include <unordered_map>

#include "caf/atom.hpp"
#include "caf/node_id.hpp"
#include "caf/stateful_actor.hpp"

namespace kvroom {

/// control -> keeper: a link to a rank of process `node` is up.
using link_up_atom = caf::atom_constant<caf::atom("linkup")>;

/// control -> keeper: a link to a rank of process `node` went (lost, or
/// closed as idle); with `close` the connection goes with the last one.
using link_gone_atom = caf::atom_constant<caf::atom("linkgone")>;

struct link_keeper_state {
  std::unordered_map<caf::node_id, size_t> links;
  /// Whether the last idle link takes its connection with it.
  bool close_idle = true;

  static inline const char* name = "kvroom.link_keeper";
};

/// (link_up_atom, node) and (link_gone_atom, node, bool close), from this
/// process only. With `close_idle` false it only counts. (It takes an
/// argument: CAF 0.17 spawns a function actor without one through a null
/// shared_ptr<tuple<>>, which UBSan reports.)
caf::behavior link_keeper(caf::stateful_actor<link_keeper_state>* self, bool close_idle);

} // namespace kvroom
