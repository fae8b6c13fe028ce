#include "kvroom/actors/manager/endpoint_probe.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "caf/allowed_unsafe_message_type.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/send.hpp"

namespace kvroom {

namespace {

/// The outcome of one connect to `ai`.
probe_outcome probe_address(const addrinfo& ai, int timeout_ms) {
  int fd = ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0)
    return probe_outcome::unknown;
  auto outcome_of = [](int err) {
    if (err == 0)
      return probe_outcome::answered;
    // Only a refusal says the process is gone: an unreachable host or
    // network says nothing of it.
    return err == ECONNREFUSED ? probe_outcome::refused : probe_outcome::unknown;
  };
  probe_outcome out;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) == 0) {
    out = probe_outcome::answered;
  } else if (errno != EINPROGRESS) {
    out = outcome_of(errno);
  } else {
    pollfd p{fd, POLLOUT, 0};
    int n;
    do
      n = ::poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    int err = 0;
    socklen_t len = sizeof(err);
    if (n <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      out = probe_outcome::unknown;
    else
      out = outcome_of(err);
  }
  ::close(fd);
  return out;
}

} // namespace

probe_outcome probe_endpoint(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout) {
  if (port == 0)
    return probe_outcome::unknown;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  auto service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &list) != 0 || list == nullptr)
    return probe_outcome::unknown;
  // The first address that gives an answer decides (a name may resolve to
  // an address family the peer does not listen on: that one refuses).
  auto out = probe_outcome::unknown;
  for (auto* ai = list; ai != nullptr; ai = ai->ai_next) {
    out = probe_address(*ai, static_cast<int>(timeout.count()));
    if (out == probe_outcome::answered)
      break;
  }
  ::freeaddrinfo(list);
  return out;
}

void spawn_probe(caf::actor_system& sys, caf::actor manager, rank_id id, uint64_t incarnation,
                 std::string host, uint16_t port, std::chrono::milliseconds timeout) {
  sys.spawn<caf::detached>(
    [=](caf::event_based_actor* self, int) -> caf::behavior {
      auto outcome = probe_endpoint(host, port, timeout);
      self->send(manager, probe_done{id, incarnation, outcome});
      self->quit();
      return {};
    },
    0);
}

} // namespace kvroom
