#include "kvroom/transport/grants.hpp"

#include <algorithm>

namespace kvroom {

std::vector<byte_range> merge_ranges(std::vector<byte_range> xs) {
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](const byte_range& x) { return x.size == 0; }),
           xs.end());
  std::sort(xs.begin(), xs.end(),
            [](const byte_range& x, const byte_range& y) { return x.addr < y.addr; });
  std::vector<byte_range> out;
  for (auto& x : xs) {
    if (!out.empty() && x.addr <= out.back().addr + out.back().size) {
      auto end = std::max(out.back().addr + out.back().size, x.addr + x.size);
      out.back().size = end - out.back().addr;
    } else {
      out.push_back(x);
    }
  }
  return out;
}

bool grant_table::grant(room_id room, rank_id sender, std::vector<byte_range> ranges) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = rooms_.find(room);
  if (i == rooms_.end()) {
    if (rooms_.size() >= max_grants_)
      return false;
    i = rooms_.emplace(room, entry{}).first;
  }
  auto& xs = i->second.by_sender[sender];
  xs.insert(xs.end(), ranges.begin(), ranges.end());
  xs = merge_ranges(std::move(xs));
  return true;
}

void grant_table::revoke(room_id room) {
  std::unique_lock<std::mutex> guard{mtx_};
  auto i = rooms_.find(room);
  if (i == rooms_.end())
    return;
  i->second.revoked = true;
  idle_.wait(guard, [&] {
    auto j = rooms_.find(room);
    return j == rooms_.end() || j->second.active == 0;
  });
  rooms_.erase(room);
}

bool ranges_cover(const std::vector<byte_range>& xs, uint64_t addr, uint64_t size) {
  // The last range starting at or before addr must hold all of it.
  auto i = std::upper_bound(xs.begin(), xs.end(), addr,
                            [](uint64_t a, const byte_range& x) { return a < x.addr; });
  if (i == xs.begin())
    return false;
  --i;
  return size <= i->size && addr - i->addr <= i->size - size;
}

grant_table::permit grant_table::admit(room_id room, rank_id sender,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& ops,
                                       std::string& why) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = rooms_.find(room);
  if (i == rooms_.end() || i->second.revoked) {
    why = "room " + std::to_string(room) + " grants rank " + std::to_string(sender)
          + " no pages (not open here, or concluded)";
    return {};
  }
  auto s = i->second.by_sender.find(sender);
  if (s == i->second.by_sender.end()) {
    why = "rank " + std::to_string(sender) + " was granted no pages of room "
          + std::to_string(room);
    return {};
  }
  for (size_t k = 0; k < ops.size(); ++k)
    if (!ranges_cover(s->second, ops[k].first, ops[k].second)) {
      why = std::string{what_} + " " + std::to_string(k) + " of rank " + std::to_string(sender)
            + " lies outside the pages room " + std::to_string(room) + " granted it";
      return {};
    }
  ++i->second.active;
  return permit{this, room};
}

bool grant_table::permit::revoked() const {
  std::lock_guard<std::mutex> guard{table_->mtx_};
  auto i = table_->rooms_.find(room_);
  return i == table_->rooms_.end() || i->second.revoked;
}

void grant_table::permit::release() noexcept {
  if (!table_)
    return;
  {
    std::lock_guard<std::mutex> guard{table_->mtx_};
    if (auto i = table_->rooms_.find(room_); i != table_->rooms_.end())
      --i->second.active;
  }
  table_->idle_.notify_all();
  table_ = nullptr;
}

bool grant_table::applied_before(room_id room, rank_id sender, uint64_t key) const {
  if (key == 0)
    return false;
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = rooms_.find(room);
  if (i == rooms_.end())
    return false;
  auto s = i->second.applied.find(sender);
  return s != i->second.applied.end() && s->second.count(key) > 0;
}

void grant_table::mark_applied(room_id room, rank_id sender, uint64_t key) {
  if (key == 0)
    return;
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = rooms_.find(room);
  if (i == rooms_.end() || i->second.applied_count >= max_keys_per_room)
    return;
  if (i->second.applied[sender].insert(key).second)
    ++i->second.applied_count;
}

size_t grant_table::size() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return rooms_.size();
}

} // namespace kvroom
