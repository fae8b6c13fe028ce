#include "kvroom/actors/bootstrap_registry.hpp"

#include <algorithm>

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/messages/error.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<bootstrap_registry_state>*;

directory_update broadcast(self_ptr self) {
  directory_update msg{self->state.ranks};
  for (auto& e : self->state.ranks)
    self->send(e.manager, msg);
  return msg;
}

} // namespace

caf::behavior
bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                   uint32_t max_ranks) {
  self->state.max_ranks = max_ranks;
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
    [=](register_rank& msg) -> caf::result<directory_update> {
      auto& xs = self->state.ranks;
      auto& entry = msg.entry;
      auto i = std::find_if(xs.begin(), xs.end(), [&](const rank_entry& e) {
        return e.rank.id == entry.rank.id;
      });
      if (i != xs.end()) {
        logger()->info("registry: {} registered again", to_string(entry.rank));
        *i = entry;
      } else if (xs.size() >= self->state.max_ranks) {
        return make_error(errc::limit_reached,
                          "registry holds " + std::to_string(xs.size())
                            + " ranks (limit "
                            + std::to_string(self->state.max_ranks) + ")");
      } else {
        xs.push_back(entry);
      }
      self->monitor(entry.manager);
      return broadcast(self);
    },
  };
}

} // namespace kvroom
