#pragma once

// Node comparisons on the per-message path, without copying node ids.
//
// In CAF 0.17 `abstract_actor::node()` and `actor::node()` return a
// `caf::node_id` by value: every call counts the node's shared data up and
// down, one cache line that every thread of the process writes. Rooms and
// managers ask "is this sender (or destination) of this process?" for
// nearly every message; the actor's control block holds the id, and these
// read it there by reference.

#include "caf/abstract_actor.hpp"
#include "caf/actor.hpp"
#include "caf/actor_cast.hpp"
#include "caf/actor_control_block.hpp"
#include "caf/node_id.hpp"

namespace kvroom::detail {

inline const caf::node_id& node_of(const caf::abstract_actor* self) noexcept {
  return caf::actor_control_block::from(self)->node();
}

/// `a` must be valid.
inline const caf::node_id& node_of(const caf::actor& a) noexcept {
  return caf::actor_cast<caf::actor_control_block*>(a)->node();
}

/// Equal node ids. Every actor of a process shares its node's data, so
/// the common case is one pointer compare; `node_id::compare` is an
/// out-of-line call.
inline bool same(const caf::node_id& x, const caf::node_id& y) noexcept {
  return x.operator->() == y.operator->() || x == y;
}

/// Whether the valid actor `a` lives in `self`'s process.
template <class Actor>
bool same_node(const Actor& a, const caf::abstract_actor* self) noexcept {
  return same(node_of(a), node_of(self));
}

inline bool same_node(const caf::strong_actor_ptr& a, const caf::abstract_actor* self) noexcept {
  return same(a->node(), node_of(self));
}

} // namespace kvroom::detail
