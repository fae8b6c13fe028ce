#pragma once

#include <memory>
#include <unordered_map>

#include "caf/actor.hpp"
#include "caf/expected.hpp"
#include "caf/scoped_actor.hpp"

#include "kvroom/actors/config.hpp"
#include "kvroom/actors/control/side_shape.hpp"
#include "kvroom/actors/inline_path.hpp"
#include "kvroom/actors/rank_metrics.hpp"
#include "kvroom/actors/room_handles.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

class multipath_backend;

class runtime;
class backend;
class trust_table;

/// One rank as its scheduler sees it: the rank's manager, transfer worker and
/// registered memory, the inbox its room actors push state changes to, and
/// the table `poll()` reads. Use a rank and its handles from one thread (the
/// scheduler loop), as SGLang does.
class rank {
public:
  ~rank();

  rank(const rank&) = delete;
  rank& operator=(const rank&) = delete;

  const rank_ref& ref() const noexcept {
    return ref_;
  }

  const rank_config& config() const noexcept {
    return cfg_;
  }

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
    if (!(*inbox_)->mailbox().empty())
      drain();
  }

  /// Rooms open on this rank (not yet cleared).
  size_t open_rooms() const noexcept {
    return rooms_.size();
  }

  /// Scheduler calls (init, send, abort) that found their room concluded
  /// already and did nothing: a peer's abort or a loss raced the call.
  uint64_t calls_after_conclusion() const noexcept {
    return calls_after_conclusion_;
  }

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
  const caf::actor& manager() const noexcept {
    return manager_;
  }

private:
  friend class runtime;
  friend class room_handle;
  friend class kv_sender;
  friend class kv_receiver;

  rank(runtime& rt, rank_config cfg);
  caf::error start();
  void abandon();

  template <class Handle>
  caf::expected<Handle> open(room_id room, role side, int32_t peer_dp,
                             const caf::actor& listener);

  void forget(room_id room);
  void count_call_after_conclusion() noexcept {
    ++calls_after_conclusion_;
  }
  void apply(const room_event& ev);
  void apply(const room_landed& ev);

  runtime& rt_;
  rank_config cfg_;
  rank_ref ref_;
  std::shared_ptr<backend> data_plane_;
  /// The same backend as its path layer (data_plane_ is this).
  std::shared_ptr<multipath_backend> paths_;
  std::shared_ptr<const rank_entry> entry_;
  std::shared_ptr<trust_table> trust_;
  caf::actor manager_;
  caf::actor worker_;
  std::shared_ptr<inline_path> shortcut_;
  std::shared_ptr<rank_metrics> metrics_;
  std::unique_ptr<caf::scoped_actor> inbox_;
  std::unordered_map<room_id, std::shared_ptr<detail::room_slot>> rooms_;
  uint64_t calls_after_conclusion_ = 0; ///< scheduler thread only
};

inline kv_poll room_handle::poll() {
  if (!slot_)
    return kv_poll::failed;
  if (owned())
    owner_->pump();
  return slot_->state;
}

} // namespace kvroom
