#pragma once

#include <cstdint>

#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/backend.hpp"

#include "stress_check.hpp"

namespace kvroom::stress {

/// splitmix64: the seed's stream of draws.
uint64_t mix(uint64_t x);

/// Per-room odds of each fault kind.
struct fault_odds {
  double transfer = 0.0;
  double abort = 0.0;
  double kill_room = 0.0;
  /// Split evenly among the same-fault-on-every-rank kinds.
  double multi = 0.0;
  double late_write = 0.0;
  double flip = 0.0;
};

/// What the schedule does to one room: the kind, where (side, TP slot), in
/// which state (aborts, kills) or at which data-plane point (transfers).
struct room_plan {
  fault_kind kind = fault_kind::none;
  role side = role::prefill;
  int tp = 0;
  kv_poll at = kv_poll::bootstrapping;
  fault_point point = fault_point::before_post;
};

/// The room's plan: a pure function of (seed, room), so every process of a
/// run, and every rerun with the same seed, draws the same faults.
room_plan plan_for(uint64_t seed, room_id room, const fault_odds& odds, int tp);

/// The data-plane faults prefill TP slot `tp` injects for rooms
/// [first, first + count).
fault_plan transfer_faults(uint64_t seed, const fault_odds& odds, int tp_size, int tp,
                           room_id first, uint64_t count);

} // namespace kvroom::stress
