#include "kvroom/actors/control/control_door.hpp"

#include "caf/actor_registry.hpp"
#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/middleman_actor_impl.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/io/network/doorman_impl.hpp"
#include "caf/send.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/socket_io.hpp"

namespace kvroom::detail {

namespace {

namespace net = caf::io::network;

constexpr caf::atom_value door_name = caf::atom("kvdoor");

/// CAF's doorman, except that an accepted socket goes to the gate first
/// and reaches the BASP broker (as if just accepted) only once it proved
/// membership.
class gated_doorman : public net::doorman_impl {
public:
  gated_doorman(net::default_multiplexer& mx, net::native_socket fd,
                std::shared_ptr<membership_gate> gate)
    : doorman_impl(mx, fd), gate_(std::move(gate)) {
    // nop
  }

  bool new_connection() override {
    if (detached())
      return false;
    auto fd = acceptor_.accepted_socket();
    caf::intrusive_ptr<gated_doorman> self{this};
    auto* mx = &acceptor_.backend();
    // The gate's thread passes the socket back into the event loop, where
    // the broker and this doorman live.
    gate_->admit(fd, [self, mx](int passed, door_handshake&) {
      mx->dispatch([self, mx, passed] { self->hand_over(*mx, passed); });
    });
    return true;
  }

private:
  void hand_over(net::default_multiplexer& mx, net::native_socket fd) {
    if (detached()) {
      net::close_socket(fd);
      return;
    }
    auto sptr = mx.new_scribe(fd);
    auto hdl = sptr->hdl();
    parent()->add_scribe(std::move(sptr));
    doorman::new_connection(&mx, hdl);
  }

  std::shared_ptr<membership_gate> gate_;
};

/// CAF's middleman actor with gated endpoints (`open`) and connections
/// that answer the peer's gate (`connect`); publish, connect and unpublish
/// requests are the middleman actor's own.
class door_actor : public caf::io::middleman_actor_impl {
public:
  door_actor(caf::actor_config& cfg, caf::actor broker, std::shared_ptr<membership_gate> gate,
             deployment_secret secret)
    : middleman_actor_impl(cfg, std::move(broker)),
      gate_(std::move(gate)),
      secret_(std::move(secret)) {
    // nop
  }

  const char* name() const override {
    return "kvroom.control_door";
  }

protected:
  // The door is one detached actor: a connect holds every other publish and
  // connect behind it, so it is bounded (CAF's own connect blocks for the
  // kernel's SYN retries, ~2 min, on a host that went away).
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    std::string why;
    auto fd = detail::connect_by(host, port, monotonic_ms() + connect_ms, why);
    if (fd < 0)
      return make_error(errc::unavailable, "control endpoint: " + why);
    auto res = pass_gate(fd, secret_, membership_gate::limits{}.deadline_ms);
    if (res.kind != gate_outcome::passed) {
      net::close_socket(fd);
      // Refused: the caller stops trying; failed: it may retry.
      return make_error(res.kind == gate_outcome::refused ? errc::unauthorized
                                                          : errc::unavailable,
                        "control endpoint " + host + ":" + std::to_string(port) + ": "
                          + res.why);
    }
    return system().middleman().backend().new_scribe(fd);
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd)
      return std::move(fd.error());
    auto& mx = static_cast<net::default_multiplexer&>(system().middleman().backend());
    return caf::make_counted<gated_doorman>(mx, *fd, gate_);
  }

private:
  /// Past one SYN retransmission (the kernel's first comes after 1 s).
  static constexpr uint64_t connect_ms = 3000;

  std::shared_ptr<membership_gate> gate_;
  deployment_secret secret_;
};

} // namespace

control_door install_control_door(caf::actor_system& sys, deployment_secret secret,
                                  membership_gate::limits limits) {
  if (auto existing = find_control_door(sys))
    return {existing, nullptr};
  auto gate = std::make_shared<membership_gate>(
    [secret] { return std::make_unique<gate_server>(secret, make_nonce()); }, limits);
  auto broker = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  auto door = sys.spawn<door_actor, caf::detached + caf::hidden>(broker, gate, std::move(secret));
  sys.registry().put(door_name, caf::actor_cast<caf::strong_actor_ptr>(door));
  return {door, std::move(gate)};
}

caf::io::middleman_actor find_control_door(caf::actor_system& sys) {
  return sys.registry().get<caf::io::middleman_actor>(door_name);
}

void remove_control_door(caf::actor_system& sys, control_door& door) {
  if (!door.gate)
    return;
  door.gate->stop();
  sys.registry().erase(door_name);
  // Kill, not user_shutdown: CAF 0.17's middleman_actor_impl ignores every
  // other exit (measured), so the door lived on while anyone still held its
  // handle, and the actor system's destructor waited for its thread forever
  // (one `kvroom serve` in a few, under load, never exited after its report).
  caf::anon_send_exit(door.actor, caf::exit_reason::kill);
  door = {};
}

} // namespace kvroom::detail
