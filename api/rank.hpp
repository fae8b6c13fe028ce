#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/blocking_actor.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/config.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/metrics.hpp"
#include "kvroom/api/parallel_layout.hpp"
#include "kvroom/api/room_handles.hpp"

namespace kvroom {

class runtime;

/// One rank as its scheduler sees it: the rank's manager, transfer worker and
/// registered memory, the inbox its room actors push state changes to, and
/// the table `poll()` reads. Use a rank and its handles from one thread (the
/// scheduler loop), as SGLang does.
class rank {
public:
  ~rank();

  rank(const rank&) = delete;
  rank& operator=(const rank&) = delete;

  const rank_ref& ref() const noexcept;

  const rank_config& config() const noexcept;

  /// Opens the sender side of `room` (prefill ranks only). `listener`, when
  /// set, receives every `room_event` of the room too (actor-based
  /// schedulers subscribe this way instead of polling).
  caf::expected<kv_sender> make_sender(room_id room,
                                       const caf::actor& listener = {});

  /// Opens the receiver side of `room` (decode ranks only), served by the
  /// prefill data-parallel group `prefill_dp_rank`.
  caf::expected<kv_receiver> make_receiver(room_id room,
                                           int32_t prefill_dp_rank = 0,
                                           const caf::actor& listener = {});

  /// The open sender of `room`, or `errc::unknown_room`.
  caf::expected<kv_sender> sender(room_id room) const;

  /// The open receiver of `room`, or `errc::unknown_room`.
  caf::expected<kv_receiver> receiver(room_id room) const;

  /// Applies every state change the room actors pushed since the last call.
  /// Call once per scheduler iteration; `poll()` also calls it when needed.
  void drain();

  /// Drains only when the inbox holds anything: one atomic load otherwise.
  void pump() {
    if (!inbox_->mailbox().empty())
      drain();
  }

  /// Rooms open on this rank (not yet cleared).
  size_t open_rooms() const noexcept;

  /// Scheduler calls (init, send, abort) that found their room concluded
  /// already and did nothing: a peer's abort or a loss raced the call.
  uint64_t calls_after_conclusion() const noexcept;

  /// The manager's counters (a bounded blocking query).
  caf::expected<manager_stats> stats();

  /// What the directory lists of side `side` as this rank knows it: DP
  /// groups, TP and PP sizes (a bounded blocking query). A decode rank asks
  /// it of the prefill side before it names a room's prefill DP group.
  caf::expected<side_shape> shape_of_side(role side);

  /// What the rank counts for operators (rooms, failures by cause and
  /// origin, bytes, latency histograms, peers, refusals): read without a
  /// message or a lock, from any thread (`prometheus_text` renders it).
  metrics_snapshot metrics() const;

  /// Every data path this rank has sent on, with its health (any thread).
  std::vector<path_report> paths() const;

  /// Where this rank's manager is published for peers' direct links
  /// ("host:port"; "" without `network`).
  std::string control_address() const;

  /// Where this rank's `transport` endpoint listens ("" when it has none).
  std::string data_plane_address(const std::string& transport) const;

  /// The actor of an open room, or an invalid handle: for actor-based
  /// schedulers and fault injection (stress runs kill it mid-room).
  caf::actor room_actor(room_id room) const;

  /// This rank's manager (for actor-based schedulers and tests).
  const caf::actor& manager() const noexcept;

private:
  friend class runtime;
  friend class room_handle;
  friend class kv_sender;
  friend class kv_receiver;

  /// Everything else a rank holds (its data plane, manager, worker, inbox
  /// and room table): actors/rank_state.hpp, so that none of it is API.
  struct state;

  rank(runtime& rt, rank_config cfg);
  caf::error start();
  void abandon();

  template <class Handle>
  caf::expected<Handle> open(room_id room, role side, int32_t peer_dp,
                             const caf::actor& listener);

  void forget(room_id room);
  void count_call_after_conclusion() noexcept;

  std::unique_ptr<state> self_;
  /// The inbox's actor (`self_` owns it), read inline by `pump()`: the one
  /// thing of the state on poll()'s path.
  caf::blocking_actor* inbox_ = nullptr;
};

inline kv_poll room_handle::poll() {
  if (!slot_)
    return kv_poll::failed;
  if (owned())
    owner_->pump();
  return slot_->state;
}

} // namespace kvroom
