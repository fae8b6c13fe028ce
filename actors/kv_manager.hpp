#pragma once

#include <deque>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "caf/actor_addr.hpp"
#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/actors/config.hpp"
#include "kvroom/actors/local_messages.hpp"

namespace kvroom {

/// State of one rank's KV manager: the owner of `failure_records` and of the
/// room directory. Its mailbox serialises every access; there is no lock.
struct kv_manager_state {
  struct room_entry {
    caf::actor actor;
    kv_poll state = kv_poll::bootstrapping;
    /// The room's prefill group, whose TP rank 0 decides it.
    int32_t prefill_dp = 0;
    uint64_t opened_ms = 0;
    /// The root cause once concluded Failed; kept after the scheduler took
    /// the record, so the tombstone can still answer late peers with it.
    kv_transfer_error error;
    /// Prefill: decode ranks that handed this room a destination. Decode:
    /// prefill ranks this room handed its destination to.
    std::vector<rank_id> dst_ranks;
    /// Decode: prefill ranks that confirmed their fence. Prefill: the fence
    /// of a Failed room completed (its worker moves nothing of it).
    std::vector<rank_id> fences;
    bool fence_done = false;
  };
  struct awaiting {
    kv_transfer_error error;
    uint64_t since_ms = 0;
    /// Prefill ranks that may still write into the dead room's pages.
    std::vector<rank_id> writers;
  };
  /// A decode room whose actor died: its Failed state waits for the fence of
  /// every prefill rank that got its destination (or that rank's loss).
  struct fence_wait {
    kv_transfer_error error;
    std::vector<rank_id> writers;
    uint64_t since_ms = 0;
  };
  struct parked_dst {
    dst_info info;
    uint64_t since_ms = 0;
  };
  struct early_failure {
    room_failed msg;
    uint64_t since_ms = 0;
  };
  struct tombstone {
    bool failed = false;
    kv_transfer_error error;
  };
  struct parked_part {
    part_done part;
    uint64_t since_ms = 0;
  };

  std::shared_ptr<const rank_entry> self_entry;
  rank_limits limits;
  room_timeouts timeouts;
  /// The scheduler's inbox, told when a room actor dies without concluding.
  caf::actor inbox;
  caf::actor worker;

  /// Every rank of the deployment, as the bootstrap registry last pushed it.
  std::vector<std::shared_ptr<const rank_entry>> directory;
  /// Peer managers this rank monitors, by address: actor ids repeat across
  /// nodes, so only the full address tells two processes' managers apart.
  std::unordered_map<caf::actor_addr, std::shared_ptr<const rank_entry>> peers;

  std::unordered_map<room_id, room_entry> rooms;
  std::unordered_map<caf::actor_addr, room_id> room_by_actor;
  /// room -> root cause, until the scheduler takes it or clears the room.
  std::unordered_map<room_id, kv_transfer_error> failure_records;
  /// Decode destinations for rooms whose sender is not open yet.
  std::unordered_map<room_id, std::vector<parked_dst>> parked;
  /// Part confirmations for a coordinator room not open yet.
  std::unordered_map<room_id, std::vector<parked_part>> parked_parts;
  size_t parked_count = 0;
  /// Failures that arrived before the room opened here.
  std::unordered_map<room_id, early_failure> early_failures;
  /// Ranks recently lost, with why and when: rooms that open (or learn their
  /// counterpart) shortly after fail at once instead of waiting out a
  /// timeout. Bounded in time: CAF 0.17 can report a healthy peer as
  /// unreachable, and such a report must not fail rooms forever.
  struct lost_rank {
    peer_lost why;
    uint64_t since_ms = 0;
  };
  std::unordered_map<rank_id, lost_rank> lost_ranks;
  /// Messages for a decider this rank has not seen in the directory yet
  /// (ranks start in any order); delivered on the next directory update.
  struct pending_coord {
    role side = role::decode;
    int32_t dp_rank = 0;
    caf::message payload;
    uint64_t since_ms = 0;
  };
  std::vector<pending_coord> coordinator_backlog;
  /// Rooms whose actor died unconcluded, waiting for the coordinator's word:
  /// the room may have been committed already.
  std::unordered_map<room_id, awaiting> awaiting_decision;
  std::unordered_map<room_id, fence_wait> fence_waits;
  /// Prefill: rooms whose worker fence is pending, with the decode ranks to
  /// tell once it completes.
  std::unordered_map<room_id, std::vector<rank_id>> fencing;
  /// Recently cleared rooms: late messages for them change nothing.
  std::unordered_map<room_id, tombstone> tombstones;
  std::deque<room_id> tombstone_order;

  manager_stats counters;
  control_chaos chaos;
  std::mt19937_64 chaos_rng;

  static inline const char* name = "kvroom.kv_manager";
};

/// What a manager is spawned with.
struct kv_manager_params {
  rank_ref self;
  memory_layout layout;
  std::vector<endpoint_desc> endpoints;
  rank_limits limits;
  room_timeouts timeouts;
  caf::actor inbox;
  control_chaos chaos;
  /// The rank's transfer worker: receives peers' connection messages.
  caf::actor worker;
};

/// One rank's KV manager: routes destinations and failures to room actors,
/// records failures for the scheduler, fans origin failures out to every
/// other rank of the room as `room_failed{propagated=true}`, and fails the
/// rooms that depend on a rank that went down.
caf::behavior kv_manager(counted_actor<kv_manager_state>* self,
                         kv_manager_params params);

} // namespace kvroom
