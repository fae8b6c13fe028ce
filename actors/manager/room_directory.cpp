#include "kvroom/actors/manager/room_directory.hpp"

#include <algorithm>

namespace kvroom {

bool room_directory::entry::involves(const rank_ref& peer) const noexcept {
  if (peer.side == role::prefill && peer.dp_rank == prefill_dp)
    return true;
  return std::find(dst_ranks.begin(), dst_ranks.end(), peer.id) != dst_ranks.end();
}


room_directory::entry& room_directory::open(room_id room, caf::actor_id actor,
                                            entry e) {
  if (tombstones_.erase(room) > 0)
    tombstone_order_.erase(
      std::find(tombstone_order_.begin(), tombstone_order_.end(), room));
  by_actor_[actor] = room;
  e.actor_id = actor;
  auto& slot = rooms_[room];
  slot = std::move(e);
  return slot;
}

room_directory::entry* room_directory::find(room_id room) {
  auto i = rooms_.find(room);
  return i == rooms_.end() ? nullptr : &i->second;
}

bool room_directory::involves(const rank_ref& self, const rank_ref& peer) const {
  if (rooms_.empty() && dead_.empty())
    return false;
  // Dead rooms are carried on by this manager: whoever they involve, keep.
  if (!dead_.empty() || (peer.side == self.side && peer.dp_rank == self.dp_rank))
    return true;
  for (auto& kvp : rooms_) {
    auto& e = kvp.second;
    if (peer.side == role::prefill && peer.dp_rank == e.prefill_dp)
      return true;
    if (std::find(e.dst_ranks.begin(), e.dst_ranks.end(), peer.id) != e.dst_ranks.end())
      return true;
  }
  return false;
}

std::optional<room_id> room_directory::room_of(caf::actor_id actor) const {
  auto i = by_actor_.find(actor);
  if (i == by_actor_.end())
    return std::nullopt;
  return i->second;
}

std::optional<room_directory::entry> room_directory::close(room_id room) {
  auto i = rooms_.find(room);
  if (i == rooms_.end())
    return std::nullopt;
  auto out = std::move(i->second);
  rooms_.erase(i);
  by_actor_.erase(out.actor_id);
  return out;
}

void room_directory::bury(room_id room, bool failed, kv_transfer_error error) {
  if (tombstones_.emplace(room, tombstone{failed, std::move(error)}).second)
    tombstone_order_.push_back(room);
  while (tombstone_order_.size() > max_tombstones_) {
    tombstones_.erase(tombstone_order_.front());
    tombstone_order_.pop_front();
  }
}

const room_directory::tombstone* room_directory::tombstone_of(room_id room) const {
  auto i = tombstones_.find(room);
  return i == tombstones_.end() ? nullptr : &i->second;
}

room_directory::route_t room_directory::route(room_id room) {
  route_t out;
  if (auto i = rooms_.find(room); i != rooms_.end()) {
    out.where = route_t::open;
    out.room = &i->second;
  } else if (auto d = dead_.find(room); d != dead_.end()) {
    out.where = route_t::dead;
    out.protocol = &d->second;
  } else if (auto t = tombstones_.find(room); t != tombstones_.end()) {
    out.where = route_t::tombstone;
    out.grave = &t->second;
  }
  return out;
}

room_protocol& room_directory::carry(room_id room, room_protocol p) {
  return dead_.insert_or_assign(room, std::move(p)).first->second;
}

room_protocol* room_directory::dead(room_id room) {
  auto i = dead_.find(room);
  return i == dead_.end() ? nullptr : &i->second;
}

void room_directory::bury_dead(room_id room) {
  auto i = dead_.find(room);
  if (i == dead_.end())
    return;
  bool failed = i->second.state() == kv_poll::failed;
  auto error = failed ? i->second.failure() : kv_transfer_error{};
  dead_.erase(i);
  bury(room, failed, std::move(error));
}

std::vector<room_id> room_directory::dead_rooms() const {
  std::vector<room_id> out;
  out.reserve(dead_.size());
  for (auto& kvp : dead_)
    out.push_back(kvp.first);
  return out;
}

void room_directory::fence(room_id room, const std::vector<rank_id>& decode) {
  auto& xs = fencing_[room];
  for (auto d : decode)
    if (std::find(xs.begin(), xs.end(), d) == xs.end())
      xs.push_back(d);
}

bool room_directory::join_fence(room_id room, rank_id decode) {
  auto i = fencing_.find(room);
  if (i == fencing_.end())
    return false;
  if (std::find(i->second.begin(), i->second.end(), decode) == i->second.end())
    i->second.push_back(decode);
  return true;
}

std::vector<rank_id> room_directory::end_fence(room_id room) {
  auto i = fencing_.find(room);
  if (i == fencing_.end())
    return {};
  auto out = std::move(i->second);
  fencing_.erase(i);
  return out;
}

} // namespace kvroom
