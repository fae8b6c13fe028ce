#include "kvroom/actors/manager/parking.hpp"

#include <algorithm>

namespace kvroom {

namespace {

/// Moves the items of `xs` that `take` selects to `out` (their values), in
/// order; returns how many moved.
template <class Item, class Value, class Take>
size_t move_out(std::vector<Item>& xs, std::vector<Value>& out, Take take) {
  auto keep = std::stable_partition(xs.begin(), xs.end(),
                                    [&](const auto& x) { return !take(x); });
  for (auto j = keep; j != xs.end(); ++j)
    out.push_back(std::move(j->value));
  auto n = static_cast<size_t>(xs.end() - keep);
  xs.erase(keep, xs.end());
  return n;
}

} // namespace

bool parking::park_dst(dst_info info, uint64_t now_ms) {
  if (full())
    return false;
  auto room = info.room;
  dsts_[room].push_back({std::move(info), now_ms});
  ++dsts_count_;
  return true;
}

std::vector<dst_info>
parking::take_dsts(room_id room, const std::function<bool(const dst_info&)>& ready) {
  std::vector<dst_info> out;
  auto i = dsts_.find(room);
  if (i == dsts_.end())
    return out;
  auto& xs = i->second;
  dsts_count_ -= move_out(xs, out, [&](const auto& x) { return ready(x.value); });
  if (xs.empty())
    dsts_.erase(i);
  return out;
}

std::vector<room_id> parking::dst_rooms() const {
  std::vector<room_id> out;
  for (auto& kvp : dsts_)
    out.push_back(kvp.first);
  return out;
}

bool parking::park_part(part_done part, uint64_t now_ms) {
  if (full())
    return false;
  auto room = part.room;
  parts_[room].push_back({std::move(part), now_ms});
  ++parts_count_;
  return true;
}

std::vector<part_done> parking::take_parts(room_id room) {
  std::vector<part_done> out;
  auto i = parts_.find(room);
  if (i == parts_.end())
    return out;
  for (auto& x : i->second)
    out.push_back(std::move(x.value));
  parts_count_ -= i->second.size();
  parts_.erase(i);
  return out;
}

bool parking::park_commit(room_id room, uint64_t now_ms) {
  if (commits_.count(room) > 0)
    return true;
  if (full())
    return false;
  commits_.emplace(room, now_ms);
  return true;
}

bool parking::take_commit(room_id room) {
  return commits_.erase(room) > 0;
}

bool parking::park_failure(room_failed msg, uint64_t now_ms) {
  if (failures_.count(msg.room) > 0)
    return true; // the first one stands
  if (full())
    return false;
  auto room = msg.room;
  failures_.emplace(room, item<room_failed>{std::move(msg), now_ms});
  return true;
}

void parking::set_failure(room_failed msg, uint64_t now_ms) {
  auto room = msg.room;
  failures_[room] = item<room_failed>{std::move(msg), now_ms};
}

const room_failed* parking::failure(room_id room) const {
  auto i = failures_.find(room);
  return i == failures_.end() ? nullptr : &i->second.value;
}

std::optional<room_failed> parking::take_failure(room_id room) {
  auto i = failures_.find(room);
  if (i == failures_.end())
    return std::nullopt;
  auto out = std::move(i->second.value);
  failures_.erase(i);
  return out;
}

std::vector<room_failed> parking::take_proposals(uint64_t now_ms, uint64_t min_age_ms) {
  std::vector<room_failed> out;
  for (auto i = failures_.begin(); i != failures_.end();) {
    if (!i->second.value.propagated && now_ms - i->second.since_ms >= min_age_ms) {
      out.push_back(std::move(i->second.value));
      i = failures_.erase(i);
    } else {
      ++i;
    }
  }
  return out;
}

bool parking::has_proposals() const {
  return std::any_of(failures_.begin(), failures_.end(),
                     [](auto& kvp) { return !kvp.second.value.propagated; });
}

bool parking::park_for_decider(decider_ref to, caf::message payload, uint64_t now_ms) {
  if (full())
    return false;
  for_deciders_.push_back({to, std::move(payload), now_ms});
  return true;
}

void parking::flush_deciders(
  const std::function<bool(const decider_ref&, caf::message&)>& send) {
  auto& xs = for_deciders_;
  xs.erase(std::remove_if(xs.begin(), xs.end(),
                          [&](auto& x) { return send(x.to, x.payload); }),
           xs.end());
}

bool parking::park_for_rank(rank_id to, caf::message payload, uint64_t now_ms) {
  if (full())
    return false;
  for_ranks_.push_back({to, std::move(payload), now_ms});
  return true;
}

void parking::flush_ranks(const std::function<bool(rank_id, caf::message&)>& send) {
  auto& xs = for_ranks_;
  xs.erase(std::remove_if(xs.begin(), xs.end(), [&](auto& x) { return send(x.to, x.payload); }),
           xs.end());
}

std::vector<dst_info> parking::expire(uint64_t now_ms) {
  auto old = [&](uint64_t since) { return now_ms - since >= max_age_ms_; };
  std::vector<dst_info> out;
  for (auto i = dsts_.begin(); i != dsts_.end();) {
    auto& xs = i->second;
    dsts_count_ -= move_out(xs, out, [&](const auto& x) { return old(x.since_ms); });
    i = xs.empty() ? dsts_.erase(i) : std::next(i);
  }
  for (auto i = parts_.begin(); i != parts_.end();) {
    auto& xs = i->second;
    auto keep = std::remove_if(xs.begin(), xs.end(),
                               [&](const auto& x) { return old(x.since_ms); });
    parts_count_ -= static_cast<size_t>(xs.end() - keep);
    xs.erase(keep, xs.end());
    i = xs.empty() ? parts_.erase(i) : std::next(i);
  }
  for (auto i = failures_.begin(); i != failures_.end();)
    i = old(i->second.since_ms) ? failures_.erase(i) : std::next(i);
  for (auto i = commits_.begin(); i != commits_.end();)
    i = old(i->second) ? commits_.erase(i) : std::next(i);
  for_deciders_.erase(std::remove_if(for_deciders_.begin(), for_deciders_.end(),
                                     [&](const auto& x) { return old(x.since_ms); }),
                      for_deciders_.end());
  for_ranks_.erase(std::remove_if(for_ranks_.begin(), for_ranks_.end(),
                                  [&](const auto& x) { return old(x.since_ms); }),
                   for_ranks_.end());
  return out;
}

std::vector<rank_id> parking::waiting_ranks() const {
  std::vector<rank_id> out;
  for (auto& x : for_ranks_)
    if (std::find(out.begin(), out.end(), x.to) == out.end())
      out.push_back(x.to);
  return out;
}

std::vector<decider_ref> parking::waiting_deciders() const {
  std::vector<decider_ref> out;
  for (auto& x : for_deciders_)
    if (std::none_of(out.begin(), out.end(), [&](const decider_ref& y) {
          return y.side == x.to.side && y.dp_rank == x.to.dp_rank;
        }))
      out.push_back(x.to);
  return out;
}

} // namespace kvroom
