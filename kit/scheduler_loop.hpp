#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvroom/api/rank.hpp"

namespace kvroom {

/// The ranks a group owns, as the loop takes them.
std::vector<rank*> ranks_of(const std::vector<std::unique_ptr<rank>>& xs);

/// One room as the scheduler loop holds it: a sender per prefill rank and a
/// receiver per decode rank this process drives (either list may be empty,
/// as in a one-rank `serve` process), by TP slot.
struct loop_room {
  room_id id = 0;
  /// A slot in [0, concurrency): the room's share of the caller's buffers.
  size_t slot = 0;
  std::vector<kv_sender> senders;
  std::vector<kv_receiver> receivers;
  std::vector<bool> sender_started;
  std::vector<bool> receiver_started;
  std::chrono::steady_clock::time_point opened;
};

/// What a scheduler does at each step of a room; the loop does the rest.
/// Every hook is optional except the two `*_ready` ones when that side has
/// ranks.
struct loop_hooks {
  /// Whether a new room may open now (pacing); default: always.
  std::function<bool()> may_open;
  /// Right after the room's handles exist (e.g. write its source pattern).
  std::function<void(loop_room&)> opened;
  /// Every iteration, before the room's handles are polled (faults).
  std::function<void(loop_room&)> each;
  /// Decode TP slot `t` waits for input: hand its pages. Return false to
  /// be asked again next iteration (admission delay).
  std::function<bool(loop_room&, int t)> receiver_ready;
  /// Prefill TP slot `t` waits for input: init and send its chunks.
  std::function<bool(loop_room&, int t)> sender_ready;
  /// Ends a room before every handle is terminal (a run's bound).
  std::function<bool(const loop_room&)> give_up;
  /// The room is over: look at its handles; the loop clears it afterwards.
  std::function<void(loop_room&)> concluded;
};

/// The scheduler loop the CLI and the benchmarks share, shaped like
/// SGLang's: rooms are admitted up to a concurrency, every handle is polled
/// once per iteration, each side starts when `poll()` says WaitingForInput,
/// and a room is cleared once every handle is terminal. Single-threaded,
/// like the ranks it drives.
class scheduler_loop {
public:
  scheduler_loop(std::vector<rank*> prefill, std::vector<rank*> decode,
                 int32_t prefill_dp, size_t concurrency, room_id first_room,
                 uint64_t rooms, loop_hooks hooks);

  /// One iteration; false when nothing happened (the caller may back off).
  bool step();

  /// Every room admitted and concluded.
  bool done() const noexcept {
    return next_ >= end_ && in_flight_.empty();
  }

  /// Admits no more rooms; those in flight go on.
  void stop_admitting() noexcept {
    end_ = next_;
  }

  const std::vector<loop_room>& in_flight() const noexcept {
    return in_flight_;
  }

  room_id next_room() const noexcept {
    return next_;
  }

  uint64_t concluded_rooms() const noexcept {
    return concluded_;
  }

  /// Why a room could not be opened in the last step (its id was skipped);
  /// empty when every room opened.
  const std::string& open_error() const noexcept {
    return open_error_;
  }

private:
  bool open_room();

  std::vector<rank*> prefill_;
  std::vector<rank*> decode_;
  int32_t prefill_dp_;
  loop_hooks hooks_;
  std::vector<size_t> free_slots_;
  std::vector<loop_room> in_flight_;
  room_id next_;
  room_id end_;
  uint64_t concluded_ = 0;
  std::string open_error_;
};

} // namespace kvroom
