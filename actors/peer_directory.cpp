#include "kvroom/actors/peer_directory.hpp"

#include <algorithm>

namespace kvroom {

std::vector<peer_directory::entry_ptr>
peer_directory::update(const std::vector<rank_entry>& ranks) {
  std::vector<entry_ptr> fresh;
  std::vector<entry_ptr> to_monitor;
  fresh.reserve(ranks.size());
  for (auto& e : ranks) {
    lost_.erase(e.rank.id);
    auto ptr = std::make_shared<const rank_entry>(e);
    if (e.manager && e.rank.id != self_ && peers_.count(e.manager.address()) == 0) {
      peers_.emplace(e.manager.address(), ptr);
      to_monitor.push_back(ptr);
    }
    fresh.push_back(std::move(ptr));
  }
  directory_ = std::move(fresh);
  return to_monitor;
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

std::vector<peer_directory::entry_ptr> peer_directory::group(role side,
                                                             int32_t dp) const {
  std::vector<entry_ptr> out;
  for (auto& e : directory_)
    if (e->rank.side == side && e->rank.dp_rank == dp)
      out.push_back(e);
  std::sort(out.begin(), out.end(),
            [](auto& x, auto& y) { return x->rank.tp_rank < y->rank.tp_rank; });
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

void peer_directory::lose(peer_lost why, uint64_t now_ms) {
  auto id = why.rank.id;
  directory_.erase(std::remove_if(directory_.begin(), directory_.end(),
                                  [&](const auto& e) { return e->rank.id == id; }),
                   directory_.end());
  lost_[id] = lost_rank{std::move(why), now_ms};
}

void peer_directory::expire(uint64_t now_ms) {
  for (auto i = lost_.begin(); i != lost_.end();)
    i = now_ms - i->second.since_ms >= lost_window_ms_ ? lost_.erase(i) : std::next(i);
}

} // namespace kvroom
