#include "kvroom/actors/control/directory_rules.hpp"

#include <algorithm>

#include "kvroom/transport/rank_mapping.hpp"

namespace kvroom {

namespace {

std::string buffers_text(const std::vector<paged_buffer>& xs, bool aux) {
  std::string out = std::to_string(xs.size()) + (aux ? " aux buffers" : " KV buffers");
  if (!xs.empty())
    out += " of " + std::to_string(xs.front().page_size_bytes) + (aux ? " B items" : " B pages");
  return out;
}

bool same_shape(const std::vector<paged_buffer>& x, const std::vector<paged_buffer>& y) {
  if (x.size() != y.size())
    return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].page_size_bytes != y[i].page_size_bytes)
      return false;
  return true;
}

} // namespace

std::string layout_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate) {
  auto& c = candidate.layout;
  for (auto& e : ranks) {
    if (e.rank.id == candidate.rank.id)
      continue;
    auto who = to_string(e.rank);
    // One side, one DP size: a decode routes by it.
    if (e.rank.side == candidate.rank.side && e.rank.dp_size > 0 && candidate.rank.dp_size > 0
        && e.rank.dp_size != candidate.rank.dp_size)
      return to_string(candidate.rank) + " says its side has " + std::to_string(candidate.rank.dp_size)
             + " DP groups, " + who + " says " + std::to_string(e.rank.dp_size);
    // Both sides of every part hash it, or neither does.
    if (e.integrity != candidate.integrity)
      return to_string(candidate.rank) + " checks integrity '" + candidate.integrity + "', "
             + who + " '" + e.integrity + "' (every rank of a deployment the same)";
    // Ranks that said what they hold: checked by what the mapping needs
    // (page sizes may differ legitimately, with the heads per rank).
    if (e.has_parallel && candidate.has_parallel) {
      if (auto why = parallel_conflict(candidate.parallel, candidate.rank.side == role::prefill,
                                       e.parallel, e.rank.side == role::prefill);
          !why.empty())
        return to_string(candidate.rank) + " against " + who + ": " + why;
    } else if (e.has_parallel != candidate.has_parallel) {
      // The one that declares none holds what the other's model implies at
      // its TP size, or the two cannot be mapped.
      auto& d = e.has_parallel ? e : candidate;
      auto& u = e.has_parallel ? candidate : e;
      auto implied = implied_layout(d.parallel, u.rank.tp_size, u.rank.tp_rank, u.layout.kv);
      std::string why = implied ? parallel_conflict(*implied, u.rank.side == role::prefill,
                                                    d.parallel, d.rank.side == role::prefill)
                                : describe(implied.error());
      if (!why.empty())
        return to_string(u.rank) + " does not declare a parallel layout, " + to_string(d.rank)
               + " does, and what it holds is not that model's: " + why;
    } else if (!same_shape(e.layout.kv, c.kv))
      return to_string(candidate.rank) + " has " + buffers_text(c.kv, false) + ", " + who
             + " has " + buffers_text(e.layout.kv, false);
    if (!same_shape(e.layout.aux, c.aux))
      return to_string(candidate.rank) + " has " + buffers_text(c.aux, true) + ", " + who
             + " has " + buffers_text(e.layout.aux, true);
    if (!same_shape(e.layout.state, c.state))
      return to_string(candidate.rank) + " has " + std::to_string(c.state.size())
             + " state buffers" + (c.state.empty() ? "" : " of " + std::to_string(c.state.front().page_size_bytes) + " B pages")
             + ", " + who + " has " + std::to_string(e.layout.state.size())
             + (e.layout.state.empty() ? "" : " of " + std::to_string(e.layout.state.front().page_size_bytes) + " B pages");
    // A rank's state is its own shard (Mamba heads split like KV heads): it
    // moves from the decode rank's own TP slot, with no slicing.
    if (!c.state.empty() && e.rank.side != candidate.rank.side
        && (e.rank.tp_size != candidate.rank.tp_size
            || (candidate.has_parallel && candidate.parallel.pp_size > 1)
            || (e.has_parallel && e.parallel.pp_size > 1)))
      return to_string(candidate.rank) + " and " + who
             + " carry state buffers: state moves between equal TP sizes without PP only";
    // Undeclared layouts on both sides move whole pages: one prefill rank
    // per decode rank. Beside a declared one, the undeclared rank holds the
    // model at its TP size (checked above), and the two are mapped.
    if (!candidate.has_parallel && !e.has_parallel && e.rank.tp_size != candidate.rank.tp_size)
      return to_string(candidate.rank) + " has TP size " + std::to_string(candidate.rank.tp_size)
             + ", " + who + " has " + std::to_string(e.rank.tp_size)
             + " (unequal TP sizes need parallel layouts declared on every rank)";
  }
  return {};
}

namespace {

/// The live rank of another id in `candidate`'s place, if any.
const rank_entry* place_holder(const std::vector<rank_entry>& ranks, const rank_entry& candidate) {
  auto& c = candidate.rank;
  for (auto& e : ranks) {
    auto& r = e.rank;
    if (r.id != c.id && r.side == c.side && r.dp_rank == c.dp_rank && r.tp_rank == c.tp_rank
        && r.pp_rank == c.pp_rank)
      return &e;
  }
  return nullptr;
}

} // namespace

std::string place_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate) {
  auto* e = place_holder(ranks, candidate);
  if (!e)
    return {};
  return to_string(candidate.rank) + " takes the place of the live " + to_string(e->rank)
         + " (control endpoint " + e->control_host + ":" + std::to_string(e->control_port)
         + "); a replacement registers once the old rank is gone";
}

std::optional<admission_refused> admission_refusal(const std::vector<rank_entry>& ranks,
                                                   const rank_entry& candidate,
                                                   uint32_t max_ranks) {
  auto i = std::find_if(ranks.begin(), ranks.end(), [&](const rank_entry& e) {
    return e.rank.id == candidate.rank.id;
  });
  if (i != ranks.end() && i->incarnation != candidate.incarnation)
    return admission_refused{errc::invalid_config,
                             "rank id " + std::to_string(candidate.rank.id) + " is held by the live "
                               + to_string(i->rank) + " (control endpoint " + i->control_host
                               + ":" + std::to_string(i->control_port)
                               + "); a replacement registers once the old rank is gone",
                             true, i->rank.id};
  if (auto* holder = place_holder(ranks, candidate))
    return admission_refused{errc::invalid_config, place_conflict(ranks, candidate), true,
                             holder->rank.id};
  if (auto why = layout_conflict(ranks, candidate); !why.empty())
    return admission_refused{errc::incompatible, why};
  if (i == ranks.end() && ranks.size() >= max_ranks)
    return admission_refused{errc::limit_reached,
                             "the directory holds " + std::to_string(ranks.size())
                               + " ranks (limit " + std::to_string(max_ranks) + ")"};
  return std::nullopt;
}

} // namespace kvroom
