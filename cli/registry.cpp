// `kvroom registry`: the bootstrap registry as a process of its own, the role
// SGLang's bootstrap server and Mooncake's metadata service play. It is a
// directory only (ranks link to each other directly), so it can be stopped
// and restarted: ranks keep their cached directory, reconnect, and register
// again, and the registry rebuilds its table from them.
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <unistd.h>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/kit/harness.hpp"
#include "kvroom/kvroom.hpp"

#include "command_line.hpp"
#include "commands.hpp"
#include "membership_options.hpp"

namespace kvroom::cli {

namespace {

volatile std::sig_atomic_t stop_requested = 0;

void on_signal(int) {
  stop_requested = 1;
}

class registry_config : public caf::actor_system_config {
public:
  std::string bootstrap_host = "127.0.0.1";
  int64_t bootstrap_port = 0;
  int64_t max_ranks = 4096;
  join_options join;
  std::string log_level = "info";
  std::string log_format = "text";
  int64_t chaos_drop_rank = -1;
  int64_t chaos_drop_ms = 0;

  registry_config() {
    opt_group group{custom_options_, "global"};
    join.add_to(group);
    group.add(bootstrap_host, "bootstrap-host", "IPv4 address to listen on (not all interfaces)")
      .add(bootstrap_port, "bootstrap-port", "port to listen on")
      .add(max_ranks, "max-ranks", "most ranks that may register")
      .add(log_level, "log-level", "trace, debug, info, warn, error, off")
      .add(log_format, "log-format", "text, or json: one JSON object per line")
      .add(chaos_drop_rank, "chaos-drop-rank", "tests: drop this rank id as a stalled registry "
                                               "does (the others hear it lost; its connection "
                                               "closes and it registers again)")
      .add(chaos_drop_ms, "chaos-drop-ms", "tests: when, after ready");
  }
};

int bad(const std::string& what) {
  return usage_error("registry", what);
}

} // namespace

int run_registry(int argc, char** argv) {
  registry_config cfg;
  if (auto done = parse_command_line(cfg, argc, argv, "registry"))
    return *done;
  if (cfg.bootstrap_port <= 0 || cfg.bootstrap_port > 65535)
    return bad("--bootstrap-port is required");
  if (cfg.max_ranks < 1 || cfg.max_ranks > 1'000'000)
    return bad("--max-ranks must be in [1, 1000000]");
  runtime_options opts;
  if (auto err = cfg.join.apply("registry", opts))
    return bad(describe(err));
  opts.network = true;
  opts.log_level = cfg.log_level;
  if (!set_log_format(cfg.log_format))
    return bad("--log-format must be text or json");
  if (auto err = check_options(opts))
    return bad(describe(err));
  prepare_config(cfg, opts);
  caf::actor_system sys{cfg};
  {
    runtime rt{sys, static_cast<uint32_t>(cfg.max_ranks), std::move(opts.secret)};
    auto port = rt.publish_registry(static_cast<uint16_t>(cfg.bootstrap_port),
                                    cfg.bootstrap_host);
    if (!port)
      return bad(describe(port.error()));
    std::printf("%s\n", harness::event_line(
                           {{"event", "ready"},
                            {"role", "registry"},
                            {"address", cfg.bootstrap_host + ":" + std::to_string(*port)},
                            {"pid", int64_t{::getpid()}}})
                           .c_str());
    std::fflush(stdout);
    if (cfg.chaos_drop_rank >= 0)
      rt.chaos_drop_rank(static_cast<rank_id>(cfg.chaos_drop_rank),
                         std::chrono::milliseconds(cfg.chaos_drop_ms));
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    while (!stop_requested)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

} // namespace kvroom::cli
