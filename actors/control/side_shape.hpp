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

#include "kvroom/api/parallel_layout.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// The shape of side `side` among `ranks` (other sides' ranks are skipped).
side_shape shape_of(const std::vector<std::shared_ptr<const rank_entry>>& ranks, role side);

} // namespace kvroom
