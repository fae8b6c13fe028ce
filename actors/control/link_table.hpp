#pragma once

#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "caf/actor.hpp"
#include "caf/node_id.hpp"

#include "kvroom/actors/control/link_timing.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

/// A rank's direct links to its peers as one plain class: the links it
/// dials (want, connect, reply, ack), the handshakes others started with it
/// (hello, finish), and which peer processes' links went idle. Time and the
/// membership proofs are all it needs; the rank's control actor
/// (rank_control.hpp) carries out what it decides (connects, sends, trust)
/// and tells it what came back.
///
/// The handshake (see `membership`): A dials B, sends `link_hello`; B
/// answers `link_reply` with its proof; A checks it and sends `link_finish`
/// with its own; B checks that, trusts A, acks and counts A usable; A counts
/// B usable at the ack. Every answer is checked against the attempt it
/// answers (same peer, same phase); anything else is dropped.
///
/// `Peer` is the peer manager's handle (`caf::actor`; a value in tests): it
/// must compare, hash and test for null. `Node` names a peer process
/// (`caf::node_id`), whose connection carries all its ranks' links.
template <class Peer, class Node>
class basic_link_table {
public:
  using entry_ptr = std::shared_ptr<const rank_entry>;

  basic_link_table(rank_id self, std::shared_ptr<const membership> members, link_timing timing,
                   uint64_t seed)
    : self_(self),
      members_(std::move(members)),
      timing_(timing),
      rng_(static_cast<std::minstd_rand::result_type>(seed)),
      accepting_(link_timing::max_accepting, link_timing::accepting_ms) {
    // nop
  }

  const link_timing& timing() const noexcept {
    return timing_;
  }

  /// A random number for the shell's own jitter (registration).
  uint32_t draw() {
    return static_cast<uint32_t>(rng_());
  }

  // -- links this rank dials ------------------------------------------------

  enum class want_result {
    under_way, ///< this entry's link is being made already: nothing to do
    dial_now,  ///< dial it (`begin`)
    dial_later ///< the higher id yields (`link_timing::yield_ms`): `due` says when
  };

  /// Something here needs `e` (a room with it, a message waiting for it).
  want_result want(const entry_ptr& e, uint64_t now) {
    auto id = e->rank.id;
    if (auto i = dialing_.find(id); i != dialing_.end() && i->second.entry == e)
      return want_result::under_way;
    auto& l = dialing_[id];
    l = outgoing{};
    l.entry = e;
    if (id > self_)
      return want_result::dial_now;
    l.retry_at = now + link_timing::yield_ms(draw());
    return want_result::dial_later;
  }

  /// Starts an attempt of the link to `id`: the entry to connect to, or
  /// null when no link to `id` is wanted.
  entry_ptr begin(rank_id id, uint64_t now) {
    auto* l = find(id);
    if (!l)
      return nullptr;
    // One nonce per link, kept across attempts: a late reply to an earlier
    // attempt still verifies instead of reading as a failed proof.
    if (l->mine.empty())
      l->mine = make_nonce();
    l->peer = Peer{};
    l->finished = false;
    l->started = now;
    l->retry_at = 0;
    ++l->attempts;
    return l->entry;
  }

  /// The connect of an attempt for `entry` found `peer` published: the
  /// hello to send it, or nothing when the attempt is no longer current.
  std::optional<link_hello> connected(rank_id id, const entry_ptr& entry, Peer peer,
                                      uint64_t my_incarnation, uint64_t now) {
    auto* l = current(id, entry);
    if (!l)
      return std::nullopt;
    l->peer = std::move(peer);
    l->started = now; // the handshake's clock starts now
    return link_hello{self_, my_incarnation, l->mine};
  }

  /// The connect found nothing published (the peer is starting).
  void unpublished(rank_id id, const entry_ptr& entry, uint64_t now) {
    if (auto* l = current(id, entry))
      l->retry_at = now + link_timing::unpublished_ms;
  }

  /// The connect failed: the pause before the next attempt, or nothing when
  /// the attempt is no longer current.
  std::optional<uint64_t> connect_failed(rank_id id, const entry_ptr& entry, uint64_t now) {
    auto* l = current(id, entry);
    if (!l)
      return std::nullopt;
    auto pause = link_timing::dial_backoff_ms(l->attempts, draw());
    l->retry_at = now + pause;
    return pause;
  }

  /// The links to attempt again now: their pause ended, their connected
  /// handshake stalled, or their attempt ran past its deadline. Also drops
  /// handshakes others started that expired.
  std::vector<rank_id> due(uint64_t now) {
    std::vector<rank_id> out;
    for (auto& [id, l] : dialing_) {
      bool stalled = l.peer && now - l.started > link_timing::stalled_ms;
      if (l.retry_at != 0 ? now >= l.retry_at
                          : stalled || now - l.started > timing_.attempt_ms())
        out.push_back(id);
    }
    accepting_.expire(now);
    return out;
  }

  /// The earliest time a paused link is to be attempted again (a yield, a
  /// backoff, an endpoint not published yet), if any: the control wakes for
  /// it instead of waiting for its sweep, so the first room with a peer
  /// waits the pause and no more. Attempts in progress are not in it: their
  /// stall and deadline are failures, which the sweep finds.
  std::optional<uint64_t> next_due() const {
    std::optional<uint64_t> out;
    for (auto& kvp : dialing_)
      if (kvp.second.retry_at != 0 && (!out || kvp.second.retry_at < *out))
        out = kvp.second.retry_at;
    return out;
  }

  struct reply_outcome {
    enum what_t { ignored, bad_proof, finish } what = ignored;
    link_finish message; ///< to send to `peer` (finish)
    Peer peer;
    const rank_entry* entry = nullptr; ///< the rank dialled (bad_proof, finish)
  };

  /// `sender` answered our hello. A bad proof pauses the link for
  /// `link_timing::bad_proof_ms`; a good one gets our finish, and `sender`'s
  /// node may be trusted.
  reply_outcome reply(const link_reply& msg, const Peer& sender, uint64_t my_incarnation,
                      uint64_t now) {
    reply_outcome out;
    auto* l = find(msg.from);
    if (!l || !l->peer || !sender || !(sender == l->peer) || l->finished)
      return out;
    out.entry = l->entry.get();
    if (!membership::matches(msg.proof,
                             members_->accept_proof(l->mine, msg.nonce, msg.from, self_))) {
      l->retry_at = now + link_timing::bad_proof_ms;
      out.what = reply_outcome::bad_proof;
      return out;
    }
    l->finished = true;
    out.what = reply_outcome::finish;
    out.peer = l->peer;
    out.message = link_finish{
      self_, members_->join_proof(msg.nonce, l->mine, self_, my_incarnation, msg.from)};
    return out;
  }

  /// A link made: the peer (by rank, incarnation, manager) is usable now.
  struct linked {
    rank_id id = -1;
    uint64_t incarnation = 0;
    Peer peer;
  };

  /// `sender` acked our finish: the link is made.
  std::optional<linked> ack(const link_ack& msg, const Peer& sender) {
    auto i = dialing_.find(msg.from);
    if (i == dialing_.end() || !i->second.finished || !sender || !(sender == i->second.peer))
      return std::nullopt;
    linked out{msg.from, i->second.entry->incarnation, i->second.peer};
    dialing_.erase(i);
    return out;
  }

  /// No link to `id` is wanted any more (it became usable, or left).
  void stop(rank_id id) {
    dialing_.erase(id);
  }

  size_t dialing() const noexcept {
    return dialing_.size();
  }

  // -- handshakes others start ----------------------------------------------

  struct hello_outcome {
    enum what_t { ignored, refused, answer } what = ignored;
    link_reply message; ///< to send back (answer)
  };

  /// `sender` starts a link: our reply, or refused when too many handshakes
  /// are in progress (a stranger's flood).
  hello_outcome hello(const link_hello& msg, const Peer& sender, uint64_t now) {
    hello_outcome out;
    if (!sender || msg.nonce.size() != 32)
      return out;
    // A retry of the same link (same nonce) gets the same answer, so a late
    // finish of the earlier attempt still verifies.
    nonce mine;
    if (auto* prev = accepting_.find(sender); prev && prev->from == msg.from
                                                && prev->theirs == msg.nonce)
      mine = prev->mine;
    else
      mine = make_nonce();
    auto proof = members_->accept_proof(msg.nonce, mine, self_, msg.from);
    incoming in{msg.from, msg.incarnation, msg.nonce, mine};
    if (!accepting_.put(sender, std::move(in), now)) {
      out.what = hello_outcome::refused;
      return out;
    }
    out.what = hello_outcome::answer;
    out.message = link_reply{self_, std::move(mine), std::move(proof)};
    return out;
  }

  struct finish_outcome {
    enum what_t { ignored, bad_proof, accepted } what = ignored;
    linked link; ///< accepted: ack it; the peer is usable, its node trusted
  };

  /// `sender` finishes the link it started.
  finish_outcome finish(const link_finish& msg, const Peer& sender, uint64_t now) {
    finish_outcome out;
    if (!sender)
      return out;
    auto in = accepting_.take(sender, now);
    if (!in || in->from != msg.from)
      return out;
    if (!membership::matches(msg.proof, members_->join_proof(in->mine, in->theirs, in->from,
                                                             in->incarnation, self_))) {
      out.what = finish_outcome::bad_proof;
      return out;
    }
    out.what = finish_outcome::accepted;
    out.link = linked{in->from, in->incarnation, sender};
    return out;
  }

  size_t accepting() const noexcept {
    return accepting_.size();
  }

  // -- idle links -----------------------------------------------------------

  /// A control message to or from process `node`: its links are in use.
  void traffic(const Node& node, uint64_t now) {
    last_traffic_[node] = now;
  }

  /// Process `node` has no link here any more.
  void forget(const Node& node) {
    last_traffic_.erase(node);
    closing_.erase(node);
  }

  /// The processes whose links carried nothing for `link_timing::idle_ms`
  /// and that `in_use(node)` does not need: ask their ranks to close the
  /// link. Each is asked once; an answer that never comes is asked again
  /// after another idle period.
  template <class InUse>
  std::vector<Node> idle(uint64_t now, InUse&& in_use) {
    std::vector<Node> out;
    auto idle = timing_.idle_ms();
    if (idle == 0)
      return out;
    for (auto i = closing_.begin(); i != closing_.end();)
      i = now - i->second > idle ? closing_.erase(i) : std::next(i);
    for (auto& [node, last] : last_traffic_)
      if (now - last >= idle && closing_.count(node) == 0 && !in_use(node))
        out.push_back(node);
    for (auto& node : out)
      closing_[node] = now;
    return out;
  }

  /// `node` answered our close: no longer asked. With `agreed` false it
  /// still uses the link, which counts as traffic.
  void close_answered(const Node& node, bool agreed, uint64_t now) {
    closing_.erase(node);
    if (!agreed)
      traffic(node, now);
  }

private:
  struct outgoing {
    entry_ptr entry;
    nonce mine;
    Peer peer;                ///< connected to (null: connecting, or paused)
    bool finished = false;    ///< link_finish sent, waiting for the ack
    uint64_t started = 0;
    uint64_t retry_at = 0;    ///< 0: an attempt in progress
    uint32_t attempts = 0;
  };

  struct incoming {
    rank_id from = -1;
    uint64_t incarnation = 0;
    nonce theirs;
    nonce mine;
  };

  outgoing* find(rank_id id) {
    auto i = dialing_.find(id);
    return i == dialing_.end() ? nullptr : &i->second;
  }

  /// The link to `id` if `entry` is still what it dials (an answer to an
  /// attempt for an older entry is stale).
  outgoing* current(rank_id id, const entry_ptr& entry) {
    auto* l = find(id);
    return l && l->entry == entry ? l : nullptr;
  }

  rank_id self_;
  std::shared_ptr<const membership> members_;
  link_timing timing_;
  std::minstd_rand rng_;
  std::unordered_map<rank_id, outgoing> dialing_;
  pending_table<Peer, incoming> accepting_;
  std::unordered_map<Node, uint64_t> last_traffic_;
  /// Processes asked to close their idle links, since when.
  std::unordered_map<Node, uint64_t> closing_;
};

/// A rank's links, as its control actor holds them.
using link_table = basic_link_table<caf::actor, caf::node_id>;

} // namespace kvroom
