#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "caf/message.hpp"

#include "kvroom/actors/room/room_protocol.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// What arrived before the thing it is for, held until that thing exists:
/// decode destinations and part confirmations for rooms not open here yet,
/// failures for rooms not open here yet, and messages for a decider or a
/// rank the directory does not list as usable yet (ranks start in any
/// order, and a peer can reach this rank before this rank's link to it is
/// up). One bound on all of it (a peer cannot make a rank hold more) and
/// one expiry.
class parking {
public:
  parking(size_t max_items, uint64_t max_age_ms)
    : max_items_(max_items), max_age_ms_(max_age_ms) {
    // nop
  }

  /// False when full: the caller refuses the destination.
  bool park_dst(dst_info info, uint64_t now_ms);

  /// Takes the destinations parked for `room` that `ready` accepts.
  std::vector<dst_info> take_dsts(room_id room,
                                  const std::function<bool(const dst_info&)>& ready);

  /// Rooms with parked destinations.
  std::vector<room_id> dst_rooms() const;

  bool park_part(part_done part, uint64_t now_ms);

  std::vector<part_done> take_parts(room_id room);

  /// A commit for a room not open here yet (a dummy prefill rank's room can
  /// open after its room committed); false when full.
  bool park_commit(room_id room, uint64_t now_ms);

  /// Whether a commit was parked for `room` (taken).
  bool take_commit(room_id room);

  /// Keeps the first failure heard of for `room`; false when full.
  bool park_failure(room_failed msg, uint64_t now_ms);

  /// Replaces what is kept for `room` (a decision made for it).
  void set_failure(room_failed msg, uint64_t now_ms);

  const room_failed* failure(room_id room) const;

  std::optional<room_failed> take_failure(room_id room);

  /// Takes the proposals (failures not yet decided) parked at least
  /// `min_age_ms`: their room has not opened here in that time.
  std::vector<room_failed> take_proposals(uint64_t now_ms, uint64_t min_age_ms);

  /// Whether a proposal (a failure not yet decided) is parked.
  bool has_proposals() const;

  bool park_for_decider(decider_ref to, caf::message payload, uint64_t now_ms);

  /// Offers every message for a decider to `send`; those it took go.
  void flush_deciders(const std::function<bool(const decider_ref&, caf::message&)>& send);
  /// A message for rank `to`, which the directory does not list as usable
  /// yet; false when full.
  bool park_for_rank(rank_id to, caf::message payload, uint64_t now_ms);
  /// Offers every message for a rank to `send`, in order; those it took go.
  void flush_ranks(const std::function<bool(rank_id, caf::message&)>& send);

  /// Drops everything older than the bound; the destinations among it come
  /// back so their decode ranks can be told.
  std::vector<dst_info> expire(uint64_t now_ms);

  /// The ranks messages wait for (each once): links to make.
  std::vector<rank_id> waiting_ranks() const;

  /// The deciders messages wait for (each once).
  std::vector<decider_ref> waiting_deciders() const;

  size_t size() const noexcept {
    return dsts_count_ + parts_count_ + failures_.size() + for_deciders_.size()
           + for_ranks_.size() + commits_.size();
  }

  size_t failures() const noexcept {
    return failures_.size();
  }

private:
  template <class T>
  struct item {
    T value;
    uint64_t since_ms = 0;
  };
  struct for_decider {
    decider_ref to;
    caf::message payload;
    uint64_t since_ms = 0;
  };
  struct for_rank {
    rank_id to = -1;
    caf::message payload;
    uint64_t since_ms = 0;
  };

  bool full() const noexcept {
    return size() >= max_items_;
  }

  size_t max_items_;
  uint64_t max_age_ms_;
  std::unordered_map<room_id, std::vector<item<dst_info>>> dsts_;
  size_t dsts_count_ = 0;
  std::unordered_map<room_id, std::vector<item<part_done>>> parts_;
  size_t parts_count_ = 0;
  std::unordered_map<room_id, item<room_failed>> failures_;
  std::unordered_map<room_id, uint64_t> commits_;
  std::vector<for_decider> for_deciders_;
  std::vector<for_rank> for_ranks_;
};

} // namespace kvroom
