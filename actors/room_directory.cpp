#include "kvroom/actors/room_directory.hpp"

#include <algorithm>

namespace kvroom {

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

} // namespace kvroom
