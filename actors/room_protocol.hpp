#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/room_fsm.hpp"

namespace kvroom {

/// The group whose TP rank 0 decides a room's outcome on failure.
struct decider_ref {
  role side = role::decode;
  int32_t dp_rank = 0;
};

/// The one rule for who decides: decode TP rank 0 of the room's decode group
/// (the *coordinator*) once a rank knows that group; before that (a prefill
/// room that has no decode destination yet) prefill TP rank 0 of its own
/// group, which hands the question on to the coordinator as soon as it knows
/// it.
bool is_decider(const rank_ref& rank, const decider_ref& group) noexcept;

/// True for decode TP rank 0: it collects every TP slot's part and commits.
bool is_coordinator(const rank_ref& rank) noexcept;

/// One thing a room actor must do; the protocol never does anything itself.
struct room_effect {
  enum class kind : uint8_t {
    /// Tell the scheduler (and the room's listener) the room's `state`, with
    /// `error` when it is Failed.
    publish,
    /// Tell the manager the room reached its terminal `state` (`error` when
    /// Failed); `fan_out`: send the failure to every other rank of the room;
    /// `requested`: the scheduler asked for it (logged at info).
    concluded,
    /// Ask the decider of group `decider` to decide on `error`, on behalf of
    /// rank `rank` (whom the answer goes to).
    propose,
    /// Tell rank `rank` the room's outcome: Failed with `error`, or Success.
    answer,
    /// Coordinator: every part is done; commit every participant.
    commit,
    /// The decode pages were held from the scheduler longer than the fence
    /// allows: published without every sender's confirmation (logged).
    fence_expired,
  };
  kind what = kind::publish;
  kv_poll state = kv_poll::bootstrapping;
  kv_transfer_error error;
  bool fan_out = false;
  bool requested = false;
  decider_ref decider;
  rank_id rank = -1;
};

using room_effects = std::vector<room_effect>;

/// The whole decision logic of one bootstrap room on one rank, with no actor
/// runtime: the room actor feeds it scheduler calls, peer messages, transfer
/// progress, timer ticks and peer loss, and carries out the effects it
/// returns. Time is passed in, so every message order is a unit test.
///
/// Rules (DESIGN.md):
/// - **One origin.** A rank that is not the decider never concludes Failed on
///   its own while the decider can be reached: it proposes the failure and
///   concludes with the decider's answer. The decider takes the first failure
///   it hears of (its own or a proposal) and fans it out; every later one
///   changes nothing. The same fault on every rank at once (bad indices on
///   every decode rank, timeouts together, aborts on both sides) thus has one
///   origin. Only a lost decider, or one that does not answer within the
///   decision window, lets a rank conclude alone.
/// - **Agreement.** A rank whose part is done is *prepared* and concludes
///   Success only on the coordinator's commit, which comes once every TP slot
///   is done; no rank reports Success while another reports Failed.
/// - **Fenced pages.** A decode room that handed its destination to a prefill
///   rank publishes a terminal state only once that rank wrote its last byte
///   (`source_done`), confirmed it stopped (`fenced`), or was lost; after
///   that, nothing of the room lands in its pages again and the scheduler may
///   reuse them. The fence waits at most `fence_ms()`.
class room_protocol {
public:
  room_protocol(room_id room, rank_ref self, room_timeouts timeouts,
                uint64_t now_ms);

  room_id room() const noexcept {
    return fsm_.room();
  }

  const rank_ref& self() const noexcept {
    return self_;
  }

  /// The room's state on this rank; terminal before the scheduler sees it
  /// while a fence holds the publication.
  kv_poll state() const noexcept {
    return fsm_.state();
  }

  /// What the scheduler was last told.
  kv_poll published() const noexcept {
    return published_;
  }

  bool concluded() const noexcept {
    return fsm_.concluded();
  }

  /// The root cause; meaningful only once Failed.
  const kv_transfer_error& failure() const noexcept {
    return fsm_.failure();
  }

  /// Whose TP rank 0 decides this room now.
  const decider_ref& decider() const noexcept {
    return decider_;
  }

  /// This rank decides the room.
  bool deciding() const noexcept {
    return is_decider(self_, decider_);
  }

  /// A prefill room knows the decode group of the room.
  bool bound() const noexcept {
    return bound_;
  }

  bool prepared() const noexcept {
    return prepared_;
  }

  /// Waiting for the decider's answer to a proposed failure.
  bool awaiting_decision() const noexcept {
    return awaiting_;
  }

  /// Decode: a terminal state is held from the scheduler by the fence.
  bool fence_held() const noexcept {
    return held_;
  }

  /// The other side's ranks this room talks to (fan-out targets; a rank with
  /// `id == -1` stands for its whole group).
  const std::vector<rank_ref>& counterparts() const noexcept {
    return counterparts_;
  }

  void set_counterparts(std::vector<rank_ref> xs) {
    counterparts_ = std::move(xs);
  }

  /// Longest a decode room holds its terminal state for a sender's fence.
  uint64_t fence_ms() const noexcept {
    return 2ull * timeouts_.transferring_ms;
  }

  // -- inputs ---------------------------------------------------------------

  /// Moves forward to a non-terminal state.
  room_effects advance(kv_poll next, uint64_t now_ms);

  /// Prefill: a destination of decode group `decode_dp` arrived; from now on
  /// its coordinator decides.
  room_effects bind(int32_t decode_dp, uint64_t now_ms);

  /// A failure identified on this rank; `requested` when the scheduler asked
  /// for it (abort).
  room_effects fail_local(std::string reason, uint64_t now_ms,
                          bool requested = false);

  /// A `room_failed` arrived. `decision_request`: rank `from` asks this rank
  /// to decide; otherwise it is a decision (propagated) to conclude with.
  room_effects on_failure(const kv_transfer_error& err, bool decision_request,
                          rank_id from, uint64_t now_ms);

  /// This rank's part is done (prefill: every byte landed and the decode rank
  /// was told; decode: its part was sent to the coordinator). Not on the
  /// coordinator, which counts its own part with `part_done`.
  room_effects prepare(uint64_t now_ms);

  /// Coordinator: TP slot `slot` is done. Commits once every slot is.
  room_effects part_done(int32_t slot, uint64_t now_ms);

  /// The coordinator committed the room.
  room_effects committed(uint64_t now_ms);

  /// A rank of the deployment is gone; the room fails if it depends on it.
  room_effects peer_lost(const rank_ref& lost, const std::string& reason,
                         uint64_t now_ms);

  /// Acts on every deadline: the state's, a prepared rank's, an unanswered
  /// proposal's, and the fence's.
  room_effects tick(uint64_t now_ms);

  /// True when losing `rank` breaks this room.
  bool depends_on(const rank_ref& rank) const noexcept;

  // -- the fence (decode) ---------------------------------------------------

  /// The destination went to prefill rank `prefill`: it may write from now
  /// until it finishes, confirms a fence, or is lost.
  void dst_sent(rank_id prefill);

  /// Prefill rank `prefill` wrote its last byte (transfer_done).
  room_effects source_done(rank_id prefill, uint64_t now_ms);

  /// Prefill rank `prefill` confirmed it posts nothing more for this room.
  room_effects fenced(rank_id prefill, uint64_t now_ms);

  /// Prefill ranks that may still write into this room's pages.
  const std::vector<rank_id>& writers() const noexcept {
    return writers_;
  }

  /// The scheduler released the room: a live room fails at once (and its
  /// peers hear of it); nothing changes it afterwards.
  room_effects clear(uint64_t now_ms);

private:
  /// Concludes Failed with `err` (its origin as given) and says so.
  void conclude_failed(kv_transfer_error err, bool fan_out, bool requested,
                       uint64_t now_ms, room_effects& out);
  void conclude_success(room_effects& out);
  /// A failure this rank must see decided: decide it here or propose it.
  void raise(kv_transfer_error err, bool requested, uint64_t now_ms,
             room_effects& out);
  void publish_terminal(room_effects& out);
  void release_writer(rank_id prefill, room_effects& out);
  bool decider_lost(const rank_ref& lost) const noexcept;

  rank_ref self_;
  room_timeouts timeouts_;
  room_fsm fsm_;
  kv_poll published_ = kv_poll::bootstrapping;
  decider_ref decider_;
  bool bound_ = false;
  std::vector<rank_ref> counterparts_;
  // Prepared: part done, waiting for the commit until prepared_deadline_ms_
  // (two transferring timeouts: the rank that really hangs times out first).
  bool prepared_ = false;
  uint64_t prepared_deadline_ms_ = 0;
  // A proposed failure waiting for the decider's answer.
  bool awaiting_ = false;
  bool awaiting_requested_ = false;
  uint64_t decision_deadline_ms_ = 0;
  kv_transfer_error proposed_;
  // Coordinator: which TP slots are done.
  std::vector<bool> slots_done_;
  // Decode: senders that may still write, and a held terminal state.
  std::vector<rank_id> writers_;
  bool held_ = false;
  uint64_t fence_deadline_ms_ = 0;
};

} // namespace kvroom
