#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/error.hpp"

#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

struct sender_chunk;


class rank;

namespace detail {

/// The scheduler thread's view of one room: written by `rank::drain()` from
/// the room actor's events, read by `poll()`. Owned by the scheduler thread.
struct room_slot {
  room_id room = 0;
  role side = role::prefill;
  caf::actor actor;
  kv_poll state = kv_poll::bootstrapping;
  /// The rank is gone (closed or destroyed): the handle never touches it
  /// again, and a room that was live reads Failed. Beside `state`: poll()
  /// reads both, from one cache line.
  bool rank_gone = false;
  bool cleared = false;
  bool initialized = false;
  uint64_t declared_pages = 0;
  uint64_t sent_pages = 0;
  bool last_sent = false;
  /// Prefill: decode's cached prefix in tokens (room_event).
  int64_t decode_prefix_len = 0;
  std::optional<kv_transfer_error> failure;
  /// Decode, layer by layer: the KV buffers that hold every byte of the
  /// room (room_landed), by buffer index; empty until one landed.
  std::vector<bool> landed;
};

} // namespace detail

/// What kv_sender and kv_receiver share. A handle belongs to the scheduler
/// thread of its rank. It may outlive the rank: a room that was live then
/// reads Failed ("rank closed"), and every call says the rank is gone.
class room_handle {
public:
  room_handle() = default;

  room_id room() const noexcept {
    return slot_ ? slot_->room : 0;
  }

  /// False for a default-constructed handle.
  bool valid() const noexcept {
    return slot_ != nullptr;
  }

  /// The room's state. Never blocks, makes no round trip: it reads what the
  /// room actor pushed to the rank's inbox, draining the inbox first only
  /// when something arrived since the last drain.
  kv_poll poll();

  /// The root cause once `poll()` returned Failed (it travels with the Failed
  /// state, so this costs about what `poll()` does). Empty while the room is
  /// not Failed. Kept after `clear()`.
  std::optional<kv_transfer_error> failure();

  /// The failure of a room that the scheduler's group says failed: SGLang
  /// polls with a MIN all-reduce over its TP ranks, so one rank's Failed
  /// reads Failed on every rank, possibly before kvroom's fan-out reached
  /// this one. `failure()` once this rank knows; until then an error marked
  /// from another rank with origin_rank -1 ("another rank said so"), whose
  /// reason says the root cause has not arrived (a later call gives it).
  /// Never claims this rank as the origin, changes nothing in the room
  /// (it concludes once, with its one origin, when the fan-out arrives), and
  /// costs what `failure()` does.
  kv_transfer_error group_failure();

  /// Fails the room here and, propagated, on every other rank of the room.
  /// A no-op on a concluded room (also once its rank closed). The room's
  /// reason reads "aborted by <side> scheduler[: reason]".
  caf::error abort(std::string reason = {});

  /// Releases the room: its actor exits and its id is tombstoned so no late
  /// message resurrects it. The handle is dead afterwards.
  caf::error clear();

protected:
  room_handle(rank* owner, std::shared_ptr<detail::room_slot> slot)
    : owner_(owner), slot_(std::move(slot)) {
    // nop
  }

  /// Whether a scheduler call may act on the room. An error for a call the
  /// scheduler should not make (an empty or cleared handle); `skip` for a
  /// room that concluded meanwhile (a peer's abort, a loss, a timeout, its
  /// rank closed): the call does nothing, is counted and logged at debug,
  /// and the scheduler learns the outcome from `poll()` and `failure()`, as
  /// SGLang's scheduler expects (it catches nothing from init or send).
  caf::error check_live(const char* op, bool& skip) const;

  /// `check_live` for init, which may also come only once.
  caf::error check_init(bool& skip) const;

  /// True while the rank still owns the slot: not closed, and the room
  /// not cleared (a cleared room is forgotten by its rank, which may be
  /// gone by now). Only then may the handle touch the rank.
  bool owned() const noexcept {
    return !slot_->rank_gone && !slot_->cleared;
  }

  rank* owner_ = nullptr;
  std::shared_ptr<detail::room_slot> slot_;
};

/// Prefill side of one room (SGLang `KVSender`).
class kv_sender : public room_handle {
public:
  kv_sender() = default;

  /// Declares how many KV pages the room sends and the aux slot holding its
  /// metadata. Once per room; does nothing once the room concluded.
  caf::error init(uint64_t num_kv_indices, int64_t aux_index);

  /// Tokens the decode side holds already (its radix cache), known from
  /// WaitingForInput on (0 before): the scheduler sends only the pages after
  /// them and declares only those to `init` (SGLang's
  /// `pop_decode_prefix_len`).
  int64_t decode_prefix_len();

  /// Sends one chunk of source page indices; a non-last chunk ends on a page
  /// boundary by construction (indices are pages). The aux slot follows the
  /// last chunk, and so does the request's state (hybrid models:
  /// `state_indices`, its state slots or window pages in the rank's state
  /// buffers; only with the last chunk). Refuses more pages than `init`
  /// declared; does nothing once the room concluded.
  caf::error send(std::vector<int64_t> kv_indices, bool is_last,
                  std::vector<int64_t> state_indices = {});

  /// Sends one chunk of pages of some KV buffers only (`kv_buffers`, indices
  /// into the rank's KV buffers: a layer's K and V, as soon as the forward
  /// pass computed that layer). Every buffer receives the declared pages in
  /// order, and the last chunk leaves none unsent; a room mapped by declared
  /// parallel layouts refuses it (it fails, with the reason).
  caf::error send_buffers(std::vector<int64_t> kv_indices, std::vector<int32_t> kv_buffers,
                          bool is_last, std::vector<int64_t> state_indices = {});

private:
  friend class rank;
  caf::error send_chunk(sender_chunk chunk);
  using room_handle::room_handle;
};

/// Decode side of one room (SGLang `KVReceiver`).
class kv_receiver : public room_handle {
public:
  kv_receiver() = default;

  /// Hands the pre-allocated destination pages and the aux slot (and, for a
  /// rank with state buffers, the request's state slots or window pages).
  /// `decode_prefix_len`: tokens this rank holds already (a radix-cache
  /// hit); `kv_indices` are the pages after them, and prefill sends only
  /// those. Once; does nothing once the room concluded.
  caf::error init(std::vector<int64_t> kv_indices, int64_t aux_index,
                  std::vector<int64_t> state_indices = {}, int64_t decode_prefix_len = 0);

  /// Whether every one of `kv_buffers` (indices into the rank's KV
  /// buffers: a layer's K and V) holds every byte this room puts there, so
  /// the scheduler may start that layer while the rest still moves (vLLM's
  /// `wait_for_layer_load`). True for every buffer once the room succeeded.
  /// Known buffer by buffer where the room's one source writes whole pages
  /// and the integrity check is off; elsewhere from the room's Success on.
  /// What landed stays landed, but a room that then reads Failed failed:
  /// its pages are to be recomputed whatever landed. Costs what `poll()`
  /// does, plus one lookup per buffer.
  bool landed(const std::vector<int32_t>& kv_buffers);

private:
  friend class rank;
  using room_handle::room_handle;
};

} // namespace kvroom
