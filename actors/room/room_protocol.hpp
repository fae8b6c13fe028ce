#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvroom/actors/room_fsm.hpp"
#include "kvroom/actors/room/room_timing.hpp"

namespace kvroom {

/// The group whose TP rank 0 decides a room.
struct decider_ref {
  role side = role::prefill;
  int32_t dp_rank = 0;
};

/// The one rule for who decides: prefill TP rank 0 of the room's prefill
/// data-parallel group. Every rank of the room knows it before any message
/// moves (prefill ranks: their own group; decode ranks: the group the
/// scheduler named in `make_receiver`), so two sides failing before their
/// handshake still meet at one decision point. It decides both ways: it
/// commits once every decode TP slot's part is done, and it picks the one
/// origin of a failure.
bool is_decider(const rank_ref& rank, const decider_ref& group) noexcept;

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
    /// Decider: every part is done; tell every rank in `recipients` (the
    /// room's other participants) that the room committed.
    commit,
    /// The decode pages were held from the scheduler longer than the fence
    /// allows (`waited_ms`): published without the confirmation of the
    /// senders in `recipients` (logged).
    fence_expired,
    /// Tell the decider that decode TP slot `slot` of `slots` holds its whole
    /// part: decode rank `rank`, whose last bytes came from prefill rank
    /// `source`.
    report_part,
    /// Prefill: tell decode rank `rank` that this rank wrote its last byte;
    /// `counted`: this rank is the decider and counted that rank's part
    /// itself; `committed`: and that committed the room.
    tell_done,
  };
  kind what = kind::publish;
  kv_poll state = kv_poll::bootstrapping;
  kv_transfer_error error;
  bool fan_out = false;
  bool requested = false;
  decider_ref decider;
  rank_id rank = -1;
  rank_id source = -1;
  int32_t slot = 0;
  int32_t slots = 1;
  bool counted = false;
  bool committed = false;
  std::vector<rank_id> recipients;
  uint64_t waited_ms = 0;
};

using room_effects = std::vector<room_effect>;

/// Decode: a prefill rank's word that it wrote its last byte of this room.
struct source_report {
  rank_id source = -1;
  /// Pages it wrote, and the pages this rank's destination holds.
  uint64_t pages = 0;
  uint64_t expected_pages = 0;
  /// The decider sent it and counted this rank's part itself.
  bool counted = false;
  /// And that committed the room.
  bool committed = false;
  /// With the integrity check on: why what landed from it is not what it
  /// sent (empty: it is, or nothing was checked).
  std::string damage = {};
};

/// Prefill: one decode rank this rank wrote its whole share to.
struct written_part {
  rank_ref decode;
  /// This rank is the decode rank's only source.
  bool sole_source = true;
  /// The only source of a decode slot reports the slot's part to the decider
  /// itself (rooms without declared layouts); otherwise the decode rank
  /// counts its sources and reports.
  bool reports_part = true;
};

/// The whole decision logic of one bootstrap room on one rank, with no actor
/// runtime: the room actor feeds it scheduler calls, peer messages, transfer
/// progress, timer ticks and peer loss, and carries out the effects it
/// returns. Time is passed in, so every message order is a unit test.
///
/// Rules (docs/DESIGN.md):
/// - **One origin.** A rank that is not the decider never concludes Failed on
///   its own while the decider can be reached: it proposes the failure and
///   concludes with the decider's answer. The decider takes the first failure
///   it hears of (its own or a proposal) and fans it out; every later one
///   changes nothing. The same fault on every rank at once (bad indices on
///   every decode rank, timeouts together, aborts on both sides) thus has one
///   origin. Only a lost decider, or one that does not answer within the
///   decision window, lets a rank conclude alone.
/// - **Agreement.** A rank whose part is done is *prepared* and concludes
///   Success only on the decider's commit, which comes once every decode TP
///   slot is done; one point decides commit and failure, so no rank reports
///   Success while another reports Failed.
/// - **Fenced pages.** A decode room that handed its destination to a prefill
///   rank publishes a terminal state only once that rank wrote its last byte
///   (`source_done`), confirmed it stopped (`fenced`), or was lost; after
///   that, nothing of the room lands in its pages again and the scheduler may
///   reuse them. The fence waits at most `fence_ms()`. A decode rank that
///   pulls (reads the prefill's pages itself) holds it also while its own
///   reads are in flight (`reading`).
class room_protocol {
public:
  /// Switches that exist only so a stress run can prove its checker catches
  /// the defects they bring back; both stay on in any real deployment.
  struct options {
    /// Hold a decode room's terminal state until every sender fenced.
    bool fence = true;
    /// Route failures through the room's one decider.
    bool one_decider = true;
  };

  /// `prefill_dp`: the room's prefill data-parallel group (a prefill rank's
  /// own; for a decode rank, the group serving the room).
  room_protocol(room_id room, rank_ref self, int32_t prefill_dp,
                room_timing timing, uint64_t now_ms, options opts);
  room_protocol(room_id room, rank_ref self, int32_t prefill_dp,
                room_timing timing, uint64_t now_ms)
    : room_protocol(room, self, prefill_dp, timing, now_ms, options{}) {
    // nop
  }

  /// The protocol that carries on a room whose actor died before the room
  /// concluded (its manager feeds it from then on). Its part may have been
  /// done and committed already, so it is prepared (waits for the decider's
  /// word). Decode: the prefill ranks in `dst_ranks` that got its pages and
  /// are not in `fences` may still write, so its Failed waits for them.
  /// Prefill: `decode_ranks` are its counterparts.
  static room_protocol orphaned(room_id room, rank_ref self, int32_t prefill_dp,
                                room_timing timing, uint64_t now_ms, options opts,
                                const std::vector<rank_id>& dst_ranks,
                                const std::vector<rank_id>& fences,
                                std::vector<rank_ref> decode_ranks);

  // -- decisions for a room that has no protocol on this rank --------------

  /// The decider's manager decides a proposal for a room that did not open
  /// there within the grace (`room_timing::unopened_grace_ms`): the
  /// proposal's failure stands, as a decision every other rank concludes
  /// with.
  static kv_transfer_error decide_unopened(kv_transfer_error proposed);

  /// A rank asks (for a decision or with a destination) about a room cleared
  /// here: what the room concluded, for rank `asking`. An answer effect:
  /// Failed with the room's root cause, or Success.
  static room_effect answer_cleared(bool failed, const kv_transfer_error& error,
                                    rank_id asking);

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

  /// Success is concluded and published here: nothing of the room is left
  /// to do on this rank, so its actor may end before the scheduler clears
  /// it. Every later word about the room (a peer's late question, a
  /// duplicate confirmation) goes to the manager's tombstone, which answers
  /// as the room would: Success. A Failed room lives until it is cleared:
  /// its failure record is kept while the scheduler may ask for it.
  bool finished() const noexcept {
    return fsm_.state() == kv_poll::success && published_ == kv_poll::success;
  }

  /// The root cause; meaningful only once Failed.
  const kv_transfer_error& failure() const noexcept {
    return fsm_.failure();
  }

  /// Whose TP rank 0 decides this room.
  const decider_ref& decider() const noexcept {
    return decider_;
  }

  /// This rank decides the room.
  bool deciding() const noexcept {
    return !opts_.one_decider || is_decider(self_, decider_);
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
    return timing_.fence_ms();
  }

  const room_timing& timing() const noexcept {
    return timing_;
  }

  /// Decider: ranks that hear the commit even without a part of their own.
  void commit_also(const std::vector<rank_id>& ranks);

  /// A mapped room (declared layouts) learned its prefill group: on the
  /// decider, every rank of it hears the commit, dummies (ranks the mapping
  /// gives nothing to write) included, since they conclude with it; on any
  /// other rank nothing (the decider's commit is the word).
  void mapped_group(const std::vector<rank_id>& group);

  /// What this prefill rank's finished share for `decode` means: whether it
  /// is the decode slot's only source, and whether it reports the slot's
  /// part to the decider itself. A room without declared layouts has one
  /// source per slot, which reports. In a mapped room the decode rank
  /// counts its sources and reports. With the integrity check on (`checked`)
  /// neither: a part is whole only once the decode rank checked what
  /// landed, so it reports its slot itself and no source counts for it.
  static written_part part_written(const rank_ref& decode, bool mapped, size_t sources,
                                   bool checked);

  // -- inputs ---------------------------------------------------------------
  // Each returns the effects it decided, in order. They live in a buffer the
  // protocol reuses (no allocation per call once warm): carry them out
  // before the next input.

  /// Moves forward to a non-terminal state.
  room_effects& advance(kv_poll next, uint64_t now_ms);

  /// A failure identified on this rank; `requested` when the scheduler asked
  /// for it (abort).
  room_effects& fail_local(std::string reason, failure_cause cause, uint64_t now_ms,
                          bool requested = false);

  /// A `room_failed` arrived. `decision_request`: rank `from` asks this rank
  /// to decide; otherwise it is a decision (propagated) to conclude with.
  room_effects& on_failure(const kv_transfer_error& err, bool decision_request,
                          rank_id from, uint64_t now_ms);

  /// This rank's part is done (prefill: every byte landed and the decode rank
  /// was told; decode: its part went to the decider). From now on it waits
  /// for the commit, at most two transferring timeouts.
  room_effects& prepare(uint64_t now_ms);

  /// Decider: decode TP slot `slot` of `slots` received all of its part
  /// (decode rank `decode`, last written by prefill rank `source`; -1 where
  /// not known): both hear the commit. Commits once every slot did.
  room_effects& part_done(int32_t slot, int32_t slots, rank_id decode,
                          rank_id source, uint64_t now_ms);
  room_effects& part_done(int32_t slot, int32_t slots, uint64_t now_ms) {
    return part_done(slot, slots, -1, -1, now_ms);
  }

  /// Prefill: every byte of this rank landed in `parts`. The rank is
  /// prepared; for each decode rank it decides who hears of the part: the
  /// decider counts the parts it is the only source of (and says so with
  /// the `tell_done` that may carry the commit); the only source of a slot
  /// reports it to the decider; otherwise the decode rank hears and counts.
  room_effects& all_written(const std::vector<written_part>& parts, uint64_t now_ms);

  /// Decode: a source wrote its last byte (`transfer_done`). Once every
  /// source did, this rank's part is done: the decider hears of it (unless
  /// it counted the part itself) and this rank is prepared. A part that
  /// arrived damaged (`report.damage`) fails the room here, with this rank
  /// its origin, once that source's writes are over.
  room_effects& source_finished(const source_report& report, uint64_t now_ms);

  /// The decider committed the room. On decode it also confirms the rank's
  /// only source when that source's part reaches the decider without this
  /// rank (`dst_sent`): the decider commits once every slot's part is done,
  /// so no `transfer_done` need come first.
  room_effects& committed(uint64_t now_ms);

  /// A rank of the deployment is gone; the room fails if it depends on it.
  room_effects& peer_lost(const rank_ref& lost, const std::string& reason,
                         uint64_t now_ms);

  /// Acts on every deadline: the state's, a prepared rank's, an unanswered
  /// proposal's, and the fence's.
  room_effects& tick(uint64_t now_ms);

  /// True when losing `rank` breaks this room.
  bool depends_on(const rank_ref& rank) const noexcept;

  // -- the fence (decode) ---------------------------------------------------

  /// The destination went to prefill rank `prefill`: it may write from now
  /// until it finishes, confirms a fence, or is lost. `reports`: that
  /// rank's part reaches the decider without this rank (it is the decider,
  /// or the one source of this slot in a room without declared layouts), so
  /// when it is this rank's only source the decider's commit confirms it.
  void dst_sent(rank_id prefill, bool reports = false);

  /// Prefill rank `prefill` wrote its last byte: the fence alone (a room
  /// whose actor died; `source_finished` is the whole report).
  room_effects& source_done(rank_id prefill, uint64_t now_ms);

  /// Prefill rank `prefill` confirmed it posts nothing more for this room.
  room_effects& fenced(rank_id prefill, uint64_t now_ms);

  /// Prefill ranks that may still write into this room's pages.
  const std::vector<rank_id>& writers() const noexcept {
    return writers_;
  }

  /// Decode, pulling: this rank's own transfer worker has reads of the room
  /// in flight (`true`) or none (`false`). A terminal state is held while
  /// they are; unlike a sender's fence this hold never expires, since the
  /// worker answers every read within its job timeout, and only then is
  /// nothing of the room landing in its pages.
  room_effects& reading(bool in_flight, uint64_t now_ms);

  bool reads_in_flight() const noexcept {
    return reading_;
  }

  /// The scheduler released the room: a live room fails at once (and its
  /// peers hear of it); nothing changes it afterwards.
  room_effects& clear(uint64_t now_ms);

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
  void prepare(uint64_t now_ms, room_effects& out);
  void commit_on_word(room_effects& out);
  void count_slot(int32_t slot, int32_t slots, uint64_t now_ms, room_effects& out);
  void add_recipient(rank_id rank);
  /// Decode rank `decode`'s slot holds its part, last written by `source`.
  room_effect report_part(const rank_ref& decode, rank_id source) const;
  bool decider_lost(const rank_ref& lost) const noexcept;

  room_effects& fresh_effects() {
    out_.clear();
    return out_;
  }

  rank_ref self_;
  room_timing timing_;
  options opts_;
  room_effects out_;
  room_fsm fsm_;
  kv_poll published_ = kv_poll::bootstrapping;
  decider_ref decider_;
  std::vector<rank_ref> counterparts_;
  // Prepared: part done, waiting for the commit until prepared_deadline_ms_.
  bool prepared_ = false;
  uint64_t prepared_deadline_ms_ = 0;
  // The decider committed before this rank's part was done.
  bool committed_early_ = false;
  // A proposed failure waiting for the decider's answer.
  bool awaiting_ = false;
  bool awaiting_requested_ = false;
  uint64_t decision_deadline_ms_ = 0;
  kv_transfer_error proposed_;
  // Decider: which decode TP slots are done, and who hears the commit.
  std::vector<bool> slots_done_;
  std::vector<rank_id> recipients_;
  // Decode: the ranks the destination went to, those that finished writing,
  // those that may still write, and a held terminal state.
  std::vector<rank_id> sources_;
  std::vector<rank_id> reporting_sources_;
  std::vector<rank_id> sources_done_;
  std::vector<rank_id> writers_;
  bool held_ = false;
  uint64_t fence_deadline_ms_ = 0;
  // Decode, pulling: this rank's own reads of the room are in flight.
  bool reading_ = false;
};

} // namespace kvroom
