#include "kvroom/actors/control/control_endpoint.hpp"

#include "caf/function_view.hpp"
#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/network/default_multiplexer.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/openssl/publish.hpp"
#include "caf/openssl/remote_actor.hpp"
#include "caf/send.hpp"

#include "kvroom/actors/control/control_door.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

caf::expected<uint16_t> publish_control(caf::actor_system& sys, const caf::actor& whom,
                                        uint16_t port, const std::string& host) {
  const char* in = host.empty() ? nullptr : host.c_str();
  if (sys.has_openssl_manager())
    return caf::openssl::publish(whom, port, in, true);
  if (auto door = find_control_door(sys)) {
    auto f = caf::make_function_view(door);
    return f(caf::publish_atom::value, port, caf::actor_cast<caf::strong_actor_ptr>(whom),
             sys.message_types(whom), host, true);
  }
  return sys.middleman().publish(whom, port, in, true);
}

void unpublish_control(caf::actor_system& sys, const caf::actor& whom, uint16_t port) {
  // caf/openssl/unpublish.hpp does not compile in 0.17.6: ask its
  // middleman actor directly.
  if (sys.has_openssl_manager())
    caf::anon_send(sys.openssl_manager().actor_handle(), caf::unpublish_atom::value,
                   whom.address(), port);
  else if (auto door = find_control_door(sys))
    caf::anon_send(door, caf::unpublish_atom::value, whom.address(), port);
  else
    (void) sys.middleman().unpublish(whom, port);
}

caf::expected<caf::actor> connect_control(caf::actor_system& sys, const std::string& host,
                                          uint16_t port) {
  if (sys.has_openssl_manager())
    return caf::openssl::remote_actor<caf::actor>(sys, host, port);
  if (auto door = find_control_door(sys)) {
    auto f = caf::make_function_view(door);
    auto res = f(caf::connect_atom::value, host, port);
    if (!res)
      return std::move(res.error());
    auto whom = caf::actor_cast<caf::actor>(std::get<1>(*res));
    if (!whom)
      return make_error(errc::unavailable, "nothing published at " + host + ":"
                                             + std::to_string(port));
    return whom;
  }
  return sys.middleman().remote_actor(host, port);
}

caf::io::middleman_actor control_connector(caf::actor_system& sys) {
  if (sys.has_openssl_manager())
    return sys.openssl_manager().actor_handle();
  if (auto door = find_control_door(sys))
    return door;
  return sys.middleman().actor_handle();
}

void close_connection(caf::actor_system& sys, const caf::node_id& node) {
  if (!sys.has_middleman() || node == sys.node())
    return;
  auto& mm = sys.middleman();
  auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  if (!basp)
    return;
  // Brokers live in the multiplexer's thread: their state is read there.
  auto* broker = static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(basp));
  mm.backend().dispatch([broker, basp, node] {
    if (auto hdl = broker->instance.tbl().lookup_direct(node))
      broker->close(*hdl);
  });
}

} // namespace kvroom::detail
