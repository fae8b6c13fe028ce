#pragma once

// One look at a peer's control endpoint: does anything listen there? The
// check behind `registry_suspects` (a rank whose port refuses connections
// is gone; one that accepts may live). Plain sockets, not CAF's middleman: a
// second CAF connection between two processes is closed by CAF 0.17 as a
// duplicate, and a probe must not cost a live peer its links.

#include <chrono>
#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"

#include "kvroom/actors/manager/registry_suspects.hpp"

namespace kvroom {

/// Connects to `host`:`port` and closes at once, without a byte either way:
/// refused when nothing listens there, answered when the connection was
/// accepted, unknown when neither came within `timeout` (or the host is
/// unreachable, or its name does not resolve). Blocks for at most about
/// `timeout` plus the name's resolution.
probe_outcome probe_endpoint(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout);

/// manager -> its probe (and back): the outcome of probing rank `id` of
/// `incarnation`.
struct probe_done {
  rank_id id = 0;
  uint64_t incarnation = 0;
  probe_outcome outcome = probe_outcome::unknown;
};

/// Probes in an actor of its own thread (a connect may block for `timeout`)
/// and sends `probe_done` to `manager`; the actor then ends. At most one
/// per suspect (`registry_suspects` holds one per rank id).
void spawn_probe(caf::actor_system& sys, caf::actor manager, rank_id id, uint64_t incarnation,
                 std::string host, uint16_t port, std::chrono::milliseconds timeout);

} // namespace kvroom

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::probe_done)
