#pragma once

// What a `rank` holds behind its API (api/rank.hpp): its data plane and path
// layer, its manager, worker and inbox, and the scheduler thread's table of
// open rooms. Only rank.cpp and the runtime touch it.

#include <memory>
#include <unordered_map>

#include "caf/actor.hpp"
#include "caf/scoped_actor.hpp"

#include "kvroom/actors/inline_path.hpp"
#include "kvroom/actors/rank_metrics.hpp"
#include "kvroom/api/rank.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

class multipath_backend;
struct room_context;
class trust_table;

struct rank::state {
  state(runtime& rt, rank_config cfg) : rt(rt), cfg(std::move(cfg)), ref(this->cfg.ref()) {
    // nop
  }

  /// Applies one state change a room actor pushed (scheduler thread).
  void apply(const room_event& ev);
  void apply(const room_landed& ev);

  runtime& rt;
  rank_config cfg;
  rank_ref ref;
  std::shared_ptr<backend> data_plane;
  /// The same backend as its path layer (data_plane is this).
  std::shared_ptr<multipath_backend> paths;
  std::shared_ptr<const rank_entry> entry;
  std::shared_ptr<trust_table> trust;
  caf::actor manager;
  caf::actor worker;
  std::shared_ptr<inline_path> shortcut;
  /// What every room of this rank is spawned with (set once started).
  std::shared_ptr<const room_context> room_shared;
  std::shared_ptr<rank_metrics> metrics;
  std::unique_ptr<caf::scoped_actor> inbox;
  std::unordered_map<room_id, std::shared_ptr<detail::room_slot>> rooms;
  uint64_t calls_after_conclusion = 0; ///< scheduler thread only
};

} // namespace kvroom
