#include "kvroom/api/room_handles.hpp"

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/messages/room_messages.hpp"
#include "kvroom/api/rank.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

std::string room_text(room_id room) {
  return "room " + std::to_string(room);
}

} // namespace

caf::error room_handle::check_live(const char* op, bool& skip) const {
  skip = false;
  if (!slot_)
    return make_error(errc::invalid_argument,
                      std::string{op} + " on an empty handle");
  if (slot_->cleared && !slot_->rank_gone)
    return make_error(errc::room_cleared,
                      std::string{op} + " after " + room_text(slot_->room)
                        + " was cleared");
  if (owned())
    owner_->pump();
  if (slot_->rank_gone || is_terminal(slot_->state)) {
    skip = true;
    if (!slot_->rank_gone)
      owner_->count_call_after_conclusion();
    logger()->debug("{} on {}, which concluded as {}{}: nothing to do", op,
                    room_text(slot_->room), to_string(slot_->state),
                    slot_->rank_gone ? " (its rank was closed)" : "");
  }
  return caf::none;
}

std::optional<kv_transfer_error> room_handle::failure() {
  if (!slot_)
    return std::nullopt;
  if (owned())
    owner_->pump();
  // The Failed event carried the root cause: no round trip to the manager.
  return slot_->failure;
}

kv_transfer_error room_handle::group_failure() {
  if (auto f = failure())
    return std::move(*f);
  kv_transfer_error out;
  out.bootstrap_room = room();
  out.failure_reason = "failed on another rank (its root cause has not reached this rank yet)";
  out.is_from_another_rank = true;
  out.origin_rank = -1;
  return out;
}

caf::error room_handle::check_init(bool& skip) const {
  if (auto err = check_live("init", skip); err || skip)
    return err;
  if (slot_->initialized)
    return make_error(errc::already_initialized,
                      room_text(slot_->room) + ": init called twice");
  return caf::none;
}

caf::error room_handle::abort(std::string reason) {
  bool skip = false;
  if (auto err = check_live("abort", skip); err || skip)
    return err;
  caf::anon_send(slot_->actor, room_abort{slot_->room, std::move(reason)});
  return caf::none;
}

caf::error room_handle::clear() {
  if (!slot_)
    return make_error(errc::invalid_argument, "clear on an empty handle");
  // A closed rank took its rooms with it: nothing left to release.
  if (slot_->rank_gone)
    return caf::none;
  if (slot_->cleared)
    return make_error(errc::room_cleared,
                      room_text(slot_->room) + " was cleared already");
  slot_->cleared = true;
  // A room that published Success ended on its own (room_protocol::finished).
  if (slot_->state != kv_poll::success)
    caf::anon_send(slot_->actor, room_clear{slot_->room});
  owner_->forget(slot_->room);
  return caf::none;
}

/// A dummy's room (a prefill rank the rank mapping gives no part of any
/// decode rank) concludes with the room, possibly before its scheduler
/// called init or send: those calls are then accepted and move nothing. Only
/// a dummy can be Success before its last chunk.
static bool dummy_done(const detail::room_slot& slot) {
  return slot.state == kv_poll::success && !slot.cleared;
}

caf::error kv_sender::init(uint64_t num_kv_indices, int64_t aux_index) {
  if (slot_ && owned())
    owner_->pump();
  if (slot_ && dummy_done(*slot_) && !slot_->initialized) {
    slot_->initialized = true;
    slot_->declared_pages = num_kv_indices;
    return caf::none;
  }
  bool skip = false;
  if (auto err = check_init(skip); err || skip)
    return err;
  slot_->initialized = true;
  slot_->declared_pages = num_kv_indices;
  caf::anon_send(slot_->actor,
                 sender_init{slot_->room, num_kv_indices, aux_index});
  return caf::none;
}

caf::error kv_sender::send(std::vector<int64_t> kv_indices, bool is_last,
                           std::vector<int64_t> state_indices) {
  return send_chunk(sender_chunk{0, std::move(kv_indices), is_last, std::move(state_indices)});
}

caf::error kv_sender::send_buffers(std::vector<int64_t> kv_indices,
                                   std::vector<int32_t> kv_buffers, bool is_last,
                                   std::vector<int64_t> state_indices) {
  if (kv_buffers.empty())
    return make_error(errc::invalid_argument,
                      "send_buffers names no KV buffer (send() sends every buffer)");
  return send_chunk(sender_chunk{0, std::move(kv_indices), is_last, std::move(state_indices),
                                 std::move(kv_buffers)});
}

caf::error kv_sender::send_chunk(sender_chunk chunk) {
  if (slot_ && owned())
    owner_->pump();
  if (slot_ && dummy_done(*slot_) && slot_->initialized && !slot_->last_sent) {
    slot_->last_sent = chunk.is_last;
    return caf::none;
  }
  bool skip = false;
  if (auto err = check_live("send", skip); err || skip)
    return err;
  if (!slot_->initialized)
    return make_error(errc::not_initialized,
                      room_text(slot_->room) + ": send before init");
  if (slot_->last_sent)
    return make_error(errc::invalid_argument,
                      room_text(slot_->room) + ": the last chunk was sent");
  caf::error result;
  // Pages of every buffer are counted here; a chunk of some buffers is
  // counted per buffer by the room, which fails with the reason.
  if (chunk.kv_buffers.empty()) {
    auto total = slot_->sent_pages + chunk.kv_indices.size();
    if (total > slot_->declared_pages)
      result = make_error(errc::too_many_indices,
                          room_text(slot_->room) + ": "
                            + std::to_string(total) + " KV indices sent, "
                            + std::to_string(slot_->declared_pages)
                            + " declared by init");
    slot_->sent_pages = total;
  }
  slot_->last_sent = chunk.is_last;
  // Even a refused chunk goes to the room, which fails with the same reason:
  // the scheduler's view of the room is broken and its peers must know.
  chunk.room = slot_->room;
  caf::anon_send(slot_->actor, std::move(chunk));
  return result;
}

int64_t kv_sender::decode_prefix_len() {
  if (!slot_)
    return 0;
  if (owned())
    owner_->pump();
  return slot_->decode_prefix_len;
}

caf::error kv_receiver::init(std::vector<int64_t> kv_indices, int64_t aux_index,
                             std::vector<int64_t> state_indices, int64_t decode_prefix_len) {
  bool skip = false;
  if (auto err = check_init(skip); err || skip)
    return err;
  if (decode_prefix_len < 0)
    return make_error(errc::invalid_argument,
                      room_text(slot_->room) + ": a negative decode prefix ("
                        + std::to_string(decode_prefix_len) + " tokens)");
  slot_->initialized = true;
  slot_->declared_pages = kv_indices.size();
  caf::anon_send(slot_->actor,
                 receiver_init{slot_->room, std::move(kv_indices), aux_index,
                               std::move(state_indices), decode_prefix_len});
  return caf::none;
}

bool kv_receiver::landed(const std::vector<int32_t>& kv_buffers) {
  if (poll() == kv_poll::success)
    return true;
  auto& done = slot_->landed;
  for (auto b : kv_buffers)
    if (b < 0 || static_cast<size_t>(b) >= done.size() || !done[static_cast<size_t>(b)])
      return false;
  return true;
}

} // namespace kvroom
