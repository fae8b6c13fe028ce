#include "kvroom/actors/manager/manager_links.hpp"

#include <algorithm>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/nodes.hpp"
#include "kvroom/actors/manager/manager_peers.hpp"
#include "kvroom/actors/manager/manager_send.hpp"
#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

namespace {

bool local_or_trusted(manager_ptr self, const caf::strong_actor_ptr& sender) {
  // No sender is no proof of anything: CAF 0.17 delivers a remote node's
  // anonymous message without a sender, exactly like a local one. Every
  // actor of this process sends to its manager as itself.
  if (!sender)
    return false;
  if (detail::same_node(sender, self))
    return true;
  return self->state.trust && self->state.trust->contains(sender->node());
}

void log_stranger(manager_ptr self, const std::string& text) {
  auto& st = self->state;
  st.metrics->stranger();
  if (auto unlogged = st.strangers.note(monotonic_ms()))
    logger()->warn("{}: {}{}", to_string(me(self)), text, stranger_log::more(*unlogged));
}

/// Whether a room here may still need a linked rank of process `node`.
bool node_in_use(manager_ptr self, const caf::node_id& node) {
  auto& st = self->state;
  for (auto& e : st.peers->all())
    if (e->manager && e->manager.node() == node && st.rooms->involves(me(self), e->rank))
      return true;
  return false;
}

} // namespace

bool from_member(manager_ptr self, const char* what) {
  auto& sender = self->current_sender();
  if (local_or_trusted(self, sender)) {
    if (!detail::same_node(sender, self))
      note_traffic(self, sender->node());
    return true;
  }
  log_stranger(self, std::string{"dropped "} + what
                       + (sender ? " from an unauthenticated node " + caf::to_string(sender->node())
                                 : std::string{" sent anonymously (from an unauthenticated node)"}));
  return false;
}

bool from_registry(manager_ptr self) {
  auto& sender = self->current_sender();
  // Anonymous: possibly a stranger (see local_or_trusted).
  if (sender && detail::same_node(sender, self))
    return true;
  auto& st = self->state;
  if (sender && st.registry && sender->node() == st.registry.node())
    return true;
  log_stranger(self, "dropped a directory message not sent by the bootstrap registry ("
                       + (sender ? "node " + caf::to_string(sender->node()) : std::string{"anonymous"})
                       + ")");
  return false;
}

bool from_here(manager_ptr self) {
  auto& sender = self->current_sender();
  if (sender && detail::same_node(sender, self))
    return true;
  from_member(self, "a message only this process may send");
  return false;
}

void note_traffic(manager_ptr self, const caf::node_id& node) {
  // Handed to the control actor at the sweep (its idle links): a set
  // insert per message, no clock read.
  self->state.busy_nodes.insert(node);
}

void want_links(manager_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& xs) {
  for (auto& e : xs)
    want_link(self, e);
}

void want_link(manager_ptr self, const std::shared_ptr<const rank_entry>& e) {
  if (e && self->state.control)
    self->send(self->state.control, link_wanted{e});
}

void sweep_links(manager_ptr self) {
  auto& st = self->state;
  if (!st.control)
    return;
  std::vector<caf::node_id> active(st.busy_nodes.begin(), st.busy_nodes.end());
  st.busy_nodes.clear();
  self->send(st.control, traffic_atom::value, std::move(active));
}

void on_link_made(manager_ptr self, link_made& msg) {
  on_rank_seen(self, msg.id, msg.incarnation);
  if (auto e = self->state.peers->link(msg.id, msg.incarnation, msg.peer))
    on_peer_usable(self, e);
}

bool on_release_link(manager_ptr self, const release_link& msg) {
  auto& st = self->state;
  auto e = st.peers->find(msg.id);
  if (!e || !e->manager || e->manager.address() != msg.peer.address())
    return true; // not linked here (any more): nothing to keep
  bool needed = st.rooms->involves(me(self), e->rank);
  if (!msg.peer_agreed && (needed || node_in_use(self, e->manager.node())))
    return false;
  // Back to listed: no monitor, no loss when the connection goes.
  self->demonitor(e->manager);
  st.peers->unlink(e->rank.id);
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  logger()->debug("{}: idle link to {} closed", to_string(me(self)), to_string(e->rank));
  return !needed;
}

std::vector<caf::node_id> unused_nodes(manager_ptr self, const std::vector<caf::node_id>& nodes) {
  std::vector<caf::node_id> out;
  for (auto& node : nodes)
    if (!node_in_use(self, node))
      out.push_back(node);
  return out;
}

} // namespace kvroom::detail
