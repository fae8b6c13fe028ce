#pragma once

#include "caf/actor_system_config.hpp"

namespace kvroom {

/// Announces every kvroom message type and the `errc` error category to CAF.
/// Call on every node's config before the actor system starts: a type that is
/// not announced fails at run time across processes (it works locally).
void add_message_types(caf::actor_system_config& cfg);

} // namespace kvroom
