#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "kvroom/transport/socket_io.hpp"

using namespace kvroom::detail;

namespace {

/// A loopback listener that never accepts; `backlog` 0 holds one connection.
struct listener {
  int fd = -1;
  uint16_t port = 0;

  explicit listener(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd, backlog) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }

  ~listener() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

TEST_CASE("connect_by: a blocking socket connected to the listener") {
  listener l{4};
  std::string why;
  int fd = connect_by("127.0.0.1", l.port, kvroom::monotonic_ms() + 2000, why);
  REQUIRE(fd >= 0);
  CHECK(why.empty());
  CHECK((::fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  int peer = ::accept(l.fd, nullptr, nullptr);
  REQUIRE(peer >= 0);
  char c = 'k';
  CHECK(::send(fd, &c, 1, 0) == 1);
  char got = 0;
  CHECK(recv_by(peer, &got, 1, kvroom::monotonic_ms() + 2000));
  CHECK(got == 'k');
  ::close(peer);
  ::close(fd);
}

TEST_CASE("connect_by: a closed port and an unknown host fail with the reason") {
  uint16_t port = 0;
  {
    listener l{1};
    port = l.port;
  } // closed: nothing listens there now
  std::string why;
  CHECK(connect_by("127.0.0.1", port, kvroom::monotonic_ms() + 2000, why) < 0);
  CHECK_THAT(why, Catch::Contains("refused"));
  why.clear();
  CHECK(connect_by("no-such-host.invalid", 80, kvroom::monotonic_ms() + 2000, why) < 0);
  CHECK_THAT(why, Catch::Contains("cannot resolve"));
}

TEST_CASE("connect_by: a listener that drops SYNs costs the deadline, not the kernel's retries") {
  // A full accept queue drops further SYNs, as a host gone dark does; a
  // blocking connect would retry for about two minutes.
  listener l{0};
  std::vector<int> held;
  bool timed_out = false;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 16 && !timed_out; ++i) {
    std::string why;
    int fd = connect_by("127.0.0.1", l.port, kvroom::monotonic_ms() + 300, why);
    if (fd >= 0) {
      held.push_back(fd);
    } else {
      CHECK_THAT(why, Catch::Contains("no answer by the deadline"));
      timed_out = true;
    }
  }
  CHECK(timed_out);
  // A bound on liveness, not a performance figure: 16 tries of 300 ms.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  for (int fd : held)
    ::close(fd);
}
