#include "kvroom/actors/manager/manager_links.hpp"

#include <algorithm>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/control/link_keeper.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/actors/manager/manager_peers.hpp"
#include "kvroom/actors/manager/manager_send.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

namespace {

std::chrono::milliseconds attempt_timeout(manager_ptr self) {
  return std::chrono::milliseconds(self->state.links->timing().attempt_ms());
}

std::string endpoint_text(const rank_entry& e) {
  return e.control_host + ":" + std::to_string(e.control_port);
}

bool local_or_trusted(manager_ptr self, const caf::strong_actor_ptr& sender) {
  // No sender is no proof of anything: CAF 0.17 delivers a remote node's
  // anonymous message without a sender, exactly like a local one. Every
  // actor of this process sends to its manager as itself.
  if (!sender)
    return false;
  if (sender->node() == self->node())
    return true;
  return self->state.trust && self->state.trust->contains(sender->node());
}

void log_stranger(manager_ptr self, const std::string& text) {
  auto& st = self->state;
  ++st.counters.stranger_messages;
  st.metrics->stranger();
  auto now = monotonic_ms();
  if (now - st.last_stranger_log_ms >= link_timing::stranger_log_ms) {
    logger()->warn("{}: {}{}", to_string(me(self)), text,
                   st.strangers_unlogged > 0
                     ? " (and " + std::to_string(st.strangers_unlogged) + " more since the last such line)"
                     : std::string{});
    st.last_stranger_log_ms = now;
    st.strangers_unlogged = 0;
  } else {
    ++st.strangers_unlogged;
  }
}

caf::io::middleman_actor middleman(manager_ptr self) {
  return control_connector(self->home_system());
}

void schedule_reconnect(manager_ptr self) {
  auto& st = self->state;
  st.reconnect_ms = link_timing::reconnect_ms(st.reconnect_ms);
  self->delayed_send(self, std::chrono::milliseconds(st.reconnect_ms), reconnect_atom::value);
}

/// Worth another try: the registry did not answer in time, or was busy.
bool transient(const caf::error& err) {
  return err == caf::sec::request_timeout || is(err, errc::unavailable)
         || is(err, errc::limit_reached) || is(err, errc::timeout);
}

void registration_failed(manager_ptr self, caf::error err) {
  auto& st = self->state;
  // Many ranks starting at once can keep a registry (or etcd) from
  // answering one in time: try again, jittered, within the rank's window.
  if (st.joining_rank && transient(err)
      && monotonic_ms() + link_timing::join_slack_ms < st.join_deadline_ms) {
    auto pause = link_timing::rejoin_ms(st.links->draw());
    if (err == caf::sec::request_timeout && st.registry && st.registry_port != 0
        && st.registry.node() != self->node() && !self->home_system().has_openssl_manager()) {
      // Unanswered over a remote registry's connection: the next try goes
      // over a new one. Measured (96 rank processes on 2 cores): CAF 0.17
      // delivered one rank's hello to the registry without a sender (the
      // registry's BASP had no node for that connection), and every later
      // hello on it went unanswered until the rank's window closed. A rank
      // that is joining has no link of its own on the connection yet. Not
      // with TLS: CAF 0.17.6's OpenSSL module drops a node's other sessions
      // when one ends in an error, and this close would be one.
      logger()->debug("{}: registration not answered ({}); again on a new connection in {} ms",
                      to_string(me(self)), describe(err), pause);
      detail::close_connection(self->home_system(), st.registry.node());
      st.registry = nullptr;
      st.reconnect_ms = static_cast<uint32_t>(pause / 2);
      schedule_reconnect(self);
      return;
    }
    logger()->debug("{}: registration not answered ({}); again in {} ms", to_string(me(self)),
                    describe(err), pause);
    self->delayed_send(self, std::chrono::milliseconds(pause), rejoin_atom::value);
    return;
  }
  if (st.joining_rank) {
    st.joining_rank->deliver(std::move(err));
    st.joining_rank.reset();
    return;
  }
  logger()->warn("{}: registering again with the bootstrap registry failed: {}; retrying",
                 to_string(me(self)), describe(err));
  if (st.registry_port != 0)
    schedule_reconnect(self);
}

void registered(manager_ptr self) {
  auto& st = self->state;
  self->monitor(st.registry);
  st.reconnect_ms = 0;
  if (st.joining_rank) {
    st.joining_rank->deliver(caf::ok_atom::value);
    st.joining_rank.reset();
  } else {
    logger()->info("{}: registered again with the bootstrap registry at {}:{}",
                   to_string(me(self)), st.registry_host, st.registry_port);
  }
  st.registered = true;
  st.metrics->set_ready(true);
}

/// Sets the link timer for the earliest paused link, unless one pending
/// fires sooner: a room that waits for a link waits its pause, not the
/// next sweep (an eighth of the shortest room timeout).
void arm_link_timer(manager_ptr self) {
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
void begin_link(manager_ptr self, rank_id id) {
  auto entry = self->state.links->begin(id, monotonic_ms());
  if (!entry)
    return;
  self->request(middleman(self), attempt_timeout(self), caf::connect_atom::value,
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
          self->send(peer, std::move(*hello));
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

} // namespace

bool from_member(manager_ptr self, const char* what) {
  auto& sender = self->current_sender();
  if (local_or_trusted(self, sender)) {
    if (sender->node() != self->node())
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
  if (sender && sender->node() == self->node())
    return true;
  auto& st = self->state;
  if (sender && st.registry && sender->node() == st.registry.node())
    return true;
  log_stranger(self, "dropped a directory message not sent by the bootstrap registry ("
                       + (sender ? "node " + caf::to_string(sender->node()) : std::string{"anonymous"})
                       + ")");
  return false;
}

void start_registration(manager_ptr self) {
  auto& st = self->state;
  if (!st.registry) {
    registration_failed(self, make_error(errc::unavailable, "no bootstrap registry"));
    return;
  }
  auto mine = make_nonce();
  auto registry = st.registry;
  // A directory in this process (etcd's) answers once it decided, which
  // may take the rest of the window; a registry elsewhere within a link
  // timeout per try.
  auto timeout = attempt_timeout(self);
  if (st.joining_rank && registry.node() == self->node() && st.join_deadline_ms > monotonic_ms())
    timeout = std::max(timeout, std::chrono::milliseconds(st.join_deadline_ms - monotonic_ms()));
  self->request(registry, timeout, registry_hello{mine})
    .then(
      [=](registry_challenge& c) {
        auto& st = self->state;
        if (!membership::matches(c.proof, st.members->registry_proof(mine, c.nonce))) {
          registration_failed(self, make_error(errc::unauthorized,
                                               "the bootstrap registry failed to prove "
                                               "membership (a different deployment secret?)"));
          return;
        }
        if (registry.node() != self->node())
          st.trust->add(registry.node());
        auto& e = *st.self_entry;
        register_rank msg{e, mine,
                          st.members->rank_proof(c.nonce, mine, e.rank.id, e.incarnation)};
        self->request(registry, timeout, std::move(msg))
          .then(
            [=](directory_update& d) {
              if (registry != self->state.registry)
                return;
              self->send(self, std::move(d));
              registered(self);
            },
            [=](caf::error& err) { registration_failed(self, std::move(err)); });
      },
      [=](caf::error& err) { registration_failed(self, std::move(err)); });
}

void on_registry_down(manager_ptr self, const caf::error& reason) {
  auto& st = self->state;
  st.registered = false;
  if (st.registry_port == 0)
    return; // in this process: it ends with the runtime
  logger()->warn("{}: bootstrap registry {}:{} lost ({}); rooms go on with the cached "
                 "directory; reconnecting",
                 to_string(me(self)), st.registry_host, st.registry_port,
                 caf::to_string(reason));
  auto node = st.registry.node();
  bool shared = node == self->node();
  for (auto& e : st.peers->all())
    shared = shared || (e->manager && e->manager.node() == node);
  if (!shared)
    st.trust->remove(node);
  st.registry = nullptr;
  st.reconnect_ms = 0;
  schedule_reconnect(self);
}

void reconnect_registry(manager_ptr self) {
  auto& st = self->state;
  if (st.registry)
    return;
  self->request(middleman(self), attempt_timeout(self), caf::connect_atom::value,
                st.registry_host, st.registry_port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        auto& st = self->state;
        if (!ptr) {
          schedule_reconnect(self);
          return;
        }
        st.registry = caf::actor_cast<caf::actor>(std::move(ptr));
        start_registration(self);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        // A joining rank's window ends its tries; a joined one keeps trying.
        if (st.joining_rank && monotonic_ms() + link_timing::join_slack_ms >= st.join_deadline_ms) {
          st.joining_rank->deliver(std::move(err));
          st.joining_rank.reset();
          return;
        }
        schedule_reconnect(self);
      });
}

void want_links(manager_ptr self, const std::vector<std::shared_ptr<const rank_entry>>& xs) {
  for (auto& e : xs)
    want_link(self, e);
}

void want_link(manager_ptr self, const std::shared_ptr<const rank_entry>& e) {
  if (!e || !self->home_system().has_middleman() || e->rank.id == me(self).id)
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

void retry_links(manager_ptr self, uint64_t now) {
  for (auto id : self->state.links->due(now))
    begin_link(self, id);
}

void on_link_timer(manager_ptr self) {
  self->state.link_timer_ms = 0;
  retry_links(self, monotonic_ms());
  arm_link_timer(self);
}

void note_traffic(manager_ptr self, const caf::node_id& node) {
  self->state.links->traffic(node, monotonic_ms());
}

namespace {

/// Whether a room here may still need one of `node`'s linked ranks, or the
/// connection carries this rank's registry (published in that process).
bool node_in_use(manager_ptr self, const caf::node_id& node) {
  auto& st = self->state;
  if (st.registry && st.registry.node() == node)
    return true;
  for (auto& e : st.peers->all())
    if (e->manager && e->manager.node() == node && st.rooms->involves(me(self), e->rank))
      return true;
  return false;
}

/// `e` back to listed: no monitor, no loss when the connection goes. With
/// `close`, the process's link keeper closes the connection if this was its
/// last link there.
void unlink_peer(manager_ptr self, const std::shared_ptr<const rank_entry>& e, bool close) {
  auto& st = self->state;
  self->demonitor(e->manager);
  st.peers->unlink(e->rank.id);
  // The process still proved membership: what it sends before the link is
  // made again (a room that opened meanwhile) is parked, not dropped.
  auto node = e->manager.node();
  if (st.link_keeper)
    self->send(st.link_keeper, link_gone_atom::value, node, close);
  bool more = false;
  for (auto& x : st.peers->all())
    more = more || (x->manager && x->manager.node() == node);
  if (!more)
    st.links->forget(node);
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  logger()->debug("{}: idle link to {} closed", to_string(me(self)), to_string(e->rank));
}

} // namespace

void close_idle_links(manager_ptr self, uint64_t now) {
  auto& st = self->state;
  if (!self->home_system().has_middleman())
    return;
  auto quiet = st.links->idle(now, [&](const caf::node_id& node) {
    return node_in_use(self, node);
  });
  for (auto& node : quiet)
    for (auto& e : st.peers->all())
      if (e->manager && e->manager.node() == node && e->control_port != 0)
        self->send(e->manager, link_close{me(self).id});
}

void on_link_close(manager_ptr self, link_close& msg) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  auto e = st.peers->find(msg.from);
  if (!sender || !e || !e->manager || e->manager.address() != sender->address()) {
    // Not linked here (any more): nothing to keep.
    if (sender)
      self->send(caf::actor_cast<caf::actor>(sender), link_closed{me(self).id, true});
    return;
  }
  if (st.rooms->involves(me(self), e->rank) || node_in_use(self, e->manager.node())) {
    self->send(e->manager, link_closed{me(self).id, false});
    return;
  }
  // Unlinked before the answer goes: nothing here counts on the connection
  // from now, so its close (the asker's) is no loss.
  auto peer = e->manager;
  unlink_peer(self, e, false);
  self->send(peer, link_closed{me(self).id, true});
}

void on_link_closed(manager_ptr self, link_closed& msg) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  auto e = st.peers->find(msg.from);
  if (!sender || !e || !e->manager || e->manager.address() != sender->address())
    return;
  // Not agreed: the peer still uses it, which counts as traffic.
  st.links->close_answered(e->manager.node(), msg.agreed, monotonic_ms());
  if (!msg.agreed)
    return;
  // The peer no longer counts this link: neither does this side (a room
  // that opened meanwhile links again), and the connection goes once no
  // rank of this process links there and no room here needs it.
  unlink_peer(self, e, !st.rooms->involves(me(self), e->rank));
}

void on_link_hello(manager_ptr self, link_hello& msg) {
  auto& sender = self->current_sender();
  if (!sender)
    return;
  auto peer = caf::actor_cast<caf::actor>(sender);
  auto out = self->state.links->hello(msg, peer, monotonic_ms());
  if (out.what == link_table::hello_outcome::refused)
    log_stranger(self, "refused a link handshake: too many in progress");
  else if (out.what == link_table::hello_outcome::answer)
    self->send(peer, std::move(out.message));
}

void on_link_reply(manager_ptr self, link_reply& msg) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  if (!sender)
    return;
  auto out = st.links->reply(msg, caf::actor_cast<caf::actor>(sender),
                             st.self_entry->incarnation, monotonic_ms());
  if (out.what == link_table::reply_outcome::bad_proof) {
    log_stranger(self, "rank " + std::to_string(msg.from) + " at " + endpoint_text(*out.entry)
                         + " failed to prove membership (a different deployment secret?)");
    arm_link_timer(self);
  } else if (out.what == link_table::reply_outcome::finish) {
    st.trust->add(sender->node());
    self->send(out.peer, std::move(out.message));
  }
}

void on_link_finish(manager_ptr self, link_finish& msg) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  if (!sender)
    return;
  auto out = st.links->finish(msg, caf::actor_cast<caf::actor>(sender), monotonic_ms());
  if (out.what == link_table::finish_outcome::bad_proof) {
    log_stranger(self, "a node claiming rank " + std::to_string(msg.from)
                         + " failed to prove membership (a different deployment secret?)");
    return;
  }
  if (out.what != link_table::finish_outcome::accepted)
    return;
  st.trust->add(sender->node());
  self->send(out.link.peer, link_ack{me(self).id});
  if (auto e = st.peers->link(out.link.id, out.link.incarnation, out.link.peer))
    on_peer_usable(self, e);
}

void on_link_ack(manager_ptr self, link_ack& msg) {
  auto& st = self->state;
  auto& sender = self->current_sender();
  if (!sender)
    return;
  auto made = st.links->ack(msg, caf::actor_cast<caf::actor>(sender));
  if (!made)
    return;
  if (auto e = st.peers->link(made->id, made->incarnation, made->peer))
    on_peer_usable(self, e);
}

} // namespace kvroom::detail
