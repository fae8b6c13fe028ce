#pragma once

// A rank's directory entry as a store keeps it: under `<prefix>/ranks/<id>`,
// a small JSON document with the entry (CAF's binary form, base64), the
// lease it lives on and an HMAC of the deployment secret over key, lease and
// entry. Readers verify before they parse: a client that can write to the
// store but lacks the secret cannot route a room anywhere (sglang #39400), and a
// copy of a signed entry is void once its lease is gone.

#include <cstdint>
#include <memory>
#include <string>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/directory/store_client.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

class signed_entry_codec {
public:
  /// `prefix`: the deployment's, e.g. "/kvroom/prod" (no trailing slash).
  signed_entry_codec(caf::actor_system& sys, std::string prefix,
                     std::shared_ptr<const membership> members);

  /// Every rank's key starts with this.
  const std::string& ranks_prefix() const noexcept {
    return ranks_prefix_;
  }

  std::string key_of(rank_id id) const {
    return ranks_prefix_ + std::to_string(id);
  }

  /// The value of `entry`'s key, signed for `lease` (its manager handle is
  /// not stored: peers reach it through its control endpoint).
  std::string encode(const rank_entry& entry, int64_t lease) const;

  /// The entry `kv` holds, or why it is none of this deployment's: not a
  /// rank key, malformed, a lease other than the one signed, a proof that
  /// fails (another secret, or none), an id other than its key's.
  caf::expected<rank_entry> decode(const store_kv& kv) const;

private:
  caf::actor_system& sys_;
  std::string ranks_prefix_;
  std::shared_ptr<const membership> members_;
};

} // namespace kvroom
