#pragma once

#include <vector>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// State of the bootstrap registry: every registered rank (the role SGLang's
/// HTTP bootstrap server plays).
struct bootstrap_registry_state {
  std::vector<rank_entry> ranks;
  uint32_t max_ranks = 0;

  static inline const char* name = "kvroom.bootstrap_registry";
};

/// Maps (role, dp, tp) to each rank's manager, layout and endpoint. A rank
/// registers once (again after a restart: same id replaces the old entry);
/// every change is pushed to all registered managers as `directory_update`,
/// and the registrant gets the same update as its reply. A rank whose manager
/// goes down is removed. At most `max_ranks` ranks register; more are
/// refused with an error.
caf::behavior
bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                   uint32_t max_ranks);

} // namespace kvroom
