#include "kvroom/actors/control/bootstrap_registry.hpp"
#include "kvroom/actors/room/room_timing.hpp"

#include <algorithm>
#include <chrono>

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/messages/error.hpp"
#include "kvroom/transport/rank_mapping.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<bootstrap_registry_state>*;

uint64_t now_ms() {
  return monotonic_ms();
}

/// The directory as peers see it: managers with a control endpoint are
/// reached over direct links, never through a handle this node relays.
directory_update view(self_ptr self) {
  directory_update msg{self->state.ranks};
  for (auto& e : msg.ranks)
    if (e.control_port != 0)
      e.manager = nullptr;
  return msg;
}

directory_update broadcast(self_ptr self) {
  auto msg = view(self);
  for (auto& e : self->state.ranks)
    self->send(e.manager, msg);
  return msg;
}

caf::error refuse(self_ptr self, errc code, std::string why) {
  ++self->state.refusals;
  logger()->warn("registry: registration refused: {}", why);
  return make_error(code, "registration refused: " + why);
}

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
    // Undeclared layouts move whole pages: one prefill rank per decode rank.
    if (!candidate.has_parallel && e.rank.tp_size != candidate.rank.tp_size)
      return to_string(candidate.rank) + " has TP size " + std::to_string(candidate.rank.tp_size)
             + ", " + who + " has " + std::to_string(e.rank.tp_size)
             + " (unequal TP sizes need parallel layouts declared on every rank)";
  }
  return {};
}

std::string place_conflict(const std::vector<rank_entry>& ranks, const rank_entry& candidate) {
  auto& c = candidate.rank;
  for (auto& e : ranks) {
    auto& r = e.rank;
    if (r.id != c.id && r.side == c.side && r.dp_rank == c.dp_rank && r.tp_rank == c.tp_rank
        && r.pp_rank == c.pp_rank)
      return to_string(c) + " takes the place of the live " + to_string(r)
             + " (control endpoint " + e.control_host + ":" + std::to_string(e.control_port)
             + "); a replacement registers once the old rank is gone";
  }
  return {};
}

caf::behavior bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                                 uint32_t max_ranks,
                                 std::shared_ptr<const membership> members) {
  auto& st = self->state;
  st.max_ranks = max_ranks;
  st.members = members ? std::move(members) : std::make_shared<const membership>();
  // Challenges a stranger never answers: bounded and expiring.
  st.challenges.emplace(std::max<size_t>(64, 2 * static_cast<size_t>(max_ranks)), 5000);
  // Only this process may stop the registry: an exit message from another
  // node (a rank's runtime ending, a stranger) changes nothing.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Anonymous is not local: CAF 0.17 delivers a remote anonymous exit
    // without a sender, and its source may name this very actor.
    auto& sender = self->current_sender();
    if (sender && sender->node() == self->node() && msg.source.node() == self->node())
      self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& xs = self->state.ranks;
    auto i = std::find_if(xs.begin(), xs.end(), [&](const rank_entry& e) {
      return e.manager.address() == msg.source;
    });
    if (i == xs.end())
      return;
    rank_down note{i->rank, caf::to_string(msg.reason),
                   msg.reason == caf::exit_reason::user_shutdown
                     || msg.reason == caf::exit_reason::normal};
    xs.erase(i);
    // The loss first, then the directory without the rank.
    for (auto& e : xs)
      self->send(e.manager, note);
    broadcast(self);
  });
  return {
    [=](registry_hello& msg) -> caf::result<registry_challenge> {
      auto& st = self->state;
      auto& sender = self->current_sender();
      if (!sender || msg.nonce.size() != 32)
        return make_error(errc::invalid_argument, "malformed registry_hello");
      bootstrap_registry_state::challenge c{msg.nonce, make_nonce()};
      auto out = registry_challenge{c.mine, st.members->registry_proof(c.theirs, c.mine)};
      if (!st.challenges->put(sender->address(), std::move(c), now_ms()))
        return refuse(self, errc::limit_reached, "too many registrations in progress");
      return out;
    },
    [=](register_rank& msg) -> caf::result<directory_update> {
      auto& st = self->state;
      auto& sender = self->current_sender();
      if (!sender)
        return refuse(self, errc::unauthorized, "anonymous registration");
      auto c = st.challenges->take(sender->address(), now_ms());
      auto& entry = msg.entry;
      auto who = to_string(entry.rank);
      if (!c || c->theirs != msg.rank_nonce)
        return refuse(self, errc::unauthorized, who + " answered no challenge of this registry");
      if (!membership::matches(msg.proof, st.members->rank_proof(c->mine, c->theirs,
                                                                 entry.rank.id,
                                                                 entry.incarnation)))
        return refuse(self, errc::unauthorized,
                      who + " failed to prove membership (a different deployment secret?)");
      // The registrant is whoever answered the challenge, not what it claims.
      entry.manager = caf::actor_cast<caf::actor>(sender);
      auto& xs = st.ranks;
      auto i = std::find_if(xs.begin(), xs.end(), [&](const rank_entry& e) {
        return e.rank.id == entry.rank.id;
      });
      if (i != xs.end() && i->incarnation != entry.incarnation)
        return refuse(self, errc::invalid_config,
                      "rank id " + std::to_string(entry.rank.id) + " is held by the live "
                        + to_string(i->rank) + " (control endpoint " + i->control_host + ":"
                        + std::to_string(i->control_port)
                        + "); a replacement registers once the old rank is gone");
      if (auto why = place_conflict(xs, entry); !why.empty())
        return refuse(self, errc::invalid_config, why);
      if (auto why = layout_conflict(xs, entry); !why.empty())
        return refuse(self, errc::incompatible, why);
      if (i != xs.end()) {
        logger()->info("registry: {} registered again", who);
        self->demonitor(i->manager);
        *i = entry;
      } else if (xs.size() >= st.max_ranks) {
        return refuse(self, errc::limit_reached,
                      "registry holds " + std::to_string(xs.size()) + " ranks (limit "
                        + std::to_string(st.max_ranks) + ")");
      } else {
        logger()->debug("registry: {} registered", who);
        xs.push_back(entry);
      }
      self->monitor(entry.manager);
      return broadcast(self);
    },
  };
}

} // namespace kvroom
