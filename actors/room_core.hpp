#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/event_based_actor.hpp"

#include "actors/local_messages.hpp"
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
  /// Decode rooms: the prefill data-parallel group serving this room.
  int32_t peer_dp_rank = 0;
  uint32_t max_queued_chunks = 1024;
};

/// The part every room actor shares: the state machine, its timer, telling
/// the scheduler about state changes and the manager about the conclusion.
/// The prefill and decode room actors own one each and feed it.
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
  /// to them (expanded to their whole TP group).
  std::vector<rank_ref>& counterparts() noexcept {
    return counterparts_;
  }

  void advance(kv_poll next);
  void succeed();
  void fail_local(std::string reason);
  void fail_remote(const kv_transfer_error& err);

  /// Fails the room once its state's deadline has passed.
  void check_deadline();

  /// True when losing `rank` breaks this room: a rank of this room's TP group
  /// or of a counterpart group.
  bool depends_on(const rank_ref& rank) const noexcept;

  void on_peer_lost(const peer_lost& msg);

  /// The scheduler released the room: stop for good.
  void clear();

  /// How often an idle room wakes to check its deadline: an eighth of the
  /// shortest timeout, within [1 ms, 2 s], so a timeout fires at most 12.5 %
  /// late while 10,000 idle rooms cost a few thousand wake-ups a second.
  static std::chrono::milliseconds tick_interval(const room_timeouts& t);

  static uint64_t now_ms() noexcept;

private:
  void publish(kv_poll state);
  void conclude();

  caf::event_based_actor* self_ = nullptr;
  room_params params_;
  std::unique_ptr<room_fsm> fsm_;
  std::vector<rank_ref> counterparts_;
};

} // namespace kvroom
