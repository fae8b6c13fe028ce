// A client without the deployment secret.
//
//   kvroom_stranger ROOMS HOST:PORT...   speaks CAF's wire protocol: it
//     connects to rank control endpoints and sends what a member would send
//     to fail, commit or reroute rooms 1..N: room_failed,
// room_committed, part_done and a forged directory, each once from an actor
// and once anonymously (CAF 0.17 delivers a remote anonymous message with no
// sender at all, so "no sender" must not read as "from this process"). A
// rank must drop all of it (and count it). Exit 0 once everything is sent, 1 when no endpoint
// could be reached (what a gated endpoint must make of it).
//
//   kvroom_stranger --raw HOST:PORT...   holds raw TCP connections: 80
//     silent ones, one that announces a 4 GiB BASP message, one that
//     trickles a byte every 100 ms. Every one must be closed by the endpoint
//     within 2.5 s; exit 0 if so, 1 (saying which) if not.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/kvroom.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace {

int dial(const std::string& host, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Milliseconds until the peer closes `fd` (reading and dropping what it
/// sends), or -1 if it is still open after `limit_ms`. `trickle` sends a
/// byte every 100 ms meanwhile.
int64_t closed_after(int fd, int64_t limit_ms, bool trickle,
                     std::chrono::steady_clock::time_point t0) {
  using namespace std::chrono;
  auto next_byte = steady_clock::now();
  // The gate's magic first, so only its deadline can end it.
  const char pattern[] = "KVG1";
  size_t sent = 0;
  for (;;) {
    auto now = steady_clock::now();
    auto ms = duration_cast<milliseconds>(now - t0).count();
    if (ms > limit_ms)
      return -1;
    if (trickle && now >= next_byte) {
      char c = sent < 4 ? pattern[sent] : '\0';
      ++sent;
      if (::send(fd, &c, 1, MSG_NOSIGNAL) < 0)
        return ms;
      next_byte = now + milliseconds(100);
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 20) > 0) {
      char buf[256];
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0)
        return duration_cast<milliseconds>(steady_clock::now() - t0).count();
    }
  }
}

int raw(int argc, char** argv) {
  int bad = 0;
  for (int i = 2; i < argc; ++i) {
    std::string addr = argv[i];
    auto colon = addr.rfind(':');
    auto host = addr.substr(0, colon);
    auto port = static_cast<uint16_t>(std::stoi(addr.substr(colon + 1)));
    auto t0 = std::chrono::steady_clock::now();
    int header = dial(host, port);
    int trickler = dial(host, port);
    std::vector<int> silent;
    for (int k = 0; k < 80; ++k)
      if (int fd = dial(host, port); fd >= 0)
        silent.push_back(fd);
    if (header < 0 || trickler < 0 || silent.size() != 80) {
      std::printf("stranger: %s: could not connect\n", addr.c_str());
      ++bad;
      continue;
    }
    // A BASP client handshake header announcing 0xF0000000 payload bytes:
    // CAF 0.17 allocates (and zeroes) all of it on reading the header.
    unsigned char hdr[32] = {0x01, 0, 0, 0, 0xF0, 0, 0, 0};
    (void) ::send(header, hdr, sizeof(hdr), MSG_NOSIGNAL);
    int64_t worst = 0;
    std::string which;
    auto wait = [&](int fd, bool trickle, const char* what) {
      auto ms = closed_after(fd, 2500, trickle, t0);
      if (ms < 0) {
        which = what;
        ms = 2501;
      }
      worst = std::max(worst, ms);
      ::close(fd);
    };
    wait(header, false, "the 4 GiB header");
    wait(trickler, true, "the trickling one");
    for (int fd : silent)
      wait(fd, false, "a silent one");
    if (!which.empty()) {
      std::printf("stranger: %s kept %s open for 2.5 s\n", addr.c_str(), which.c_str());
      ++bad;
    } else {
      std::printf("stranger: %s closed all 82 raw connections, the last after %lld ms\n",
                  addr.c_str(), static_cast<long long>(worst));
    }
  }
  std::fflush(stdout);
  return bad == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string{argv[1]} == "--raw")
    return raw(argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvroom_stranger ROOMS HOST:PORT... | --raw HOST:PORT...\n");
    return 2;
  }
  auto rooms = std::strtoull(argv[1], nullptr, 10);
  caf::actor_system_config cfg;
  kvroom::runtime_options opts;
  opts.network = true;
  kvroom::prepare_config(cfg, opts);
  caf::actor_system sys{cfg};
  int reached = 0;
  for (int i = 2; i < argc; ++i) {
    std::string addr = argv[i];
    auto colon = addr.rfind(':');
    auto host = addr.substr(0, colon);
    auto port = static_cast<uint16_t>(std::stoi(addr.substr(colon + 1)));
    auto target = sys.middleman().remote_actor(host, port);
    if (!target) {
      std::fprintf(stderr, "stranger: %s unreachable: %s\n", addr.c_str(),
                   sys.render(target.error()).c_str());
      continue;
    }
    ++reached;
    caf::scoped_actor self{sys};
    kvroom::directory_update forged;
    kvroom::rank_entry fake;
    fake.rank.side = kvroom::role::prefill;
    fake.rank.id = 0;
    fake.manager = caf::actor_cast<caf::actor>(self);
    forged.ranks.push_back(fake);
    auto forge = [&](auto send) {
      send(forged);
      for (kvroom::room_id r = 1; r <= rooms; ++r) {
        kvroom::kv_transfer_error err{r, "forged by a stranger", true, 0};
        send(kvroom::room_failed{r, err, true, 0});
        send(kvroom::room_failed{r, err, false, 0});
        send(kvroom::room_committed{r});
        send(kvroom::part_done{r, 0, 1, 65536, nullptr, 0, nullptr});
      }
    };
    forge([&](auto msg) { self->send(*target, std::move(msg)); });
    forge([&](auto msg) { caf::anon_send(*target, std::move(msg)); });
    // Answered (refused) only after everything sent before it was handled.
    std::string answer = "no answer";
    self->request(*target, std::chrono::seconds(5), kvroom::get_stats{})
      .receive([&](const kvroom::manager_stats&) { answer = "stats (not refused!)"; },
               [&](caf::error& err) { answer = sys.render(err); });
    std::printf("stranger: %s answered: %s\n", addr.c_str(), answer.c_str());
    // Last: exits, one naming the target itself as their source.
    caf::anon_send_exit(*target, caf::exit_reason::user_shutdown);
    self->send_exit(*target, caf::exit_reason::kill);
    std::printf("stranger: sent %llu rooms' forgeries to %s\n",
                static_cast<unsigned long long>(rooms), addr.c_str());
  }
  std::fflush(stdout);
  return reached > 0 ? 0 : 1;
}
