#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "caf/actor_addr.hpp"

#include "kvroom/actors/local_messages.hpp"
#include "kvroom/actors/room/room_protocol.hpp"

namespace kvroom {

/// Every rank of the deployment as the bootstrap registry pushed it, the
/// peer managers this rank monitors, and the ranks recently lost. Lost ranks
/// are remembered for a bounded window: rooms that open (or learn their
/// counterpart) shortly after fail at once instead of at a timeout, while a
/// healthy peer CAF 0.17 once reported unreachable fails nothing forever.
///
/// Updates merge: a rank the registry no longer lists stays (a restarted
/// registry lists only who registered again so far); only a loss removes
/// one. A rank listed with a control endpoint is *usable* (found, grouped,
/// handed to rooms) only once this rank linked to it directly and both
/// sides proved membership (`link`); until then it is *listed*.
class peer_directory {
public:
  using entry_ptr = std::shared_ptr<const rank_entry>;

  struct lost_rank {
    peer_lost why;
    uint64_t since_ms = 0;
    /// The incarnation that went (0: not known).
    uint64_t incarnation = 0;
  };

  peer_directory(rank_id self, uint64_t lost_window_ms)
    : self_(self), lost_window_ms_(lost_window_ms) {
    // nop
  }

  struct changes {
    std::vector<entry_ptr> usable;   ///< usable now: monitor them
    std::vector<entry_ptr> to_link;  ///< listed, to link (new or replaced)
  };

  /// Merges the registry's view (see the class comment).
  changes update(const std::vector<rank_entry>& ranks);

  /// The listed rank `id` of `incarnation`, linked through `manager`: usable
  /// from now, no longer lost, and replacing an older incarnation. A link of
  /// an incarnation other than the one lost ends the loss even before the
  /// listing comes. Null when
  /// the directory lists no such rank (yet): then kept, and made usable when
  /// the listing arrives (a peer that linked to us first).
  entry_ptr link(rank_id id, uint64_t incarnation, const caf::actor& manager);

  /// A linked rank back to listed (an idle link closed by agreement): no
  /// longer usable, linked again when a room needs it. Its entry as it was
  /// usable, or null when it was not linked.
  entry_ptr unlink(rank_id id);

  /// Forgets a listed, not yet usable rank (the registry saw it go).
  void unlist(rank_id id) {
    listed_.erase(id);
    early_links_.erase(id);
  }

  /// The listed (not yet usable) entry of rank `id`, if any.
  entry_ptr listed(rank_id id) const;

  /// The listed (not yet linked) ranks of group (`side`, `dp`): the links a
  /// room of that group needs.
  std::vector<entry_ptr> listed_group(role side, int32_t dp) const;

  /// The listed (not yet linked) decider of `group`, if any.
  entry_ptr listed_decider(const decider_ref& group) const;

  entry_ptr find(rank_id id) const;

  /// The rank that decides rooms of `group`, if the directory lists it.
  entry_ptr decider(const decider_ref& group) const;

  /// The ranks of group (`side`, `dp`), by TP rank.
  std::vector<entry_ptr> group(role side, int32_t dp) const;

  /// Every other rank of a room that failed on rank `self`: its own TP
  /// group and each counterpart's group (a counterpart stands for its
  /// group). With no counterpart known (a prefill room before any decode
  /// destination arrived) the whole other side: ranks without the room keep
  /// the failure as an early, expiring one, and the rank that has it fails
  /// at once instead of at its bootstrap timeout.
  std::vector<entry_ptr> fan_out_targets(const rank_ref& self,
                                         const std::vector<rank_ref>& counterparts) const;

  /// The ranks of the same groups that are listed but not linked yet (lazy
  /// links; its own group and its counterparts', never the whole other
  /// side): the failure reaches them once their link is up. Without them
  /// a replacement that had not linked to the decider when a room of its
  /// failed never heard of it (`kvroom stress --processes --seed=36`: the
  /// restarted decode rank's room waited until the prefill ranks exited).
  std::vector<rank_id> fan_out_unlinked(const rank_ref& self,
                                        const std::vector<rank_ref>& counterparts) const;

  /// The decode side's TP size (every decode rank has the same; the registry
  /// refuses another), or 0 while no decode rank is known.
  int32_t decode_tp() const;

  /// What this rank knows of side `side`: its listed and usable ranks.
  side_shape shape(role side) const;

  const std::vector<entry_ptr>& all() const noexcept {
    return directory_;
  }

  /// Usable ranks other than this one.
  size_t usable_peers() const noexcept {
    size_t n = 0;
    for (auto& e : directory_)
      n += e->rank.id != self_ ? 1 : 0;
    return n;
  }

  /// Listed ranks not linked yet.
  size_t listed_peers() const noexcept {
    return listed_.size();
  }

  /// The monitored peer whose manager this is; no longer monitored.
  entry_ptr take_peer(const caf::actor_addr& manager);

  /// The monitored peer with this rank id; no longer monitored.
  entry_ptr take_peer(rank_id id);

  /// The rank is gone: out of the directory, remembered as lost (with the
  /// incarnation that went, when known).
  void lose(peer_lost why, uint64_t now_ms, uint64_t incarnation = 0);

  const std::unordered_map<rank_id, lost_rank>& lost() const noexcept {
    return lost_;
  }

  /// Forgets losses older than the window.
  void expire(uint64_t now_ms);

private:
  rank_id self_;
  uint64_t lost_window_ms_;
  entry_ptr make_usable(entry_ptr e);

  std::vector<entry_ptr> directory_;
  /// Listed with a control endpoint, not linked yet, by rank id.
  std::unordered_map<rank_id, entry_ptr> listed_;
  /// Links completed before the listing arrived: (id, incarnation) -> manager.
  std::unordered_map<rank_id, std::pair<uint64_t, caf::actor>> early_links_;
  /// By address: actor ids repeat across nodes, so only the full address
  /// tells two processes' managers apart.
  std::unordered_map<caf::actor_addr, entry_ptr> peers_;
  std::unordered_map<rank_id, lost_rank> lost_;
};

} // namespace kvroom
