#include "kvroom/actors/manager/manager_links.hpp"

#include <algorithm>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/control/link_keeper.hpp"
#include "kvroom/actors/logging.hpp"
#include "kvroom/actors/manager/manager_peers.hpp"
#include "kvroom/actors/manager/manager_send.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/messages/clock.hpp"
#include "kvroom/messages/error.hpp"

namespace kvroom::detail {

namespace {

std::chrono::milliseconds link_timeout(manager_ptr self) {
  return std::chrono::milliseconds(std::max<uint32_t>(self->state.limits.query_timeout_ms, 500));
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
  if (now - st.last_stranger_log_ms >= 1000) {
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
  st.reconnect_ms = st.reconnect_ms == 0 ? 50 : std::min<uint32_t>(st.reconnect_ms * 2, 500);
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
  if (st.joining_rank && transient(err) && monotonic_ms() + 200 < st.join_deadline_ms) {
    auto pause = 50 + st.link_rng() % 250;
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
      st.reconnect_ms = pause / 2;
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

/// Sends our half of a link: connect to the peer's control endpoint, then
/// `link_hello`.
void begin_link(manager_ptr self, rank_id id) {
  auto& st = self->state;
  auto i = st.joining.find(id);
  if (i == st.joining.end())
    return;
  auto& l = i->second;
  // One nonce per link, kept across retries: a late reply to an earlier
  // attempt still verifies instead of reading as a failed proof.
  if (l.mine.empty())
    l.mine = make_nonce();
  l.peer = nullptr;
  l.finished = false;
  l.started_ms = monotonic_ms();
  l.retry_at_ms = 0;
  ++l.attempts;
  auto entry = l.entry;
  self->request(middleman(self), link_timeout(self), caf::connect_atom::value,
                entry->control_host, entry->control_port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        auto& st = self->state;
        auto j = st.joining.find(id);
        if (j == st.joining.end() || j->second.entry != entry)
          return;
        if (!ptr) {
          j->second.retry_at_ms = monotonic_ms() + 200;
          logger()->debug("{}: nothing published at {} for rank {}", to_string(me(self)),
                          endpoint_text(*entry), id);
          return;
        }
        j->second.peer = caf::actor_cast<caf::actor>(std::move(ptr));
        j->second.started_ms = monotonic_ms(); // the handshake's clock starts now
        self->send(j->second.peer,
                   link_hello{me(self).id, st.self_entry->incarnation, j->second.mine});
      },
      [=](caf::error& err) {
        auto& st = self->state;
        auto j = st.joining.find(id);
        if (j == st.joining.end() || j->second.entry != entry)
          return;
        // Jittered: a rank that restarts is dialled by every rank that
        // needs it, and they should not come back in step.
        auto cap = std::min<uint64_t>(1000, 50ull << std::min<uint32_t>(j->second.attempts, 5));
        auto backoff = cap / 2 + st.link_rng() % (cap / 2 + 1);
        j->second.retry_at_ms = monotonic_ms() + backoff;
        logger()->debug("{}: cannot link to rank {} at {} ({}), retrying in {} ms",
                        to_string(me(self)), id, endpoint_text(*entry),
                        self->system().render(err), backoff);
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
  auto timeout = link_timeout(self);
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
  self->request(middleman(self), link_timeout(self), caf::connect_atom::value,
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
        if (st.joining_rank && monotonic_ms() + 200 >= st.join_deadline_ms) {
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
  auto& st = self->state;
  if (!e || !self->home_system().has_middleman() || e->rank.id == me(self).id)
    return;
  auto id = e->rank.id;
  if (auto i = st.joining.find(id); i != st.joining.end() && i->second.entry == e)
    return; // under way
  auto& l = st.joining[id];
  l = kv_manager_state::outgoing_link{};
  l.entry = e;
  // Two nodes dialing each other at once make CAF 0.17 close one of the
  // connections as a duplicate, and what was in flight on it is lost. The
  // lower id dials at once; the higher (which needs the link too, or it
  // would not be here) after a jittered pause, unless the peer's link came
  // first.
  if (id > me(self).id)
    begin_link(self, id);
  else
    l.retry_at_ms = monotonic_ms() + 20 + st.link_rng() % 100;
}

void retry_links(manager_ptr self, uint64_t now) {
  auto& st = self->state;
  auto deadline = static_cast<uint64_t>(link_timeout(self).count());
  std::vector<rank_id> again;
  for (auto& kvp : st.joining) {
    auto& l = kvp.second;
    // Connected but no answer for a while: a handshake message was lost
    // (CAF drops what was in flight on a connection it closes); again.
    bool stalled = l.peer && now - l.started_ms > 500;
    if (l.retry_at_ms != 0 ? now >= l.retry_at_ms : stalled || now - l.started_ms > deadline)
      again.push_back(kvp.first);
  }
  for (auto id : again)
    begin_link(self, id);
  if (st.accepting)
    st.accepting->expire(now);
}

void note_traffic(manager_ptr self, const caf::node_id& node) {
  self->state.last_traffic_ms[node] = monotonic_ms();
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
    st.last_traffic_ms.erase(node);
  st.metrics->set_peers(st.peers->usable_peers(), st.peers->listed_peers(),
                        st.peers->lost().size());
  logger()->debug("{}: idle link to {} closed", to_string(me(self)), to_string(e->rank));
}

} // namespace

void close_idle_links(manager_ptr self, uint64_t now) {
  auto& st = self->state;
  auto idle = st.limits.idle_link_ms;
  if (idle == 0 || !self->home_system().has_middleman())
    return;
  // An answer that never came: ask again later.
  for (auto i = st.closing.begin(); i != st.closing.end();)
    i = now - i->second > idle ? st.closing.erase(i) : std::next(i);
  std::vector<caf::node_id> quiet;
  for (auto& kvp : st.last_traffic_ms)
    if (now - kvp.second >= idle && st.closing.count(kvp.first) == 0
        && !node_in_use(self, kvp.first))
      quiet.push_back(kvp.first);
  for (auto& node : quiet) {
    st.closing[node] = now;
    for (auto& e : st.peers->all())
      if (e->manager && e->manager.node() == node && e->control_port != 0)
        self->send(e->manager, link_close{me(self).id});
  }
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
  auto node = e->manager.node();
  st.closing.erase(node);
  if (!msg.agreed) {
    // The peer still uses it.
    note_traffic(self, node);
    return;
  }
  // The peer no longer counts this link: neither does this side (a room
  // that opened meanwhile links again), and the connection goes once no
  // rank of this process links there and no room here needs it.
  unlink_peer(self, e, !st.rooms->involves(me(self), e->rank));
}

void on_link_hello(manager_ptr self, link_hello& msg) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender || msg.nonce.size() != 32)
    return;
  // A retry of the same link (same nonce) gets the same answer, so a late
  // finish of the earlier attempt still verifies.
  nonce mine;
  if (auto* prev = st.accepting->find(sender->address());
      prev && prev->from == msg.from && prev->theirs == msg.nonce)
    mine = prev->mine;
  else
    mine = make_nonce();
  kv_manager_state::incoming_link in{msg.from, msg.incarnation, msg.nonce, std::move(mine)};
  auto reply = link_reply{me(self).id, in.mine,
                          st.members->accept_proof(msg.nonce, in.mine, me(self).id, msg.from)};
  if (!st.accepting->put(sender->address(), std::move(in), monotonic_ms())) {
    log_stranger(self, "refused a link handshake: too many in progress");
    return;
  }
  self->send(caf::actor_cast<caf::actor>(sender), std::move(reply));
}

void on_link_reply(manager_ptr self, link_reply& msg) {
  auto& st = self->state;
  auto i = st.joining.find(msg.from);
  auto& sender = self->current_sender();
  if (i == st.joining.end() || !i->second.peer || !sender
      || sender->address() != i->second.peer.address() || i->second.finished)
    return;
  auto& l = i->second;
  if (!membership::matches(msg.proof, st.members->accept_proof(l.mine, msg.nonce, msg.from,
                                                               me(self).id))) {
    log_stranger(self, "rank " + std::to_string(msg.from) + " at " + endpoint_text(*l.entry)
                         + " failed to prove membership (a different deployment secret?)");
    l.retry_at_ms = monotonic_ms() + 1000;
    return;
  }
  st.trust->add(sender->node());
  l.finished = true;
  self->send(l.peer, link_finish{me(self).id,
                                 st.members->join_proof(msg.nonce, l.mine, me(self).id,
                                                        st.self_entry->incarnation, msg.from)});
}

void on_link_finish(manager_ptr self, link_finish& msg) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return;
  auto in = st.accepting->take(sender->address(), monotonic_ms());
  if (!in || in->from != msg.from)
    return;
  if (!membership::matches(msg.proof, st.members->join_proof(in->mine, in->theirs, in->from,
                                                             in->incarnation, me(self).id))) {
    log_stranger(self, "a node claiming rank " + std::to_string(msg.from)
                         + " failed to prove membership (a different deployment secret?)");
    return;
  }
  st.trust->add(sender->node());
  auto peer = caf::actor_cast<caf::actor>(sender);
  self->send(peer, link_ack{me(self).id});
  if (auto e = st.peers->link(in->from, in->incarnation, peer))
    on_peer_usable(self, e);
}

void on_link_ack(manager_ptr self, link_ack& msg) {
  auto& st = self->state;
  auto i = st.joining.find(msg.from);
  auto& sender = self->current_sender();
  if (i == st.joining.end() || !i->second.finished || !sender
      || sender->address() != i->second.peer.address())
    return;
  auto l = std::move(i->second);
  st.joining.erase(i);
  if (auto e = st.peers->link(msg.from, l.entry->incarnation, l.peer))
    on_peer_usable(self, e);
}

} // namespace kvroom::detail
