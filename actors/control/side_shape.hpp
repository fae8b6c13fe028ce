#pragma once

// What the directory says of one side of a deployment: its DP groups, TP
// and PP sizes, and the page size its layouts declare. SGLang's decode asks
// this of a prefill deployment before it routes a request
// (`prefill_info_table`, `try_ensure_parallel_info`): the target DP group of
// a room is `bootstrap_room % dp_size`, so a wrong DP size sends a room to a
// group that never opens it. A plain function of the listed ranks.

#include <cstdint>
#include <memory>
#include <vector>

#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

struct side_shape {
  /// Ranks of that side the directory lists (usable or not yet linked).
  int32_t ranks = 0;
  /// The DP size its ranks said, or else the highest DP rank listed plus one
  /// (0: no rank of that side).
  int32_t dp_size = 0;
  /// Every rank's TP size (the directory admits one per side).
  int32_t tp_size = 0;
  /// From declared layouts; 1 where none declares one.
  int32_t pp_size = 1;
  /// Tokens per page of a declared layout; 0 where none declares one.
  int32_t tokens_per_page = 0;
  /// Every DP group up to `dp_size` holds `tp_size` x `pp_size` ranks.
  bool complete = false;
};

/// The shape of side `side` among `ranks` (other sides' ranks are skipped).
side_shape shape_of(const std::vector<std::shared_ptr<const rank_entry>>& ranks, role side);

} // namespace kvroom
