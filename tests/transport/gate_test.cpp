#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kvroom/transport/auth/membership_gate.hpp"
#include "kvroom/transport/auth/gate_handshake.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

namespace {

const deployment_secret ours{"0123456789abcdef-ours"};
const deployment_secret theirs{"0123456789abcdef-theirs"};

/// A loopback listener and connected pairs from it.
struct loopback {
  int listener = -1;
  uint16_t port = 0;

  loopback() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listener, 256) == 0);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }

  ~loopback() {
    ::close(listener);
  }

  /// {client, accepted server end}
  std::pair<int, int> pair() {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    int s = ::accept(listener, nullptr, nullptr);
    REQUIRE(s >= 0);
    return {c, s};
  }
};

/// True once the peer closed `fd` (within `limit`).
bool closed_within(int fd, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      char buf[128];
      if (::recv(fd, buf, sizeof(buf), 0) <= 0)
        return true;
    }
  }
  return false;
}

} // namespace

TEST_CASE("gate handshake: both ends prove the same secret, nothing else passes") {
  gate_server server{ours, make_nonce()};
  REQUIRE(server.hello().size() == gate_wire::hello_size);
  SECTION("same secret") {
    gate_client client{ours, make_nonce()};
    std::string why;
    auto answer = client.answer(server.hello(), why);
    REQUIRE(answer.size() == gate_wire::answer_size);
    // Byte by byte: a slow client is a client.
    for (char c : answer) {
      CHECK_FALSE(server.hopeless());
      server.feed(&c, 1);
    }
    CHECK(server.missing() == 0);
    CHECK(server.verdict().empty());
    CHECK(client.check(server.reply()).empty());
  }
  SECTION("another secret, on either side") {
    gate_client client{theirs, make_nonce()};
    std::string why;
    auto answer = client.answer(server.hello(), why);
    server.feed(answer.data(), answer.size());
    CHECK(server.verdict().find("failed membership proof") != std::string::npos);
    // A server with another secret cannot prove itself to us either.
    gate_server fake{theirs, make_nonce()};
    gate_client me{ours, make_nonce()};
    auto mine = me.answer(fake.hello(), why);
    fake.feed(mine.data(), mine.size());
    CHECK_FALSE(me.check(fake.reply()).empty());
  }
  SECTION("a proof for another server's nonce is refused") {
    gate_server other{ours, make_nonce()};
    gate_client client{ours, make_nonce()};
    std::string why;
    auto replayed = client.answer(other.hello(), why);
    server.feed(replayed.data(), replayed.size());
    CHECK_FALSE(server.verdict().empty());
  }
  SECTION("a wrong magic is hopeless at once; a BASP header is one") {
    const char basp[8] = {0x01, 0, 0, 0, static_cast<char>(0xF0), 0, 0, 0};
    server.feed(basp, sizeof(basp));
    CHECK(server.hopeless());
  }
  SECTION("a client refuses what is not a gate hello") {
    gate_client client{ours, make_nonce()};
    std::string why;
    CHECK(client.answer(std::string(36, '\0'), why).empty());
    CHECK(why.find("not a kvroom control endpoint") != std::string::npos);
  }
}

TEST_CASE("control gate: members pass, strangers are closed by the deadline, slots are bounded") {
  loopback net;
  membership_gate::limits lim;
  lim.max_pending = 6;
  lim.max_per_host = 4;
  lim.deadline_ms = 200;
  membership_gate gate{[] { return std::make_unique<gate_server>(ours, make_nonce()); }, lim};
  std::atomic<int> passed{0};
  auto count = [&](int fd, door_handshake&) {
    ++passed;
    ::close(fd);
  };
  SECTION("a member passes; the socket is at the first byte after the gate") {
    auto [c, s] = net.pair();
    gate.admit(s, [&](int fd, door_handshake& hs) {
      const char after[] = "BASP";
      (void) ::send(fd, after, 4, MSG_NOSIGNAL);
      count(fd, hs);
    });
    CHECK(pass_gate(c, ours, 1000).kind == gate_outcome::passed);
    char buf[4] = {0};
    REQUIRE(::recv(c, buf, 4, MSG_WAITALL) == 4);
    CHECK(std::string(buf, 4) == "BASP");
    ::close(c);
    CHECK(passed == 1);
  }
  SECTION("another secret is refused on both ends") {
    auto [c, s] = net.pair();
    gate.admit(s, count);
    auto res = pass_gate(c, theirs, 1000);
    CHECK(res.kind == gate_outcome::refused);
    CHECK(res.why.find("failed to prove membership") != std::string::npos);
    ::close(c);
    CHECK(passed == 0);
    // The gate thread counts the refusal after it sent it: wait (bounded).
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (gate.stats().refused_proof == 0 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(gate.stats().refused_proof == 1);
  }
  SECTION("an endpoint that never answers is a failure worth a retry, not a refusal") {
    auto [c, s] = net.pair();
    auto res = pass_gate(c, ours, 100);
    CHECK(res.kind == gate_outcome::failed);
    ::close(c);
    ::close(s);
  }
  SECTION("silent and trickling clients are closed at the deadline, however they trickle") {
    auto [silent, s1] = net.pair();
    auto [trickler, s2] = net.pair();
    gate.admit(s1, count);
    gate.admit(s2, count);
    auto t0 = std::chrono::steady_clock::now();
    const char magic[] = "KVG1";
    bool closed = false;
    for (int i = 0; i < 40 && !closed; ++i) {
      char c = i < 4 ? magic[i] : '\0';
      closed = ::send(trickler, &c, 1, MSG_NOSIGNAL) < 0 || closed_within(trickler, 20ms);
    }
    CHECK(closed);
    CHECK(closed_within(silent, 1000ms));
    CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
    CHECK(gate.stats().timed_out == 2);
    CHECK(gate.pending() == 0);
    ::close(silent);
    ::close(trickler);
  }
  SECTION("past the per-host and total bounds a connection is closed at once") {
    std::vector<int> clients;
    for (int i = 0; i < 6; ++i) {
      auto [c, s] = net.pair();
      clients.push_back(c);
      gate.admit(s, count);
    }
    // 4 held from this host, 2 refused at once.
    CHECK(gate.pending() == 4);
    CHECK(gate.stats().refused_full == 2);
    for (int c : clients)
      ::close(c);
    CHECK(gate.stats().refused_full == 2);
  }
  SECTION("stop closes what is pending; later admits are closed at once") {
    auto [c, s] = net.pair();
    gate.admit(s, count);
    gate.stop();
    CHECK(closed_within(c, 1000ms));
    auto [c2, s2] = net.pair();
    gate.admit(s2, count);
    CHECK(closed_within(c2, 1000ms));
    ::close(c);
    ::close(c2);
  }
}
