// A rank's registration with the directory: the membership handshake
// (hello, challenge, proof), tries again while the rank's window lasts,
// and registers again whenever a lost registry comes back. Part of the
// rank's control actor (rank_control.hpp).

#include <algorithm>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/control/control_parts.hpp"
#include "kvroom/actors/local_messages.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

namespace {

std::chrono::milliseconds attempt_timeout(control_ptr self) {
  return std::chrono::milliseconds(self->state.links->timing().attempt_ms());
}

void schedule_reconnect(control_ptr self) {
  auto& st = self->state;
  st.reconnect_ms = link_timing::reconnect_ms(st.reconnect_ms);
  self->delayed_send(self, std::chrono::milliseconds(st.reconnect_ms), reconnect_atom::value);
}

/// Worth another try: the registry did not answer in time, or was busy.
bool transient(const caf::error& err) {
  return err == caf::sec::request_timeout || is(err, errc::unavailable)
         || is(err, errc::limit_reached) || is(err, errc::timeout);
}

/// Directory messages come from `registry`'s process from now (null: none
/// but this one): the manager checks its pushes against it.
void tell_registry(control_ptr self, const caf::actor& registry) {
  self->send(self->state.manager, registry_atom::value, registry);
}

void registration_failed(control_ptr self, caf::error err) {
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

void registered(control_ptr self) {
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
  st.metrics->set_ready(true);
}

} // namespace

caf::response_promise join(control_ptr self, std::string host, uint16_t port) {
  auto& st = self->state;
  auto e = std::make_shared<rank_entry>(*st.self_entry);
  e->control_host = std::move(host);
  e->control_port = port;
  st.self_entry = std::move(e);
  st.joining_rank = self->make_response_promise();
  st.join_deadline_ms = monotonic_ms() + st.registration_wait_ms;
  start_registration(self);
  return *st.joining_rank;
}

void start_registration(control_ptr self) {
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
        // Before the registration goes out: the registry's pushes to the
        // manager may follow its answer at once, and are checked against it.
        tell_registry(self, registry);
        // The entry names the manager: the directory lists, monitors and
        // pushes to it, not to this actor (see registration_door).
        auto& e = *st.self_entry;
        register_rank msg{e, mine,
                          st.members->rank_proof(c.nonce, mine, e.rank.id, e.incarnation)};
        self->request(registry, timeout, std::move(msg))
          .then(
            [=](directory_update& d) {
              auto& st = self->state;
              if (registry != st.registry)
                return;
              self->send(st.manager, std::move(d));
              registered(self);
            },
            [=](caf::error& err) { registration_failed(self, std::move(err)); });
      },
      [=](caf::error& err) { registration_failed(self, std::move(err)); });
}

void on_registry_down(control_ptr self, const caf::error& reason) {
  auto& st = self->state;
  if (st.registry_port == 0)
    return; // in this process: it ends with the runtime
  logger()->warn("{}: bootstrap registry {}:{} lost ({}); rooms go on with the cached "
                 "directory; reconnecting",
                 to_string(me(self)), st.registry_host, st.registry_port,
                 caf::to_string(reason));
  auto node = st.registry.node();
  st.registry = nullptr;
  if (node != self->node() && !node_holds_ours(self, node))
    st.trust->remove(node);
  tell_registry(self, nullptr);
  st.reconnect_ms = 0;
  schedule_reconnect(self);
}

void reconnect_registry(control_ptr self) {
  auto& st = self->state;
  if (st.registry)
    return;
  self->request(dialer(self), attempt_timeout(self), caf::connect_atom::value,
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

} // namespace kvroom::detail
