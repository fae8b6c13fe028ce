#include "kvroom/actors/control_endpoint.hpp"

#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/openssl/publish.hpp"
#include "caf/openssl/remote_actor.hpp"
#include "caf/send.hpp"

namespace kvroom::detail {

caf::expected<uint16_t> publish_control(caf::actor_system& sys, const caf::actor& whom,
                                        uint16_t port, const std::string& host) {
  const char* in = host.empty() ? nullptr : host.c_str();
  if (sys.has_openssl_manager())
    return caf::openssl::publish(whom, port, in, true);
  return sys.middleman().publish(whom, port, in, true);
}

void unpublish_control(caf::actor_system& sys, const caf::actor& whom, uint16_t port) {
  // caf/openssl/unpublish.hpp does not compile in 0.17.6: ask its
  // middleman actor directly.
  if (sys.has_openssl_manager())
    caf::anon_send(sys.openssl_manager().actor_handle(), caf::unpublish_atom::value,
                   whom.address(), port);
  else
    (void) sys.middleman().unpublish(whom, port);
}

caf::expected<caf::actor> connect_control(caf::actor_system& sys, const std::string& host,
                                          uint16_t port) {
  if (sys.has_openssl_manager())
    return caf::openssl::remote_actor<caf::actor>(sys, host, port);
  return sys.middleman().remote_actor(host, port);
}

caf::io::middleman_actor control_connector(caf::actor_system& sys) {
  if (sys.has_openssl_manager())
    return sys.openssl_manager().actor_handle();
  return sys.middleman().actor_handle();
}

} // namespace kvroom::detail
