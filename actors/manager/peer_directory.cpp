#include "kvroom/actors/manager/peer_directory.hpp"

#include <algorithm>

namespace kvroom {

peer_directory::entry_ptr peer_directory::make_usable(entry_ptr e) {
  auto id = e->rank.id;
  lost_.erase(id);
  listed_.erase(id);
  // A replaced rank: its old manager is no longer a peer of ours.
  for (auto i = peers_.begin(); i != peers_.end();)
    i = i->second->rank.id == id ? peers_.erase(i) : std::next(i);
  directory_.erase(std::remove_if(directory_.begin(), directory_.end(),
                                  [&](const auto& x) { return x->rank.id == id; }),
                   directory_.end());
  if (e->manager && id != self_)
    peers_.emplace(e->manager.address(), e);
  directory_.push_back(e);
  return e;
}

peer_directory::changes peer_directory::update(const std::vector<rank_entry>& ranks) {
  changes out;
  for (auto& e : ranks) {
    auto id = e.rank.id;
    auto known = find(id);
    bool needs_link = e.control_port != 0 && id != self_;
    if (!needs_link) {
      // In this process (or ourselves): the registry's handle is direct.
      if (known && known->manager == e.manager && known->incarnation == e.incarnation)
        continue;
      auto ptr = make_usable(std::make_shared<const rank_entry>(e));
      if (ptr->manager && id != self_)
        out.usable.push_back(ptr);
      continue;
    }
    if (known && known->incarnation == e.incarnation)
      continue;
    if (auto l = listed_.find(id); l != listed_.end() && l->second->incarnation == e.incarnation)
      continue;
    auto ptr = std::make_shared<const rank_entry>(e);
    if (auto early = early_links_.find(id);
        early != early_links_.end() && early->second.first == e.incarnation) {
      auto linked = std::make_shared<rank_entry>(e);
      linked->manager = early->second.second;
      early_links_.erase(early);
      out.usable.push_back(make_usable(std::move(linked)));
      continue;
    }
    // A new incarnation of a lost rank is on its way back: rooms that open
    // now wait for the link instead of failing on the old one's loss.
    lost_.erase(id);
    listed_[id] = ptr;
    out.to_link.push_back(std::move(ptr));
  }
  return out;
}

peer_directory::entry_ptr peer_directory::link(rank_id id, uint64_t incarnation,
                                               const caf::actor& manager) {
  if (auto known = find(id); known && known->incarnation == incarnation)
    return nullptr; // linked already (both sides linked at once)
  // A link proves a live incarnation (its handshake is bound to it). One
  // other than the incarnation lost is the rank back: rooms that open now
  // wait for its listing instead of failing on the old one's loss. The new
  // rank can reach us before the registry's push does (measured: `kvroom
  // stress --processes --seed=10`, a restarted prefill rank's first rooms
  // failed on its predecessor's loss on every survivor).
  if (auto x = lost_.find(id);
      x != lost_.end() && x->second.incarnation != 0 && x->second.incarnation != incarnation)
    lost_.erase(x);
  auto l = listed_.find(id);
  if (l == listed_.end() || l->second->incarnation != incarnation) {
    // Bounded by the directory's own size: one per rank id.
    early_links_[id] = {incarnation, manager};
    return nullptr;
  }
  auto linked = std::make_shared<rank_entry>(*l->second);
  linked->manager = manager;
  return make_usable(std::move(linked));
}

peer_directory::entry_ptr peer_directory::unlink(rank_id id) {
  auto e = find(id);
  if (!e || !e->manager || e->control_port == 0 || id == self_)
    return nullptr;
  for (auto i = peers_.begin(); i != peers_.end();)
    i = i->second->rank.id == id ? peers_.erase(i) : std::next(i);
  directory_.erase(std::remove_if(directory_.begin(), directory_.end(),
                                  [&](const auto& x) { return x->rank.id == id; }),
                   directory_.end());
  auto again = std::make_shared<rank_entry>(*e);
  again->manager = nullptr;
  listed_[id] = std::move(again);
  return e;
}

peer_directory::entry_ptr peer_directory::listed(rank_id id) const {
  auto i = listed_.find(id);
  return i == listed_.end() ? nullptr : i->second;
}

std::vector<peer_directory::entry_ptr> peer_directory::listed_group(role side,
                                                                   int32_t dp) const {
  std::vector<entry_ptr> out;
  for (auto& kvp : listed_)
    if (kvp.second->rank.side == side && kvp.second->rank.dp_rank == dp)
      out.push_back(kvp.second);
  return out;
}

peer_directory::entry_ptr peer_directory::listed_decider(const decider_ref& group) const {
  for (auto& kvp : listed_)
    if (is_decider(kvp.second->rank, group))
      return kvp.second;
  return nullptr;
}

peer_directory::entry_ptr peer_directory::find(rank_id id) const {
  for (auto& e : directory_)
    if (e->rank.id == id)
      return e;
  return nullptr;
}

peer_directory::entry_ptr peer_directory::decider(const decider_ref& group) const {
  for (auto& e : directory_)
    if (is_decider(e->rank, group))
      return e;
  return nullptr;
}

namespace {

/// Whether `r` is a target of a failure fan-out from `self` (see
/// fan_out_targets); with `whole_side`, every rank of the other side when
/// no counterpart is known.
bool fan_out_target(const rank_ref& r, const rank_ref& self,
                    const std::vector<rank_ref>& counterparts, bool whole_side) {
  auto in_group = [&](role side, int32_t dp) { return r.side == side && r.dp_rank == dp; };
  if (r.id == self.id)
    return false;
  bool target = in_group(self.side, self.dp_rank)
                || (whole_side && counterparts.empty() && r.side != self.side);
  for (auto& c : counterparts)
    target = target || in_group(c.side, c.dp_rank);
  return target;
}

} // namespace

std::vector<peer_directory::entry_ptr>
peer_directory::fan_out_targets(const rank_ref& self,
                                const std::vector<rank_ref>& counterparts) const {
  std::vector<entry_ptr> out;
  for (auto& e : directory_)
    if (fan_out_target(e->rank, self, counterparts, true))
      out.push_back(e);
  return out;
}

std::vector<rank_id> peer_directory::fan_out_unlinked(const rank_ref& self,
                                                      const std::vector<rank_ref>& counterparts) const {
  // Never the whole other side: a link to every rank of it for one room
  // would be a storm of dials. A rank of it that opens the room later sends
  // its destination to a prefill rank that has the failure, and hears it
  // then (prefill_room's on_dst).
  std::vector<rank_id> out;
  for (auto& [id, e] : listed_)
    if (!find(id) && fan_out_target(e->rank, self, counterparts, false))
      out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

side_shape peer_directory::shape(role side) const {
  auto ranks = directory_;
  for (auto& kvp : listed_)
    ranks.push_back(kvp.second);
  return shape_of(ranks, side);
}

int32_t peer_directory::decode_tp() const {
  // A decode rank that declares no layout holds the model at its TP size.
  for (auto& e : directory_)
    if (e->rank.side == role::decode)
      return e->has_parallel ? e->parallel.tp_size : e->rank.tp_size;
  return 0;
}

std::vector<peer_directory::entry_ptr> peer_directory::group(role side,
                                                             int32_t dp) const {
  std::vector<entry_ptr> out;
  for (auto& e : directory_)
    if (e->rank.side == side && e->rank.dp_rank == dp)
      out.push_back(e);
  std::sort(out.begin(), out.end(),
            [](auto& x, auto& y) {
              return x->rank.pp_rank != y->rank.pp_rank ? x->rank.pp_rank < y->rank.pp_rank
                                                        : x->rank.tp_rank < y->rank.tp_rank;
            });
  return out;
}

peer_directory::entry_ptr peer_directory::take_peer(const caf::actor_addr& manager) {
  auto i = peers_.find(manager);
  if (i == peers_.end())
    return nullptr;
  auto out = i->second;
  peers_.erase(i);
  return out;
}

peer_directory::entry_ptr peer_directory::take_peer(rank_id id) {
  for (auto i = peers_.begin(); i != peers_.end(); ++i) {
    if (i->second->rank.id == id) {
      auto out = i->second;
      peers_.erase(i);
      return out;
    }
  }
  return nullptr;
}

void peer_directory::lose(peer_lost why, uint64_t now_ms, uint64_t incarnation) {
  auto id = why.rank.id;
  directory_.erase(std::remove_if(directory_.begin(), directory_.end(),
                                  [&](const auto& e) { return e->rank.id == id; }),
                   directory_.end());
  // A listed newer incarnation stays listed: it replaces the lost one.
  lost_[id] = lost_rank{std::move(why), now_ms, incarnation};
}

void peer_directory::expire(uint64_t now_ms) {
  for (auto i = lost_.begin(); i != lost_.end();)
    i = now_ms - i->second.since_ms >= lost_window_ms_ ? lost_.erase(i) : std::next(i);
}

} // namespace kvroom
