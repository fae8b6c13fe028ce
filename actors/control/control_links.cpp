// A rank's direct links to its peers: dials (lazy, with the lower id first),
// the membership handshake both ways, retries, and the close of links that
// went idle. The link table decides; this carries it out. Part of the
// rank's control actor (rank_control.hpp): it sends to peers as the
// manager, and tells the manager which peers became usable.

#include <algorithm>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/control/control_parts.hpp"
#include "kvroom/actors/control/link_keeper.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

namespace {

std::chrono::milliseconds attempt_timeout(control_ptr self) {
  return std::chrono::milliseconds(self->state.links->timing().attempt_ms());
}

std::string endpoint_text(const rank_entry& e) {
  return e.control_host + ":" + std::to_string(e.control_port);
}

/// To a peer, as the rank's manager: the peer answers (and later sends
/// rooms' messages) to the manager, never to this actor.
template <class T>
void send_peer(control_ptr self, const caf::actor& peer, T&& msg) {
  caf::send_as(self->state.manager, peer, std::forward<T>(msg));
}

/// The peer manager the message being handled came from (handed on by our
/// manager with its sender kept); null when anonymous.
caf::actor peer_of(control_ptr self) {
  return caf::actor_cast<caf::actor>(self->current_sender());
}

/// Sets the link timer for the earliest paused link, unless one pending
/// fires sooner: a room that waits for a link waits its pause, not the
/// next sweep (an eighth of the shortest room timeout).
void arm_link_timer(control_ptr self) {
  auto& st = self->state;
  auto due = st.links->next_due();
  if (!due || (st.link_timer_ms != 0 && st.link_timer_ms <= *due))
    return;
  st.link_timer_ms = *due;
  auto now = monotonic_ms();
  self->delayed_send(self, std::chrono::milliseconds(*due > now ? *due - now : 0),
                     links_atom::value);
}

/// Starts an attempt of the link to `id`: connect to the peer's control
/// endpoint, then `link_hello`. The table decides; this carries it out.
void begin_link(control_ptr self, rank_id id) {
  auto entry = self->state.links->begin(id, monotonic_ms());
  if (!entry)
    return;
  self->request(dialer(self), attempt_timeout(self), caf::connect_atom::value,
                entry->control_host, entry->control_port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        auto& st = self->state;
        if (!ptr) {
          st.links->unpublished(id, entry, monotonic_ms());
          arm_link_timer(self);
          logger()->debug("{}: nothing published at {} for rank {}", to_string(me(self)),
                          endpoint_text(*entry), id);
          return;
        }
        auto peer = caf::actor_cast<caf::actor>(std::move(ptr));
        if (auto hello = st.links->connected(id, entry, peer, st.self_entry->incarnation,
                                             monotonic_ms()))
          send_peer(self, peer, std::move(*hello));
      },
      [=](caf::error& err) {
        auto pause = self->state.links->connect_failed(id, entry, monotonic_ms());
        if (!pause)
          return;
        arm_link_timer(self);
        logger()->debug("{}: cannot link to rank {} at {} ({}), retrying in {} ms",
                        to_string(me(self)), id, endpoint_text(*entry),
                        self->system().render(err), *pause);
      });
}

/// Whether rank `id` is linked here through `peer` (not an older or newer
/// link under the same id).
bool linked_through(control_ptr self, rank_id id, const caf::actor& peer) {
  auto i = self->state.linked.find(id);
  return i != self->state.linked.end() && i->second.peer == peer;
}

/// Asks the manager what only its rooms can say; `fn` takes the answer.
/// No deadline: the manager is in this process, and if it ends, this actor
/// ends with it (the error handler has nothing to do). A deadline could
/// only leave the two disagreeing about a link the manager did release.
template <class Fn, class... Ts>
void ask_manager(control_ptr self, Fn fn, Ts&&... xs) {
  self->request(self->state.manager, caf::infinite, std::forward<Ts>(xs)...)
    .then(std::move(fn), [](caf::error&) {});
}

/// A link is made (either side's handshake): it counts for its process's
/// connection, and the manager counts the peer usable.
void made(control_ptr self, rank_id id, uint64_t incarnation, const caf::actor& peer) {
  auto& st = self->state;
  st.links->stop(id);
  auto& slot = st.linked[id];
  bool again = slot.peer == peer; // made again over a link this side still counts
  slot = {peer, incarnation};
  if (peer.node() != self->node() && !again) {
    if (st.link_keeper)
      self->send(st.link_keeper, link_up_atom::value, peer.node());
    st.links->traffic(peer.node(), monotonic_ms());
  }
  self->send(st.manager, link_made{id, incarnation, peer});
}

/// The link to `id` no longer counts (closed by agreement). With `close`,
/// the process's link keeper closes the connection if it was the last link
/// there.
void unlinked(control_ptr self, rank_id id, const caf::actor& peer, bool close) {
  auto& st = self->state;
  if (!linked_through(self, id, peer))
    return;
  st.linked.erase(id);
  auto node = peer.node();
  if (st.link_keeper)
    self->send(st.link_keeper, link_gone_atom::value, node, close);
  // The process still proved membership: what it sends before the link is
  // made again (a room that opened meanwhile) is parked, not dropped.
  bool more = std::any_of(st.linked.begin(), st.linked.end(),
                          [&](auto& kvp) { return kvp.second.peer.node() == node; });
  if (!more)
    st.links->forget(node);
}

/// Asks the processes whose links carried nothing for the idle period, and
/// that neither the registry nor (the manager says) a room here needs, to
/// close them.
void close_idle_links(control_ptr self, uint64_t now) {
  auto& st = self->state;
  auto quiet = st.links->idle(now, [&](const caf::node_id& node) {
    return st.registry && st.registry.node() == node;
  });
  if (quiet.empty())
    return;
  ask_manager(
    self,
    [=](std::vector<caf::node_id>& unused) {
      auto& st = self->state;
      auto now = monotonic_ms();
      for (auto& node : quiet)
        if (std::find(unused.begin(), unused.end(), node) == unused.end())
          st.links->close_answered(node, false, now); // in use: traffic
      for (auto& node : unused)
        for (auto& kvp : st.linked)
          if (kvp.second.peer.node() == node)
            send_peer(self, kvp.second.peer, link_close{me(self).id});
    },
    idle_atom::value, quiet);
}

} // namespace

caf::io::middleman_actor dialer(control_ptr self) {
  return control_connector(self->home_system());
}

void log_stranger(control_ptr self, const std::string& text) {
  auto& st = self->state;
  st.metrics->stranger();
  if (auto unlogged = st.strangers.note(monotonic_ms()))
    logger()->warn("{}: {}{}", to_string(me(self)), text, stranger_log::more(*unlogged));
}

bool node_holds_ours(control_ptr self, const caf::node_id& node) {
  auto& st = self->state;
  if (st.registry && st.registry.node() == node)
    return true;
  return std::any_of(st.linked.begin(), st.linked.end(),
                     [&](auto& kvp) { return kvp.second.peer.node() == node; });
}

void want_link(control_ptr self, const std::shared_ptr<const rank_entry>& e) {
  if (!e || !self->home_system().has_middleman() || e->rank.id == me(self).id)
    return;
  // Stale: the manager asked while the link was being made (the peer's own
  // dial can finish first). Dialling again would open a second connection
  // between the two processes, which CAF 0.17 closes as a duplicate, and
  // the links on it read as lost (measured: `kvroom stress --processes`, a
  // restarted rank "lost" again 50 s later, with rooms in flight).
  if (auto i = self->state.linked.find(e->rank.id);
      i != self->state.linked.end() && i->second.incarnation == e->incarnation)
    return;
  using want = link_table::want_result;
  switch (self->state.links->want(e, monotonic_ms())) {
    case want::dial_now:
      begin_link(self, e->rank.id);
      break;
    case want::dial_later:
      arm_link_timer(self);
      break;
    case want::under_way:
      break;
  }
}

void on_sweep(control_ptr self, const std::vector<caf::node_id>& active) {
  auto& st = self->state;
  auto now = monotonic_ms();
  for (auto& node : active)
    st.links->traffic(node, now);
  for (auto id : st.links->due(now))
    begin_link(self, id);
  if (self->home_system().has_middleman())
    close_idle_links(self, now);
}

void on_link_timer(control_ptr self) {
  auto& st = self->state;
  st.link_timer_ms = 0;
  for (auto id : st.links->due(monotonic_ms()))
    begin_link(self, id);
  arm_link_timer(self);
}

void on_link_dropped(control_ptr self, const link_dropped& msg) {
  auto& st = self->state;
  if (!msg.peer || msg.peer.node() == self->node())
    return;
  auto node = msg.peer.node();
  if (linked_through(self, msg.id, msg.peer)) {
    st.linked.erase(msg.id);
    if (st.link_keeper)
      self->send(st.link_keeper, link_gone_atom::value, node, false);
  }
  if (!node_holds_ours(self, node)) {
    st.trust->remove(node);
    st.links->forget(node);
  }
}

void on_link_hello(control_ptr self, link_hello& msg) {
  auto peer = peer_of(self);
  if (!peer)
    return;
  auto out = self->state.links->hello(msg, peer, monotonic_ms());
  if (out.what == link_table::hello_outcome::refused)
    log_stranger(self, "refused a link handshake: too many in progress");
  else if (out.what == link_table::hello_outcome::answer)
    send_peer(self, peer, std::move(out.message));
}

void on_link_reply(control_ptr self, link_reply& msg) {
  auto& st = self->state;
  auto peer = peer_of(self);
  if (!peer)
    return;
  auto out = st.links->reply(msg, peer, st.self_entry->incarnation, monotonic_ms());
  if (out.what == link_table::reply_outcome::bad_proof) {
    log_stranger(self, "rank " + std::to_string(msg.from) + " at " + endpoint_text(*out.entry)
                         + " failed to prove membership (a different deployment secret?)");
    arm_link_timer(self);
  } else if (out.what == link_table::reply_outcome::finish) {
    st.trust->add(peer.node());
    send_peer(self, out.peer, std::move(out.message));
  }
}

void on_link_finish(control_ptr self, link_finish& msg) {
  auto& st = self->state;
  auto peer = peer_of(self);
  if (!peer)
    return;
  auto out = st.links->finish(msg, peer, monotonic_ms());
  if (out.what == link_table::finish_outcome::bad_proof) {
    log_stranger(self, "a node claiming rank " + std::to_string(msg.from)
                         + " failed to prove membership (a different deployment secret?)");
    return;
  }
  if (out.what != link_table::finish_outcome::accepted)
    return;
  st.trust->add(peer.node());
  // The manager hears of the link before the peer does: what the peer
  // sends once acked finds it usable here.
  made(self, out.link.id, out.link.incarnation, out.link.peer);
  send_peer(self, out.link.peer, link_ack{me(self).id});
}

void on_link_ack(control_ptr self, link_ack& msg) {
  auto peer = peer_of(self);
  if (!peer)
    return;
  if (auto link = self->state.links->ack(msg, peer))
    made(self, link->id, link->incarnation, link->peer);
}

void on_link_close(control_ptr self, link_close& msg) {
  auto& st = self->state;
  auto peer = peer_of(self);
  if (!peer)
    return;
  if (!linked_through(self, msg.from, peer)) {
    // Not linked here (any more): nothing to keep.
    send_peer(self, peer, link_closed{me(self).id, true});
    return;
  }
  // The registry's process keeps its connection; whether a room here
  // needs the process is the manager's to say.
  if (st.registry && st.registry.node() == peer.node()) {
    send_peer(self, peer, link_closed{me(self).id, false});
    return;
  }
  auto id = msg.from;
  ask_manager(
    self,
    [=](bool released) {
      // Unlinked (by the manager too) before the answer goes: nothing here
      // counts on the connection from now, so its close (the asker's) is
      // no loss.
      if (released)
        unlinked(self, id, peer, false);
      send_peer(self, peer, link_closed{me(self).id, released});
    },
    release_link{id, peer, false});
}

void on_link_closed(control_ptr self, link_closed& msg) {
  auto& st = self->state;
  auto peer = peer_of(self);
  if (!peer)
    return;
  if (!linked_through(self, msg.from, peer))
    return;
  // Not agreed: the peer still uses it, which counts as traffic.
  st.links->close_answered(peer.node(), msg.agreed, monotonic_ms());
  if (!msg.agreed)
    return;
  // The peer no longer counts this link: neither does this side (a room
  // that opened meanwhile links again), and the connection goes once no
  // rank of this process links there and no room here needs it.
  auto id = msg.from;
  ask_manager(
    self, [=](bool unused) { unlinked(self, id, peer, unused); }, release_link{id, peer, true});
}

} // namespace kvroom::detail
