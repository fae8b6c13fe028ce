#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvroom/api/config.hpp"
#include "kvroom/api/descriptors.hpp"

namespace kvroom {

/// The digest of one part of a room (the bytes one prefill rank writes into
/// one decode rank) in the room's logical order: the order of the bytes'
/// destinations, which both sides know whatever the page orders and head
/// slices (prefill from its transfer plan, decode from the same plan over
/// its own pages). Where a part's writes start and end does not matter,
/// only the bytes in that order. Host memory only.
///
/// Prefill hashes the source bytes of its writes: `digest_sources`;
/// decode what landed: `digest_destinations`. Writes of one part never
/// overlap at the destination.
uint64_t digest_sources(std::vector<write_op> ops);
uint64_t digest_destinations(std::vector<write_op> ops);

} // namespace kvroom
