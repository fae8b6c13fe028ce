// CAF 0.17's BASP broker keeps a hidden spawn-server helper per node it
// connected to, in a reference cycle with itself that only the node's
// disconnection breaks (control_endpoint.hpp). The runtime ends them as it
// stops; here, two actor systems in this process, one connected to the
// other, show that the helpers are found, ended, and not found again.
#include <catch2/catch.hpp>

#include <chrono>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"

using namespace std::chrono_literals;

namespace {

caf::behavior echo() {
  return {[](int x) { return x; }};
}

struct plain_config : caf::actor_system_config {
  plain_config() {
    load<caf::io::middleman>();
    set("logger.verbosity", caf::atom("quiet"));
  }
};

} // namespace

TEST_CASE("spawn servers: a connected system's helpers end when released, once") {
  plain_config cfg_a, cfg_b;
  caf::actor_system a{cfg_a};
  caf::actor_system b{cfg_b};
  auto served = a.spawn(echo);
  auto port = a.middleman().publish(served, 0, "127.0.0.1");
  REQUIRE(port);
  auto remote = b.middleman().remote_actor("127.0.0.1", *port);
  REQUIRE(remote);
  {
    // A round trip: both brokers finished the handshake and learned the
    // other node (each spawned its helper then).
    caf::scoped_actor self{b};
    int got = 0;
    self->request(*remote, 5s, 42).receive([&](int x) { got = x; }, [](caf::error&) {});
    REQUIRE(got == 42);
  }
  CHECK(kvroom::detail::release_spawn_servers(b) == 1);
  CHECK(kvroom::detail::release_spawn_servers(b) == 0);
  CHECK(kvroom::detail::release_spawn_servers(a) == 1);
  // The connection still works: the helpers serve only CAF's remote spawn.
  caf::scoped_actor self{b};
  int got = 0;
  self->request(*remote, 5s, 7).receive([&](int x) { got = x; }, [](caf::error&) {});
  CHECK(got == 7);
  caf::anon_send_exit(served, caf::exit_reason::user_shutdown);
}
