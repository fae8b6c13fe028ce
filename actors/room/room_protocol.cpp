#include "kvroom/actors/room/room_protocol.hpp"

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
                             room_timing timing, uint64_t now_ms,
                             options opts)
  : self_(self), timing_(timing), opts_(opts),
    fsm_(room, self, timing.timeouts(), now_ms),
    decider_{role::prefill, self.side == role::prefill ? self.dp_rank : prefill_dp} {
  // nop
}

room_protocol room_protocol::orphaned(room_id room, rank_ref self, int32_t prefill_dp,
                                     room_timing timing, uint64_t now_ms, options opts,
                                     const std::vector<rank_id>& dst_ranks,
                                     const std::vector<rank_id>& fences,
                                     std::vector<rank_ref> decode_ranks) {
  room_protocol p{room, self, prefill_dp, timing, now_ms, opts};
  if (self.side == role::decode) {
    // Until resolved, its counterpart is the whole prefill group.
    rank_ref group;
    group.side = role::prefill;
    group.dp_rank = prefill_dp;
    group.id = -1;
    p.set_counterparts({group});
    if (opts.fence)
      for (auto r : dst_ranks)
        if (std::find(fences.begin(), fences.end(), r) == fences.end())
          p.dst_sent(r);
  } else {
    p.set_counterparts(std::move(decode_ranks));
  }
  p.prepare(now_ms, p.out_);
  p.out_.clear();
  return p;
}

kv_transfer_error room_protocol::decide_unopened(kv_transfer_error proposed) {
  // Every rank, the proposer included, concludes with it as a decision; the
  // origin stays the rank that identified the failure.
  proposed.is_from_another_rank = true;
  return proposed;
}

room_effect room_protocol::answer_cleared(bool failed, const kv_transfer_error& error,
                                          rank_id asking) {
  auto out = make_effect(room_effect::kind::answer,
                         failed ? kv_poll::failed : kv_poll::success,
                         failed ? error : kv_transfer_error{});
  out.rank = asking;
  return out;
}

void room_protocol::commit_also(const std::vector<rank_id>& ranks) {
  for (auto r : ranks)
    add_recipient(r);
}

void room_protocol::mapped_group(const std::vector<rank_id>& group) {
  if (deciding())
    commit_also(group);
}

written_part room_protocol::part_written(const rank_ref& decode, bool mapped, size_t sources,
                                         bool checked) {
  if (checked)
    return written_part{decode, false, false};
  return written_part{decode, !mapped || sources == 1, !mapped};
}

void room_protocol::add_recipient(rank_id rank) {
  if (rank >= 0 && rank != self_.id
      && std::find(recipients_.begin(), recipients_.end(), rank) == recipients_.end())
    recipients_.push_back(rank);
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
  if (opts_.fence && self_.side == role::decode && (!writers_.empty() || reading_)) {
    // A sender may still be writing into the pages (or this rank's own
    // reads landing in them): the scheduler must not see the room terminal
    // (and reuse them) before that stopped.
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
                                      : fsm_.fail_local(err.failure_reason, err.cause);
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
  decision_deadline_ms_ = now_ms + timing_.decision_ms();
  auto ev = make_effect(room_effect::kind::propose, fsm_.state(), std::move(err));
  ev.decider = decider_;
  ev.rank = self_.id;
  out.push_back(std::move(ev));
}

room_effects& room_protocol::fail_local(std::string reason, failure_cause cause,
                                       uint64_t now_ms, bool requested) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  raise(kv_transfer_error{fsm_.room(), std::move(reason), false, self_.id, cause},
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
  prepare(now_ms, out);
  return out;
}

void room_protocol::prepare(uint64_t now_ms, room_effects& out) {
  if (fsm_.concluded())
    return;
  prepared_ = true;
  prepared_deadline_ms_ = now_ms + timing_.prepared_ms();
  if (committed_early_)
    conclude_success(out);
}

room_effects& room_protocol::part_done(int32_t slot, int32_t slots, rank_id decode,
                                      rank_id source, uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  add_recipient(decode);
  add_recipient(source);
  count_slot(slot, slots, now_ms, out);
  return out;
}

void room_protocol::count_slot(int32_t slot, int32_t slots, uint64_t now_ms,
                               room_effects& out) {
  if (fsm_.concluded() || fsm_.cleared())
    return;
  if (!deciding()) {
    raise(kv_transfer_error{fsm_.room(),
                            "part confirmation sent to a rank that does not "
                            "decide the room",
                            false, self_.id, failure_cause::other},
          false, now_ms, out);
    return;
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
                            false, self_.id, failure_cause::other},
          false, now_ms, out);
    return;
  }
  slots_done_[static_cast<size_t>(slot)] = true;
  if (!std::all_of(slots_done_.begin(), slots_done_.end(),
                   [](bool x) { return x; }))
    return;
  auto commit = make_effect(room_effect::kind::commit, kv_poll::success);
  commit.recipients = recipients_;
  out.push_back(std::move(commit));
  conclude_success(out);
}

room_effect room_protocol::report_part(const rank_ref& decode, rank_id source) const {
  auto ev = make_effect(room_effect::kind::report_part, fsm_.state());
  ev.decider = decider_;
  ev.rank = decode.id;
  ev.source = source;
  ev.slot = decode.tp_rank;
  ev.slots = decode.tp_size;
  return ev;
}

room_effects& room_protocol::all_written(const std::vector<written_part>& parts,
                                        uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  // A rank that proposed a failure (one of its batches failed, say) has no
  // whole part to report, whatever landed since: the decider's answer
  // concludes it.
  if (awaiting_)
    return out;
  // Success still waits for the room's decider.
  prepare(now_ms, out);
  for (auto& part : parts) {
    auto& d = part.decode;
    if (deciding() && part.sole_source) {
      // The decider as the only source of this decode rank: its part is
      // done (the bytes landed), no need for the decode rank to say so. When
      // that was the last part the room commits here and the tell_done
      // carries the commit: two cross-process messages per 1P x 1D room
      // instead of four. Otherwise the commit, when it comes, is the decode
      // rank's confirmation (its only source committed once its own bytes
      // landed); a failure reaches it with the fence instead.
      count_slot(d.tp_rank, d.tp_size, now_ms, out);
      bool committed = fsm_.state() == kv_poll::success;
      if (!fsm_.concluded()) {
        add_recipient(d.id);
        continue;
      }
      auto ev = make_effect(room_effect::kind::tell_done, fsm_.state());
      ev.rank = d.id;
      ev.counted = true;
      ev.committed = committed;
      out.push_back(std::move(ev));
    } else if (part.reports_part) {
      // The one source of this decode slot reports its part to the decider
      // itself (its bytes landed), and the decider's commit is the decode
      // rank's confirmation: six cross-process messages per 2P x 2D room
      // instead of eight.
      out.push_back(report_part(d, self_.id));
    } else {
      auto ev = make_effect(room_effect::kind::tell_done, fsm_.state());
      ev.rank = d.id;
      out.push_back(std::move(ev));
    }
  }
  return out;
}

room_effects& room_protocol::source_finished(const source_report& r, uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.cleared())
    return out;
  // That sender wrote its last byte: nothing more lands from it.
  release_writer(r.source, out);
  if (fsm_.concluded())
    return out;
  auto fail = [&](std::string why, failure_cause cause = failure_cause::other) {
    raise(kv_transfer_error{fsm_.room(), std::move(why), false, self_.id, cause}, false, now_ms,
          out);
  };
  if (std::find(sources_.begin(), sources_.end(), r.source) == sources_.end()) {
    fail("unexpected transfer confirmation from rank " + std::to_string(r.source));
    return out;
  }
  if (!r.damage.empty()) {
    fail("integrity check failed: " + r.damage, failure_cause::integrity);
    return out;
  }
  if (r.pages != r.expected_pages) {
    fail("prefill rank " + std::to_string(r.source) + " confirmed " + std::to_string(r.pages)
         + " pages, expected " + std::to_string(r.expected_pages));
    return out;
  }
  if (std::find(sources_done_.begin(), sources_done_.end(), r.source) != sources_done_.end())
    return out; // a duplicate
  sources_done_.push_back(r.source);
  if (r.counted) {
    // The decider counted our part itself: it must be our only source.
    if (sources_.size() != 1) {
      fail("prefill rank " + std::to_string(r.source) + " counted a part that "
           + std::to_string(sources_.size()) + " ranks write");
      return out;
    }
    prepare(now_ms, out);
    if (r.committed)
      commit_on_word(out);
    return out;
  }
  if (sources_done_.size() < sources_.size())
    return out; // other sources still write
  out.push_back(report_part(self_, r.source));
  prepare(now_ms, out);
  return out;
}

room_effects& room_protocol::committed(uint64_t now_ms) {
  auto& out = fresh_effects();
  if (fsm_.concluded() || fsm_.cleared())
    return out;
  if (!prepared_ && sources_.size() == 1 && reporting_sources_.size() == 1) {
    auto src = sources_.front();
    release_writer(src, out);
    if (std::find(sources_done_.begin(), sources_done_.end(), src) == sources_done_.end())
      sources_done_.push_back(src);
    prepare(now_ms, out);
  }
  commit_on_word(out);
  return out;
}

void room_protocol::commit_on_word(room_effects& out) {
  if (fsm_.concluded())
    return;
  // The decider's commit can overtake this rank's own part: a decode rank
  // hears it from the decider and its last bytes' confirmation from another
  // prefill rank, over another link. It is kept until the part is done (the
  // fence holds: Success still waits for every writer of this rank).
  if (prepared_)
    conclude_success(out);
  else
    committed_early_ = true;
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
  kv_transfer_error err{fsm_.room(), reason, true, lost.id, failure_cause::peer_lost};
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
    // Only the senders' fence expires; this rank's own reads always answer.
    if (!writers_.empty() && now_ms >= fence_deadline_ms_) {
      auto ev = make_effect(room_effect::kind::fence_expired, fsm_.state(),
                            fsm_.failure());
      ev.recipients = writers_;
      ev.waited_ms = fence_ms();
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
                            + std::to_string(timing_.decision_ms())
                            + " ms)";
      conclude_failed(std::move(err), true, awaiting_requested_, now_ms, out);
    }
    return out;
  }
  if (prepared_) {
    if (now_ms >= prepared_deadline_ms_)
      raise(kv_transfer_error{fsm_.room(),
                              "no commit from the room's decider within "
                                + std::to_string(timing_.prepared_ms())
                                + " ms after this rank's part was done",
                              false, self_.id, failure_cause::timeout_transferring},
            false, now_ms, out);
    return out;
  }
  if (fsm_.expired(now_ms))
    raise(kv_transfer_error{fsm_.room(), fsm_.timeout_reason(now_ms), false,
                            self_.id, fsm_.timeout_cause()},
          false, now_ms, out);
  return out;
}

void room_protocol::dst_sent(rank_id prefill, bool reports) {
  if (std::find(sources_.begin(), sources_.end(), prefill) == sources_.end())
    sources_.push_back(prefill);
  if (reports)
    reporting_sources_.push_back(prefill);
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

room_effects& room_protocol::reading(bool in_flight, uint64_t) {
  auto& out = fresh_effects();
  reading_ = in_flight;
  if (!in_flight && held_ && writers_.empty())
    publish_terminal(out);
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
                                      false, self_.id, failure_cause::abort},
                    true, true, now_ms, out);
  fsm_.clear();
  held_ = false;
  return out;
}

} // namespace kvroom
