#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"
#include "caf/event_based_actor.hpp"

#include "actors/local_messages.hpp"
#include "actors/inline_path.hpp"
#include "actors/room_fsm.hpp"

namespace kvroom {

/// What a room actor is spawned with.
struct room_params {
  room_id room = 0;
  rank_ref self;
  caf::actor manager;
  /// The scheduler's inbox; receives every state change.
  caf::actor inbox;
  /// Optional subscriber (actor-based schedulers); receives the same events.
  caf::actor listener;
  room_timeouts timeouts;
  /// This rank's registry entry: its layout and data-plane endpoint.
  std::shared_ptr<const rank_entry> self_entry;
  /// Prefill rooms: the rank's transfer worker.
  caf::actor worker;
  /// Prefill rooms: small batches moved without the worker (may be null).
  std::shared_ptr<inline_path> shortcut;
  /// Decode rooms: the prefill data-parallel group serving this room.
  int32_t peer_dp_rank = 0;
  uint32_t max_queued_chunks = 1024;
  /// Prefill rooms: the transport to reach decode with, or "auto".
  std::string transport = "auto";
};

/// The part every room actor shares: the state machine and its timer, state
/// changes to the scheduler, the conclusion to the manager, and agreement.
///
/// Agreement (no all-reduce, no lock): decode TP rank 0 of the room's decode
/// group coordinates. A rank whose part is done is *prepared*: it concludes
/// Success only on the coordinator's `room_committed`, which the coordinator
/// sends once every TP slot is done. A prepared rank that must fail asks the
/// coordinator instead of concluding, so no rank reports Success while
/// another reports Failed. Ranks that are not prepared fail on their own and
/// fan out; the coordinator then can never commit, as their part is missing.
class room_core {
public:
  void init(caf::event_based_actor* self, room_params params);

  const room_params& params() const noexcept {
    return params_;
  }

  const room_fsm& fsm() const noexcept {
    return *fsm_;
  }

  /// The other side's ranks this room talks to; the manager fans failures out
  /// to them (expanded to their whole TP group; empty: the whole other side).
  std::vector<rank_ref>& counterparts() noexcept {
    return counterparts_;
  }

  bool is_coordinator() const noexcept {
    return coordinator_;
  }

  bool prepared() const noexcept {
    return prepared_;
  }

  void advance(kv_poll next);

  /// This rank's part is done: wait for the coordinator of decode group
  /// `decode_dp` (never called on the coordinator itself).
  void prepare(int32_t decode_dp);

  /// Coordinator: TP slot `slot` is done; both of its room actors are kept to
  /// be committed. Commits once every slot is done.
  void on_part(const part_done& part);

  /// The coordinator committed the room.
  void on_committed();

  /// A failure identified on this rank (or a request to fail it);
  /// `requested` when the scheduler asked for it (abort, clear).
  void fail_local(std::string reason, bool requested = false);

  /// A failure from elsewhere; `decision_request` marks a prepared rank
  /// asking this coordinator to decide.
  void fail_remote(const kv_transfer_error& err, bool decision_request);

  /// Acts on the state's deadline (and on an overdue decision).
  void check_deadline();

  /// True when losing `rank` breaks this room: a rank of this room's TP group
  /// or of a counterpart group.
  bool depends_on(const rank_ref& rank) const noexcept;

  void on_peer_lost(const peer_lost& msg);

  /// The scheduler released the room: stop for good.
  void clear();

  /// How often the manager's sweep ticks a live room: an eighth of the
  /// shortest timeout, within [1 ms, 2 s], so a timeout fires at most 12.5 %
  /// late while 10,000 long-lived rooms cost a few thousand messages a second.
  static std::chrono::milliseconds tick_interval(const room_timeouts& t);

  static uint64_t now_ms() noexcept;

private:
  void request_decision(kv_transfer_error err);
  void publish(kv_poll state);
  void conclude(bool fan_out, bool requested = false);
  void conclude_failed(const kv_transfer_error& err, bool fan_out,
                       bool requested = false);

  caf::event_based_actor* self_ = nullptr;
  room_params params_;
  std::unique_ptr<room_fsm> fsm_;
  std::vector<rank_ref> counterparts_;
  bool coordinator_ = false;
  // Prepared rank: where the coordinator is, and an outstanding request.
  bool prepared_ = false;
  int32_t decode_dp_ = 0;
  /// A prepared rank waits for the slowest part of the room, not its own:
  /// two transferring timeouts from the moment it prepared, so the rank that
  /// really hangs times out first and is the one origin.
  uint64_t prepared_deadline_ms_ = 0;
  bool decision_requested_ = false;
  uint64_t decision_deadline_ms_ = 0;
  /// What a prepared rank asked the coordinator to decide on.
  kv_transfer_error pending_error_;
  // Coordinator: slots done and the room actors to commit, by rank id.
  std::vector<bool> slots_done_;
  std::unordered_map<rank_id, caf::actor> participants_;
};

} // namespace kvroom
