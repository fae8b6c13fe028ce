#include "kvroom/actors/control/link_keeper.hpp"

#include "caf/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/api/logging.hpp"

namespace kvroom {

caf::behavior link_keeper(caf::stateful_actor<link_keeper_state>* self, bool close_idle) {
  self->state.close_idle = close_idle;
  auto local = [=] {
    auto& sender = self->current_sender();
    return sender && sender->node() == self->node();
  };
  return {
    [=](link_up_atom, const caf::node_id& node) {
      if (local())
        ++self->state.links[node];
    },
    [=](link_gone_atom, const caf::node_id& node, bool close) {
      if (!local())
        return;
      auto& xs = self->state.links;
      auto i = xs.find(node);
      if (i == xs.end() || --i->second > 0)
        return;
      xs.erase(i);
      // A link that opens meanwhile finds the connection closing and its
      // handshake tries again on a new one.
      if (close && self->state.close_idle) {
        detail::close_connection(self->home_system(), node);
        logger()->debug("connection to {} closed (idle)", caf::to_string(node));
      }
    },
  };
}

} // namespace kvroom
