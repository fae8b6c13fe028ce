#include "kvroom/actors/manager/registry_suspects.hpp"

#include <algorithm>

namespace kvroom {

const char* to_string(probe_outcome x) {
  switch (x) {
    case probe_outcome::refused:
      return "refused";
    case probe_outcome::answered:
      return "answered";
    case probe_outcome::unknown:
      return "no answer";
  }
  return "?";
}

bool registry_suspects::reported(const rank_ref& rank, uint64_t incarnation, std::string reason,
                                uint64_t now_ms) {
  auto [i, added] = by_id_.try_emplace(rank.id);
  if (!added && i->second.incarnation == incarnation)
    return false;
  // A report of another incarnation than the one held: the newer report
  // is what the registry says now.
  i->second = suspect{rank, incarnation, std::move(reason), now_ms + window_ms_};
  return true;
}

std::optional<registry_suspects::suspect>
registry_suspects::probed(rank_id id, uint64_t incarnation, probe_outcome outcome) {
  auto i = by_id_.find(id);
  if (i == by_id_.end() || i->second.incarnation != incarnation
      || outcome != probe_outcome::refused)
    return std::nullopt;
  auto out = std::move(i->second);
  by_id_.erase(i);
  return out;
}

bool registry_suspects::answered(rank_id id, uint64_t incarnation) {
  auto i = by_id_.find(id);
  if (i == by_id_.end() || i->second.incarnation != incarnation)
    return false;
  by_id_.erase(i);
  return true;
}

std::optional<registry_suspects::suspect> registry_suspects::replaced(rank_id id,
                                                                     uint64_t incarnation) {
  auto i = by_id_.find(id);
  if (i == by_id_.end() || incarnation == 0 || i->second.incarnation == incarnation)
    return std::nullopt;
  auto out = std::move(i->second);
  by_id_.erase(i);
  return out;
}

std::vector<registry_suspects::suspect> registry_suspects::expired(uint64_t now_ms) {
  std::vector<suspect> out;
  for (auto i = by_id_.begin(); i != by_id_.end();) {
    if (now_ms >= i->second.deadline_ms) {
      out.push_back(std::move(i->second));
      i = by_id_.erase(i);
    } else {
      ++i;
    }
  }
  return out;
}

std::optional<uint64_t> registry_suspects::next_deadline() const {
  std::optional<uint64_t> out;
  for (auto& kvp : by_id_)
    if (!out || kvp.second.deadline_ms < *out)
      out = kvp.second.deadline_ms;
  return out;
}

} // namespace kvroom
