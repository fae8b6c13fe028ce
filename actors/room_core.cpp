#include "actors/room_core.hpp"

#include <algorithm>

#include "caf/all.hpp"

#include "actors/logging.hpp"
#include "messages/assert.hpp"

namespace kvroom {

uint64_t room_core::now_ms() noexcept {
  using namespace std::chrono;
  return static_cast<uint64_t>(
    duration_cast<milliseconds>(steady_clock::now().time_since_epoch())
      .count());
}

std::chrono::milliseconds room_core::tick_interval(const room_timeouts& t) {
  auto shortest = std::min({t.bootstrap_ms, t.waiting_ms, t.transferring_ms});
  auto ms = std::clamp<uint32_t>(shortest / 8, 1, 2000);
  return std::chrono::milliseconds{ms};
}

void room_core::init(caf::event_based_actor* self, room_params params) {
  self_ = self;
  params_ = std::move(params);
  fsm_ = std::make_unique<room_fsm>(params_.room, params_.self,
                                    params_.timeouts, now_ms());
  coordinator_ = params_.self.side == role::decode && params_.self.tp_rank == 0;
  if (coordinator_)
    slots_done_.assign(static_cast<size_t>(params_.self.tp_size), false);
  self_->send(params_.manager,
              room_opened{params_.room, caf::actor_cast<caf::actor>(self_)});
}

void room_core::publish(kv_poll state) {
  room_event ev{params_.room, state};
  if (params_.inbox)
    self_->send(params_.inbox, ev);
  if (params_.listener)
    self_->send(params_.listener, ev);
}

void room_core::conclude(bool fan_out, bool requested) {
  // The manager hears first: once the scheduler sees Failed and asks for the
  // failure, the record is already in the manager's mailbox ahead of it.
  room_concluded msg{params_.room, fsm_->state(), {}, counterparts_, fan_out,
                     requested};
  if (fsm_->state() == kv_poll::failed)
    msg.error = fsm_->failure();
  self_->send(params_.manager, std::move(msg));
  publish(fsm_->state());
}

void room_core::conclude_failed(const kv_transfer_error& err, bool fan_out,
                                bool requested) {
  auto res = err.is_from_another_rank ? fsm_->fail_remote(err)
                                      : fsm_->fail_local(err.failure_reason);
  if (res == fsm_result::changed)
    conclude(fan_out, requested);
  else
    logger()->debug("room {} on {}: failure from rank {} ignored ({}): {}",
                    params_.room, to_string(params_.self), err.origin_rank,
                    to_string(res), err.failure_reason);
}

void room_core::advance(kv_poll next) {
  if (fsm_->advance(next, now_ms()) == fsm_result::changed)
    publish(next);
}

void room_core::prepare(int32_t decode_dp) {
  KVROOM_ASSERT(!coordinator_);
  prepared_ = true;
  decode_dp_ = decode_dp;
  prepared_deadline_ms_ = now_ms() + 2ull * params_.timeouts.transferring_ms;
}

void room_core::on_part(const part_done& part) {
  KVROOM_ASSERT(coordinator_);
  if (fsm_->concluded())
    return;
  if (part.slot < 0 || static_cast<size_t>(part.slot) >= slots_done_.size()) {
    fail_local("part confirmation for TP slot " + std::to_string(part.slot)
               + " outside [0, " + std::to_string(slots_done_.size()) + ")");
    return;
  }
  slots_done_[static_cast<size_t>(part.slot)] = true;
  if (part.decode_room && part.decode_rank != params_.self.id)
    participants_[part.decode_rank] = part.decode_room;
  if (part.prefill_room)
    participants_[part.prefill_rank] = part.prefill_room;
  if (!std::all_of(slots_done_.begin(), slots_done_.end(),
                   [](bool x) { return x; }))
    return;
  if (fsm_->succeed() != fsm_result::changed)
    return;
  for (auto& kvp : participants_)
    self_->send(kvp.second, room_committed{params_.room});
  conclude(false);
}

void room_core::on_committed() {
  if (fsm_->succeed() == fsm_result::changed)
    conclude(false);
}

void room_core::request_decision(kv_transfer_error err) {
  // Our part is done and the coordinator may have committed already: it
  // decides, and its answer (the failure, or a commit) concludes us.
  if (decision_requested_)
    return;
  decision_requested_ = true;
  pending_error_ = err;
  decision_deadline_ms_ = now_ms() + params_.timeouts.transferring_ms;
  self_->send(params_.manager,
              to_coordinator{decode_dp_,
                             caf::make_message(room_failed{
                               params_.room, std::move(err), false})});
}

void room_core::fail_local(std::string reason, bool requested) {
  if (fsm_->concluded()) {
    logger()->debug("room {} on {}: local failure after conclusion ignored: {}",
                    params_.room, to_string(params_.self), reason);
    return;
  }
  kv_transfer_error err{params_.room, std::move(reason), false,
                        params_.self.id};
  if (prepared_)
    request_decision(std::move(err));
  else
    conclude_failed(err, true, requested);
}

void room_core::fail_remote(const kv_transfer_error& err,
                            bool decision_request) {
  if (coordinator_ && decision_request) {
    if (fsm_->state() == kv_poll::success) {
      // Committed already. The requester's room actor may be gone (killed
      // after its part was done): answer its manager, which settles for it.
      self_->send(params_.manager,
                  to_rank{err.origin_rank,
                          caf::make_message(room_committed{params_.room})});
      return;
    }
    // Undecided: the requester's failure becomes everyone's, with the
    // requester as origin; this rank fans it out on its behalf.
    auto copy = err;
    copy.is_from_another_rank = true;
    conclude_failed(copy, true);
    return;
  }
  auto copy = err;
  // Our own failure, decided by the coordinator and sent back to us.
  copy.is_from_another_rank = err.origin_rank != params_.self.id;
  conclude_failed(copy, false);
}

void room_core::check_deadline() {
  if (fsm_->concluded())
    return;
  auto now = now_ms();
  if (decision_requested_) {
    if (now >= decision_deadline_ms_) {
      // No word from the coordinator: conclude with the cause we asked
      // about, keeping its origin (a lost peer stays the origin).
      prepared_ = false;
      auto err = pending_error_;
      err.failure_reason += " (the room's coordinator gave no decision within "
                            + std::to_string(params_.timeouts.transferring_ms) + " ms)";
      conclude_failed(err, true);
    }
    return;
  }
  if (prepared_) {
    if (now >= prepared_deadline_ms_)
      fail_local("no commit from the room's coordinator within "
                 + std::to_string(2ull * params_.timeouts.transferring_ms)
                 + " ms after this rank's part was done");
    return;
  }
  if (!fsm_->expired(now))
    return;
  auto& me = params_.self;
  if (me.side == role::decode && !coordinator_) {
    // Two ranks of a room timing out together would be two origins: the
    // coordinator decides (its own timeout, or this one, wins once).
    decode_dp_ = me.dp_rank;
    request_decision(kv_transfer_error{params_.room, fsm_->timeout_reason(now), false, me.id});
    return;
  }
  // Prefill ranks may not know the coordinator yet: a later TP slot waits a
  // little longer, so the earliest timeout reaches it first and is the one
  // origin.
  auto stagger = static_cast<uint64_t>(me.tp_rank) * 2
                 * static_cast<uint64_t>(tick_interval(params_.timeouts).count());
  if (me.side == role::prefill && now < fsm_->deadline_ms() + stagger)
    return;
  fail_local(fsm_->timeout_reason(now));
}

bool room_core::depends_on(const rank_ref& rank) const noexcept {
  if (rank.id == params_.self.id)
    return false;
  if (rank.side == params_.self.side && rank.dp_rank == params_.self.dp_rank)
    return true;
  return std::any_of(counterparts_.begin(), counterparts_.end(),
                     [&](const rank_ref& x) {
                       return x.side == rank.side && x.dp_rank == rank.dp_rank;
                     });
}

void room_core::on_peer_lost(const peer_lost& msg) {
  if (fsm_->concluded() || !depends_on(msg.rank))
    return;
  kv_transfer_error err{params_.room, msg.reason, true, msg.rank.id};
  bool lost_coordinator = msg.rank.side == role::decode
                          && msg.rank.dp_rank == decode_dp_
                          && msg.rank.tp_rank == 0;
  if (prepared_ && !lost_coordinator) {
    request_decision(std::move(err));
    return;
  }
  // Every survivor detects the loss itself, with the lost rank as origin, but
  // a rank whose room has not learned its counterparts yet cannot tell that
  // the loss concerns it: fan the failure out (receivers keep the first
  // copy; the rest are ignored as late).
  conclude_failed(err, true);
}

void room_core::clear() {
  // Clearing a live room abandons it: its peers learn now, not at a timeout.
  if (!fsm_->concluded()) {
    prepared_ = false;
    fail_local("cleared by scheduler while " + to_string(fsm_->state()), true);
  }
  fsm_->clear();
  self_->quit();
}

} // namespace kvroom
