#pragma once

// The registration handshake's registry half (see membership.hpp): the
// challenges it issued, each until its deadline, and the check of a rank's
// answer. One owner for both directories, the built-in registry and etcd's.

#include <cstdint>
#include <memory>

#include "caf/actor.hpp"
#include "caf/actor_addr.hpp"
#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/membership.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

class registration_door {
public:
  /// At most `capacity` handshakes in progress, each for 5 s: what a
  /// stranger can make a directory hold by never answering.
  registration_door(std::shared_ptr<const membership> members, size_t capacity)
    : members_(std::move(members)), challenges_(capacity, 5000) {
    // nop
  }

  /// The answer to `from`'s hello: proof of the secret and a challenge.
  caf::expected<registry_challenge> hello(const caf::actor_addr& from, const nonce& theirs,
                                          uint64_t now_ms);

  /// None when `msg` answers this door's challenge to `from` with a valid
  /// proof; otherwise why not (errc::unauthorized).
  caf::error check(const caf::actor_addr& from, const register_rank& msg, uint64_t now_ms);

  /// Whom a checked registration lists, monitors and pushes to: the manager
  /// its entry names when that lives in the registrant's process (a rank's
  /// control actor registers for its manager), else the registrant itself.
  /// Never what a registrant claims of another process.
  static caf::actor listed_actor(const caf::strong_actor_ptr& registrant, const rank_entry& entry);

private:
  struct challenge {
    nonce theirs;
    nonce mine;
  };
  std::shared_ptr<const membership> members_;
  pending_table<caf::actor_addr, challenge> challenges_;
};

} // namespace kvroom
