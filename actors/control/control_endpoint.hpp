#pragma once

// Where the control plane is reached: CAF's middleman, over TLS (CAF's
// OpenSSL module, mutual certificates against one CA) when the runtime was
// configured with certificates, else through the runtime's gated door
// (control_door.hpp: membership proven before CAF reads a byte), else
// (a bare actor system) CAF's plain middleman. One place decides, so a
// rank never listens in one mode and dials in the other.

#include <cstdint>
#include <string>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/io/middleman_actor.hpp"

namespace kvroom::detail {

/// Publishes `whom` on `host:port` (0: any); the port it got.
caf::expected<uint16_t> publish_control(caf::actor_system& sys, const caf::actor& whom,
                                        uint16_t port, const std::string& host);

/// Closes what `publish_control` opened.
void unpublish_control(caf::actor_system& sys, const caf::actor& whom, uint16_t port);

/// Connects to what is published at `host:port` (blocking; start-up only).
caf::expected<caf::actor> connect_control(caf::actor_system& sys, const std::string& host,
                                          uint16_t port);

/// Closes this process's connection to `node` (CAF's BASP broker, in its
/// event loop), best effort: its proxies go, and monitors of them fire, so
/// call it only once nothing here or there depends on that node. Never
/// blocks.
void close_connection(caf::actor_system& sys, const caf::node_id& node);

/// The middleman actor to `connect` through from an actor (never blocks).
caf::io::middleman_actor control_connector(caf::actor_system& sys);

} // namespace kvroom::detail
