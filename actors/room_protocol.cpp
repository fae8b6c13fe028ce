#include "kvroom/actors/room_protocol.hpp"

#include <algorithm>

#include "kvroom/messages/assert.hpp"

namespace kvroom {

namespace {

room_effect make_effect(room_effect::kind what, kv_poll state,
                        kv_transfer_error error = {}) {
  room_effect out;
  out.what = what;
  out.state = state;
  out.error = std::move(error);
  return out;
}

} // namespace

bool is_decider(const rank_ref& rank, const decider_ref& group) noexcept {
  return rank.side == group.side && rank.dp_rank == group.dp_rank
         && rank.tp_rank == 0 && rank.pp_rank == 0;
}

room_protocol::room_protocol(room_id room, rank_ref self, int32_t prefill_dp,
                             room_timeouts timeouts, uint64_t now_ms,
                             options opts)
  : self_(self), timeouts_(timeouts), opts_(opts),
    fsm_(room, self, timeouts, now_ms),
    decider_{role::prefill, self.side == role::prefill ? self.dp_rank : prefill_dp} {
  // nop
}

room_effects& room_protocol::advance(kv_poll next, uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.advance(next, now_ms) == fsm_result::changed) {
    published_ = next;
    out.push_back(make_effect(room_effect::kind::publish, next));
  }
  return out;
}

void room_protocol::publish_terminal(room_effects& out) {
  if (opts_.fence && self_.side == role::decode && !writers_.empty()) {
    // A sender may still be writing into the pages: the scheduler must not
    // see the room terminal (and reuse them) before it stopped.
    held_ = true;
    return;
  }
  held_ = false;
  published_ = fsm_.state();
  auto ev = make_effect(room_effect::kind::publish, fsm_.state());
  if (fsm_.state() == kv_poll::failed)
    ev.error = fsm_.failure();
  out.push_back(std::move(ev));
}

void room_protocol::conclude_failed(kv_transfer_error err, bool fan_out,
                                    bool requested, uint64_t now_ms,
                                    room_effects& out) {
  err.bootstrap_room = fsm_.room();
  auto res = err.is_from_another_rank ? fsm_.fail_remote(err)
                                      : fsm_.fail_local(err.failure_reason);
  if (res != fsm_result::changed)
    return;
  awaiting_ = false;
  prepared_ = false;
  fence_deadline_ms_ = now_ms + fence_ms();
  auto ev = make_effect(room_effect::kind::concluded, kv_poll::failed, fsm_.failure());
  ev.fan_out = fan_out;
  ev.requested = requested;
  out.push_back(std::move(ev));
  publish_terminal(out);
}

void room_protocol::conclude_success(room_effects& out) {
  if (fsm_.succeed() != fsm_result::changed)
    return;
  awaiting_ = false;
  prepared_ = false;
  out.push_back(make_effect(room_effect::kind::concluded, kv_poll::success));
  publish_terminal(out);
}

void room_protocol::raise(kv_transfer_error err, bool requested,
                          uint64_t now_ms, room_effects& out) {
  if (fsm_.concluded())
    return;
  if (deciding()) {
    conclude_failed(std::move(err), true, requested, now_ms, out);
    return;
  }
  // The first failure proposed stands; a second one here is a consequence.
  if (awaiting_)
    return;
  awaiting_ = true;
  awaiting_requested_ = requested;
  proposed_ = err;
  decision_deadline_ms_ = now_ms + timeouts_.transferring_ms;
  auto ev = make_effect(room_effect::kind::propose, fsm_.state(), std::move(err));
  ev.decider = decider_;
  ev.rank = self_.id;
  out.push_back(std::move(ev));
}

room_effects& room_protocol::fail_local(std::string reason, uint64_t now_ms,
                                       bool requested) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  raise(kv_transfer_error{fsm_.room(), std::move(reason), false, self_.id},
        requested, now_ms, out);
  return out;
}

room_effects& room_protocol::on_failure(const kv_transfer_error& err,
                                       bool decision_request, rank_id from,
                                       uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.cleared())
    return out;
  auto copy = err;
  copy.is_from_another_rank = err.origin_rank != self_.id;
  if (!decision_request) {
    // A decision: conclude with it (a no-op once concluded).
    bool mine = awaiting_ && err.origin_rank == self_.id;
    conclude_failed(std::move(copy), false, mine && awaiting_requested_,
                    now_ms, out);
    return out;
  }
  if (fsm_.concluded()) {
    // Decided already: the asking rank concludes with what this room did.
    auto ev = make_effect(room_effect::kind::answer, fsm_.state());
    if (fsm_.state() == kv_poll::failed)
      ev.error = fsm_.failure();
    ev.rank = from;
    out.push_back(std::move(ev));
    return out;
  }
  if (deciding()) {
    conclude_failed(std::move(copy), true, false, now_ms, out);
    return out;
  }
  // Asked while not deciding (a misrouted request): hand it on.
  auto ev = make_effect(room_effect::kind::propose, fsm_.state(), err);
  ev.decider = decider_;
  ev.rank = from;
  out.push_back(std::move(ev));
  return out;
}

room_effects& room_protocol::prepare(uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.concluded())
    return out;
  prepared_ = true;
  prepared_deadline_ms_ = now_ms + 2ull * timeouts_.transferring_ms;
  if (committed_early_)
    conclude_success(out);
  return out;
}

room_effects& room_protocol::part_done(int32_t slot, int32_t slots,
                                      uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  if (!deciding()) {
    raise(kv_transfer_error{fsm_.room(),
                            "part confirmation sent to a rank that does not "
                            "decide the room",
                            false, self_.id},
          false, now_ms, out);
    return out;
  }
  if (slots_done_.empty() && slots > 0 && slots <= 4096)
    slots_done_.assign(static_cast<size_t>(slots), false);
  if (slot < 0 || static_cast<size_t>(slot) >= slots_done_.size()
      || static_cast<size_t>(slots) != slots_done_.size()) {
    raise(kv_transfer_error{fsm_.room(),
                            "part confirmation for decode TP slot "
                              + std::to_string(slot) + " of "
                              + std::to_string(slots) + " (room has "
                              + std::to_string(slots_done_.size())
                              + " slots)",
                            false, self_.id},
          false, now_ms, out);
    return out;
  }
  slots_done_[static_cast<size_t>(slot)] = true;
  if (!std::all_of(slots_done_.begin(), slots_done_.end(),
                   [](bool x) { return x; }))
    return out;
  out.push_back(make_effect(room_effect::kind::commit, kv_poll::success));
  conclude_success(out);
  return out;
}

room_effects& room_protocol::committed(uint64_t) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  // The decider's commit can overtake this rank's own part: a decode rank
  // hears it from the decider and its last bytes' confirmation from another
  // prefill rank, over another link. It is kept until the part is done (the
  // fence holds: Success still waits for every writer of this rank).
  if (prepared_)
    conclude_success(out);
  else
    committed_early_ = true;
  return out;
}

bool room_protocol::decider_lost(const rank_ref& lost) const noexcept {
  return is_decider(lost, decider_);
}

bool room_protocol::depends_on(const rank_ref& rank) const noexcept {
  if (rank.id == self_.id)
    return false;
  if (rank.side == self_.side && rank.dp_rank == self_.dp_rank)
    return true;
  return std::any_of(counterparts_.begin(), counterparts_.end(),
                     [&](const rank_ref& x) {
                       return x.side == rank.side && x.dp_rank == rank.dp_rank;
                     });
}

room_effects& room_protocol::peer_lost(const rank_ref& lost,
                                      const std::string& reason,
                                      uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.cleared())
    return out;
  // A lost sender writes nothing more: its loss is its fence.
  release_writer(lost.id, out);
  if (fsm_.concluded() || !depends_on(lost))
    return out;
  kv_transfer_error err{fsm_.room(), reason, true, lost.id};
  if (decider_lost(lost)) {
    // Nobody is left to decide: every survivor concludes with the lost rank
    // as origin (one origin still), and fans out for ranks that cannot tell
    // the loss concerns them (no counterpart known yet).
    conclude_failed(std::move(err), true, false, now_ms, out);
    return out;
  }
  raise(std::move(err), false, now_ms, out);
  return out;
}

room_effects& room_protocol::tick(uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.cleared())
    return out;
  if (held_) {
    if (now_ms >= fence_deadline_ms_) {
      auto ev = make_effect(room_effect::kind::fence_expired, fsm_.state(),
                     fsm_.failure());
      out.push_back(std::move(ev));
      writers_.clear();
      publish_terminal(out);
    }
    return out;
  }
  if (fsm_.concluded())
    return out;
  if (awaiting_) {
    if (now_ms >= decision_deadline_ms_) {
      // No word from the decider: conclude with the cause proposed, keeping
      // its origin (a lost peer stays the origin).
      auto err = proposed_;
      err.failure_reason += " (the room's decider gave no decision within "
                            + std::to_string(timeouts_.transferring_ms)
                            + " ms)";
      conclude_failed(std::move(err), true, awaiting_requested_, now_ms, out);
    }
    return out;
  }
  if (prepared_) {
    if (now_ms >= prepared_deadline_ms_)
      raise(kv_transfer_error{fsm_.room(),
                              "no commit from the room's decider within "
                                + std::to_string(2ull
                                                 * timeouts_.transferring_ms)
                                + " ms after this rank's part was done",
                              false, self_.id},
            false, now_ms, out);
    return out;
  }
  if (fsm_.expired(now_ms))
    raise(kv_transfer_error{fsm_.room(), fsm_.timeout_reason(now_ms), false,
                            self_.id},
          false, now_ms, out);
  return out;
}

void room_protocol::dst_sent(rank_id prefill) {
  if (std::find(writers_.begin(), writers_.end(), prefill) == writers_.end())
    writers_.push_back(prefill);
}

void room_protocol::release_writer(rank_id prefill, room_effects& out) {
  auto i = std::find(writers_.begin(), writers_.end(), prefill);
  if (i == writers_.end())
    return;
  writers_.erase(i);
  if (held_ && writers_.empty())
    publish_terminal(out);
}

room_effects& room_protocol::source_done(rank_id prefill, uint64_t) {
  auto& out = fresh_effects();
  release_writer(prefill, out);
  return out;
}

room_effects& room_protocol::fenced(rank_id prefill, uint64_t) {
  auto& out = fresh_effects();
  release_writer(prefill, out);
  return out;
}

room_effects& room_protocol::clear(uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.cleared())
    return out;
  // Clearing a live room abandons it: its peers learn now, not at a timeout.
  // The room goes away, so there is no decider's answer to wait for.
  if (!fsm_.concluded())
    conclude_failed(kv_transfer_error{fsm_.room(),
                                      "cleared by scheduler while "
                                        + to_string(fsm_.state()),
                                      false, self_.id},
                    true, true, now_ms, out);
  fsm_.clear();
  held_ = false;
  return out;
}

} // namespace kvroom
