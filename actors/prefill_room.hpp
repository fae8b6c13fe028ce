#pragma once

#include <deque>
#include <memory>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/actors/room_core.hpp"

namespace kvroom {

/// State of the sender side of one room on one prefill rank.
struct prefill_room_state {
  room_core core;
  bool initialized = false;
  uint64_t declared_pages = 0;
  int64_t aux_index = 0;
  /// The decode destination, once its manager handed it over.
  bool has_dst = false;
  dst_info dst;
  std::shared_ptr<const rank_entry> peer;
  /// How this room reaches the decode rank, chosen once per room.
  endpoint_desc peer_endpoint;
  /// Chunks received and not yet handed to the worker (bounded).
  std::deque<sender_chunk> queued;
  uint64_t received_pages = 0;
  uint64_t planned_pages = 0;
  bool last_received = false;
  /// At most one job in flight keeps a room's chunks in order.
  uint64_t job_in_flight = 0;
  bool last_in_flight = false;
  uint64_t next_job = 1;
  uint64_t bytes_moved = 0;
  bool started = false;

  static inline const char* name = "kvroom.prefill_room";
};

/// The sender room actor: plans each chunk into one write batch per decode
/// destination, hands it to the rank's transfer worker, sends aux data with
/// the last chunk and confirms to the decode room once every byte landed.
caf::behavior prefill_room(counted_actor<prefill_room_state>* self,
                           room_params params);

} // namespace kvroom
