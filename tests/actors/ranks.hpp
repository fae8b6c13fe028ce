#pragma once

// Ranks and timeouts the actor-free tests build rooms from.

#include "kvroom/actors/room_fsm.hpp"

namespace kvroom::test {

/// A rank of DP group `dp`, TP rank `tp` of `tp_size`.
inline rank_ref make_rank(role side, int32_t dp, int32_t tp, rank_id id, int32_t tp_size = 2) {
  rank_ref r;
  r.side = side;
  r.dp_rank = dp;
  r.tp_rank = tp;
  r.tp_size = tp_size;
  r.id = id;
  return r;
}

/// Short, equal timeouts: every deadline within reach of a test's clock.
inline room_timeouts short_timeouts() {
  return room_timeouts{1000, 1000, 1000};
}

} // namespace kvroom::test
