#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/control/membership.hpp"

#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// State of the bootstrap registry: every registered rank (the role SGLang's
/// HTTP bootstrap server plays), and the challenges it issued.
struct bootstrap_registry_state {
  std::vector<rank_entry> ranks;
  uint32_t max_ranks = 0;
  std::shared_ptr<const membership> members;
  struct challenge {
    nonce theirs;
    nonce mine;
  };
  std::optional<pending_table<caf::actor_addr, challenge>> challenges;
  uint64_t refusals = 0;

  static inline const char* name = "kvroom.bootstrap_registry";
};

/// Why `candidate` cannot join a deployment of `ranks`, or "" when it fits:
/// the same KV buffers (count, page size), aux buffers (count, item size)
/// and, today, equal TP sizes across the whole deployment (each decode TP
/// rank is written by the prefill TP rank of the same index).
std::string layout_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate);

/// Why `candidate` cannot take its place (side, DP group, TP rank, PP
/// stage), or "" when the place is free or already its own: a live rank of
/// another id holds it. Two ranks in one place would each be sent the same
/// rooms' pages; the second is a misconfiguration or a replacement that came
/// before the registry saw the old rank go.
std::string place_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate);

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
caf::behavior bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                                 uint32_t max_ranks,
                                 std::shared_ptr<const membership> members);

} // namespace kvroom
