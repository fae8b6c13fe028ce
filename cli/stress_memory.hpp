#pragma once

// What `kvroom stress` writes into and reads from the ranks' KV caches
// beside the rooms: canaries in freed pages (a late write changes them),
// the state pages of a room's aux slot, and each TP slot's pattern key.

#include <cstdint>
#include <vector>

#include "kvroom/kit/testkit.hpp"

namespace kvroom::cli {

/// A room's state pages (hybrid models) follow its aux slot: one Mamba slot
/// per aux slot, or an SWA window of `state_pages / aux_slots` pages; freed
/// and reused with it.
std::vector<int64_t> state_of(const kv_shape& sh, int64_t aux);

/// Fills a freed page (and/or aux slot with its state pages; -1: none) with
/// its canary.
void write_canary(host_kv_cache& mem, int64_t page, int64_t aux);

/// Bytes of a page (or aux slot, `page < 0`) that differ from its canary.
uint64_t canary_damage(host_kv_cache& mem, int64_t page, int64_t aux);

/// The pattern key of TP slot `tp` of `room` (each slot writes its own).
room_id key(room_id room, int tp);

} // namespace kvroom::cli
