// A client without the deployment secret that speaks CAF's wire protocol:
// it connects to rank control endpoints (host:port ...) and sends what a
// member would send to fail, commit or reroute rooms 1..N: room_failed,
// room_committed, part_done and a forged directory, each once from an actor
// and once anonymously (CAF 0.17 delivers a remote anonymous message with no
// sender at all, so "no sender" must not read as "from this process"). A
// rank must drop all of it (and count it). Exit 0 once everything is sent, 1 when no endpoint
// could be reached.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/kvroom.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kvroom_stranger ROOMS HOST:PORT...\n");
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
