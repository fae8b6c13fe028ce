#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/atom.hpp"
#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/control/directory_rules.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/control/registration_door.hpp"

#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// State of the bootstrap registry: every registered rank (the role SGLang's
/// HTTP bootstrap server plays), and the challenges it issued.
/// This process -> the registry, tests only: drop rank `id` as if its
/// connection had been lost (`chaos_drop_atom`, rank_id).
using chaos_drop_atom = caf::atom_constant<caf::atom("chaosdrop")>;

struct bootstrap_registry_state {
  std::vector<rank_entry> ranks;
  uint32_t max_ranks = 0;
  std::shared_ptr<const membership> members;
  std::optional<registration_door> door;
  uint64_t refusals = 0;
  /// A push of the directory to every rank is scheduled.
  bool push_pending = false;
  /// Ids whose rank went down, oldest first (at most `max_ranks`): a rank
  /// registering with one of them is a replacement, and the survivors
  /// remember its predecessor as lost (see the registration handler).
  std::vector<rank_id> gone;

  /// How long a replacement's answer waits for the other ranks'
  /// acknowledgements: under the registrant's shortest try (500 ms, see
  /// link_timing), so a frozen survivor delays it and fails nothing.
  static constexpr uint64_t replacement_ack_ms = 250;

  static inline const char* name = "kvroom.bootstrap_registry";
};

/// A directory: maps (role, dp, tp) to each rank's layout, data-plane
/// endpoints and control endpoint. It relays nothing: ranks link to each
/// other directly and only learn who is where from it.
///
/// Registration answers a challenge (see membership.hpp); an id held by a
/// live rank is refused (a replacement registers once the registry saw the
/// old one go), as is a layout that does not fit. Every change is pushed to
/// all registered managers as `directory_update` (the registrant gets it as
/// its reply); a rank whose manager goes down is removed. A restarted
/// registry rebuilds its table from the ranks registering again. At most
/// `max_ranks` ranks register.
///
/// A replacement (an id whose rank went down) is answered only once every
/// other listed rank acknowledged the directory that lists it, or did not
/// within `replacement_ack_ms`: a replacement that reports ready is known
/// everywhere, so no survivor fails its first rooms on the loss of the one
/// it replaced. First registrations are pushed in batches (see
/// schedule_push), as many ranks start at once.
caf::behavior bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                                 uint32_t max_ranks,
                                 std::shared_ptr<const membership> members);

} // namespace kvroom
