#include "kvroom/actors/control/rank_control.hpp"

#include <random>

#include "caf/all.hpp"

#include "kvroom/actors/control/control_parts.hpp"
#include "kvroom/actors/local_messages.hpp"
#include "kvroom/api/errors.hpp"

// The control actor's behaviour: what the manager tells it, what peers'
// handshakes (handed on by the manager) bring, and its own timers, each to
// the part that deals with it (control_registration.cpp,
// control_links.cpp).

namespace kvroom {

using namespace detail;

caf::behavior rank_control(caf::stateful_actor<rank_control_state>* self,
                           rank_control_params params) {
  auto& st = self->state;
  static_cast<rank_control_params&>(st) = std::move(params);
  st.links.emplace(st.self_entry->rank.id, st.members, st.timing, std::random_device{}());
  // The manager's end is this actor's: it sends no exit of its own first.
  self->monitor(st.manager);
  // CAF's own replies from peers' middlemen land here too: not ours to print.
  self->set_default_handler(caf::drop);
  // Only this process stops it (its address is known to no peer, but a
  // registry elsewhere saw it register).
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& sender = self->current_sender();
    if (sender && sender->node() == self->node() && msg.source.node() == self->node())
      self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    if (msg.source == st.manager.address())
      self->quit(msg.reason);
    else if (st.registry && msg.source == st.registry.address())
      on_registry_down(self, msg.reason);
  });
  // What only this process may tell it.
  auto local = [=] {
    auto& sender = self->current_sender();
    return sender && sender->node() == self->node();
  };
  return {
    [=](join_atom, std::string& host, uint16_t port) -> caf::result<caf::ok_atom> {
      if (!local())
        return make_error(errc::unauthorized, "not a member");
      return join(self, std::move(host), port);
    },
    [=](reconnect_atom) { reconnect_registry(self); },
    [=](rejoin_atom) {
      if (self->state.joining_rank)
        start_registration(self);
    },
    [=](links_atom) { on_link_timer(self); },
    [=](link_wanted& msg) {
      if (local())
        want_link(self, msg.entry);
    },
    [=](unwant_atom, rank_id id) {
      if (local())
        self->state.links->stop(id);
    },
    [=](traffic_atom, const std::vector<caf::node_id>& active) {
      if (local())
        on_sweep(self, active);
    },
    [=](const link_dropped& msg) {
      if (local())
        on_link_dropped(self, msg);
    },
    // From peers, handed on by the manager (the sender is the peer's).
    [=](link_hello& msg) { on_link_hello(self, msg); },
    [=](link_reply& msg) { on_link_reply(self, msg); },
    [=](link_finish& msg) { on_link_finish(self, msg); },
    [=](link_ack& msg) { on_link_ack(self, msg); },
    [=](link_close& msg) { on_link_close(self, msg); },
    [=](link_closed& msg) { on_link_closed(self, msg); },
  };
}

} // namespace kvroom
