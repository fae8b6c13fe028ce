#pragma once

// The gated door of a process's control endpoints (rank managers, the
// bootstrap registry): CAF's middleman, with every incoming connection held
// by a membership_gate until it proved membership, and every outgoing one
// answering the peer's gate first. Installed per actor system by the
// runtime when the system has a middleman and no TLS (with TLS, the TLS
// handshake with certificates of the deployment's CA is the door).

#include <memory>

#include "caf/actor_system.hpp"
#include "caf/io/middleman_actor.hpp"

#include "kvroom/transport/auth/gate_handshake.hpp"
#include "kvroom/transport/auth/membership_gate.hpp"

namespace kvroom::detail {

struct control_door {
  caf::io::middleman_actor actor;
  /// Set for the caller that installed the door.
  std::shared_ptr<membership_gate> gate;
};

/// Spawns the door and names it in `sys`'s registry. On a system that has
/// one already, returns that door without its gate (its installer owns it).
control_door install_control_door(caf::actor_system& sys, deployment_secret secret,
                                  membership_gate::limits limits = {});

/// The door installed on `sys`, or an invalid handle.
caf::io::middleman_actor find_control_door(caf::actor_system& sys);

/// Stops the gate (pending connections closed) and the door's actor; the
/// endpoints it opened accept nothing more. Only for the installer's door.
void remove_control_door(caf::actor_system& sys, control_door& door);

} // namespace kvroom::detail
