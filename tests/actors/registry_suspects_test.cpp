// The registry's word about a rank never linked here, checked before rooms
// fail on it: the suspects table (time passed in) and the endpoint probe
// (real loopback sockets).
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvroom/actors/manager/endpoint_probe.hpp"
#include "kvroom/actors/manager/registry_suspects.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

using test::make_rank;

constexpr uint64_t window = 1000;

/// A loopback TCP socket bound to a free port; listening or not.
struct loopback_port {
  int fd = -1;
  uint16_t port = 0;

  explicit loopback_port(bool listening) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(fd >= 0);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    if (listening)
      REQUIRE(::listen(fd, 4) == 0);
  }

  ~loopback_port() {
    ::close(fd);
  }
};

} // namespace

TEST_CASE("registry suspects: a refused probe is a loss at once; other outcomes wait",
          "[manager]") {
  registry_suspects s{window};
  auto d1 = make_rank(role::decode, 0, 1, 65537);
  REQUIRE(s.reported(d1, 7, "unreachable", 100));
  CHECK_FALSE(s.reported(d1, 7, "unreachable again", 150)); // the first window holds
  CHECK(s.next_deadline() == 100 + window);
  CHECK_FALSE(s.probed(d1.id, 7, probe_outcome::answered));
  CHECK_FALSE(s.probed(d1.id, 7, probe_outcome::unknown));
  CHECK_FALSE(s.probed(d1.id, 6, probe_outcome::refused)); // another incarnation's probe
  auto gone = s.probed(d1.id, 7, probe_outcome::refused);
  REQUIRE(gone);
  CHECK(gone->rank.id == d1.id);
  CHECK(gone->incarnation == 7);
  CHECK(gone->reason == "unreachable");
  CHECK(s.size() == 0);
  CHECK_FALSE(s.probed(d1.id, 7, probe_outcome::refused)); // once
}

TEST_CASE("registry suspects: the incarnation reported, seen again, lives; another replaces it",
          "[manager]") {
  registry_suspects s{window};
  auto p0 = make_rank(role::prefill, 0, 0, 0);
  auto p1 = make_rank(role::prefill, 0, 1, 1);
  REQUIRE(s.reported(p0, 3, "unreachable", 0));
  REQUIRE(s.reported(p1, 4, "unreachable", 0));
  CHECK_FALSE(s.answered(p0.id, 2));
  CHECK_FALSE(s.replaced(p0.id, 3)); // the same incarnation replaces nothing
  CHECK_FALSE(s.replaced(p0.id, 0)); // an unknown one neither
  CHECK(s.answered(p0.id, 3));
  CHECK_FALSE(s.contains(p0.id));
  CHECK_FALSE(s.answered(p0.id, 3));
  auto gone = s.replaced(p1.id, 5);
  REQUIRE(gone);
  CHECK(gone->incarnation == 4);
  CHECK(s.size() == 0);
  // Nothing is left to expire.
  CHECK(s.expired(10 * window).empty());
}

TEST_CASE("registry suspects: the window ends in a loss; a newer report restarts it",
          "[manager]") {
  registry_suspects s{window};
  auto d0 = make_rank(role::decode, 0, 0, 65536);
  auto d1 = make_rank(role::decode, 0, 1, 65537);
  REQUIRE(s.reported(d0, 1, "unreachable", 0));
  REQUIRE(s.reported(d1, 1, "unreachable", 400));
  CHECK(s.expired(window - 1).empty());
  auto first = s.expired(window);
  REQUIRE(first.size() == 1);
  CHECK(first[0].rank.id == d0.id);
  // A report of another incarnation of d1 is the registry's word now.
  REQUIRE(s.reported(d1, 2, "unreachable", 900));
  CHECK(s.expired(400 + window).empty());
  auto second = s.expired(900 + window);
  REQUIRE(second.size() == 1);
  CHECK(second[0].incarnation == 2);
  CHECK_FALSE(s.next_deadline());
}

TEST_CASE("endpoint probe: a listening port answers, a closed one refuses", "[manager]") {
  using std::chrono::milliseconds;
  {
    loopback_port open{true};
    CHECK(probe_endpoint("127.0.0.1", open.port, milliseconds(1000)) == probe_outcome::answered);
    CHECK(probe_endpoint("localhost", open.port, milliseconds(1000)) == probe_outcome::answered);
  }
  {
    // Bound, not listening: the kernel refuses a connect to it, as it does
    // to the port of a process that ended.
    loopback_port closed{false};
    CHECK(probe_endpoint("127.0.0.1", closed.port, milliseconds(1000)) == probe_outcome::refused);
  }
  CHECK(probe_endpoint("127.0.0.1", 0, milliseconds(1000)) == probe_outcome::unknown);
}
