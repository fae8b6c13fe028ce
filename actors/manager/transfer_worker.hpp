#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/messages/room_messages.hpp"
#include "kvroom/api/backend.hpp"

namespace kvroom {

/// State of a rank's transfer worker: the user of the rank's backend for
/// everything but the small batches rooms move inline (`inline_path`).
struct transfer_worker_state {
  /// A write batch (a push) or a read batch (a pull) of one room.
  struct job {
    /// The room actor that hears the job's result.
    caf::actor reply_to;
    room_id room = 0;
    uint64_t job_id = 0;
    bool is_read = false;
    write_batch write;
    read_batch read;

    uint64_t total_bytes() const {
      return is_read ? read.total_bytes() : write.total_bytes();
    }
  };
  struct in_flight {
    /// The room actor that hears the job's result.
    caf::actor reply_to;
    room_id room = 0;
    uint64_t job_id = 0;
    uint64_t bytes = 0;
    xfer_id id = 0;
    uint64_t deadline_ms = 0;
  };
  std::shared_ptr<backend> data_plane;
  /// Jobs the backend pushed back on (would_block), retried in order.
  std::deque<job> waiting;
  std::vector<in_flight> active;
  /// Rooms the manager asked to fence that still have batches moving; each
  /// is answered once its last one completes. Bounded by `active`.
  std::vector<room_id> fences;
  uint32_t max_jobs = 0;
  /// A batch still in progress after this long is released and failed, so a
  /// hung backend cannot pin a job (or its room) forever.
  uint32_t job_timeout_ms = 0;
  bool poll_scheduled = false;
  /// The rank's manager: carries the backend's connection messages to other
  /// ranks. Null until it attaches; the backend keeps them until then.
  caf::actor manager;

  static inline const char* name = "kvroom.transfer_worker";
};

/// Posts each room's write batches (and a pulling decode room's read
/// batches) to the rank's backend and reports every completion to the room
/// as a `transfer_result`. Spawned detached: memcpy,
/// socket writes and completion polling block, so they get their own thread
/// instead of a scheduler worker. A backend with a completion thread of its
/// own wakes the worker by message; the others are polled on a short timer.
/// Connection messages a backend produces (verbs queue-pair data) go to the
/// rank's manager, which carries them to the peer rank's worker.
caf::behavior transfer_worker(counted_actor<transfer_worker_state>* self,
                              std::shared_ptr<backend> data_plane,
                              uint32_t max_jobs, uint32_t job_timeout_ms);

} // namespace kvroom
