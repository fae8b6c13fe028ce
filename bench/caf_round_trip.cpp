// The floor of a control message across processes: one request and its
// reply between an actor in each of two processes through CAF's middleman,
// configured as `kvroom serve` configures its ranks. `kvroom-bench
// processes` compares one tiny room with it, beside the loopback TCP round
// trip.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/api/runtime.hpp"
#include "kvroom/kit/harness.hpp"

#include "benches.hpp"

namespace kvroom::bench {

namespace {

/// serve's scheduler and middleman: `threads` CAF threads, the quiet clock
/// unless `caf_clock` (serve --threads, --caf-clock).
void prepare_like_serve(caf::actor_system_config& cfg, int64_t threads, bool caf_clock) {
  runtime_options opts;
  opts.network = true;
  opts.max_threads = static_cast<size_t>(std::max<int64_t>(1, threads));
  opts.quiet_clock = !caf_clock;
  opts.log_level = "error";
  prepare_config(cfg, opts);
}

class echo_config : public caf::actor_system_config {
public:
  int64_t threads = 1;
  bool caf_clock = false;
  std::string port_file;
  echo_config() {
    opt_group{custom_options_, "global"}
      .add(threads, "threads", "CAF scheduler threads")
      .add(caf_clock, "caf-clock", "CAF's own clock instead of the quiet one")
      .add(port_file, "port-file", "where to write the published port");
  }
};

} // namespace

int bench_caf_echo(int argc, char** argv) {
  echo_config cfg;
  if (auto err = cfg.parse(argc, argv)) {
    std::fprintf(stderr, "bad options: %s\n", caf::to_string(err).c_str());
    return 2;
  }
  if (cfg.port_file.empty()) {
    std::fprintf(stderr, "caf-echo needs --port-file\n");
    return 2;
  }
  prepare_like_serve(cfg, cfg.threads, cfg.caf_clock);
  caf::actor_system sys{cfg};
  auto echo = sys.spawn([](caf::event_based_actor*) -> caf::behavior {
    return {[](int64_t x) { return x; }};
  });
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1");
  if (!port) {
    std::fprintf(stderr, "caf-echo: publish: %s\n", caf::to_string(port.error()).c_str());
    return 1;
  }
  {
    // Written whole, then renamed: the parent never reads half a number.
    std::ofstream{cfg.port_file + ".tmp"} << *port << "\n";
    std::filesystem::rename(cfg.port_file + ".tmp", cfg.port_file);
  }
  // Until the parent ends us, or is gone (we were handed to another).
  auto parent = ::getppid();
  while (::getppid() == parent)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

std::vector<double> caf_round_trips_us(int64_t threads, bool caf_clock, int n, std::string& why) {
  std::vector<double> out;
  auto dir = harness::make_temp_dir("kvroom-caf-rtt");
  auto exe = harness::self_exe();
  if (dir.empty() || exe.empty()) {
    why = "no temporary directory or no path of this program";
    return out;
  }
  auto port_file = dir + "/port";
  std::vector<std::string> args{"caf-echo", "--threads=" + std::to_string(threads),
                                "--port-file=" + port_file};
  if (caf_clock)
    args.push_back("--caf-clock");
  auto pid = harness::spawn(exe, args, dir + "/echo.log");
  auto finish = [&] {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
  };
  if (pid <= 0
      || !harness::wait_until([&] { return std::filesystem::exists(port_file); },
                              std::chrono::seconds(10))) {
    why = "the echo process did not publish (" + harness::slurp(dir + "/echo.log") + ")";
    finish();
    return out;
  }
  auto text = harness::slurp(port_file);
  auto parsed = std::strtoul(text.c_str(), nullptr, 10);
  if (parsed == 0 || parsed > 65535) {
    why = "the echo process wrote no port ('" + text + "')";
    finish();
    return out;
  }
  auto port = static_cast<uint16_t>(parsed);
  std::string failed;
  {
    caf::actor_system_config cfg;
    prepare_like_serve(cfg, threads, caf_clock);
    caf::actor_system sys{cfg};
    auto remote = sys.middleman().remote_actor("127.0.0.1", port);
    if (!remote) {
      failed = "remote_actor: " + caf::to_string(remote.error());
    } else {
      // Actor to actor, as rooms and managers talk: each reply has the
      // pinging actor send itself the next turn, and only the request and
      // its reply are timed. The system's end waits for it to quit (a
      // request unanswered in 5 s ends it too).
      sys.spawn([&out, &failed, n, echo = *remote](caf::event_based_actor* self) -> caf::behavior {
        auto t0 = std::make_shared<std::chrono::steady_clock::time_point>();
        self->send(self, caf::atom("next"));
        return {[=, &out, &failed](caf::atom_value) {
          if (static_cast<int>(out.size()) == n) {
            self->quit();
            return;
          }
          *t0 = std::chrono::steady_clock::now();
          self->request(echo, std::chrono::seconds(5), int64_t{1})
            .then(
              [=, &out](int64_t) {
                out.push_back(std::chrono::duration<double, std::micro>(
                                std::chrono::steady_clock::now() - *t0)
                                .count());
                self->send(self, caf::atom("next"));
              },
              [=, &failed](caf::error& err) {
                failed = "a round trip failed: " + caf::to_string(err);
                self->quit();
              });
        }};
      });
    }
  }
  if (!failed.empty()) {
    why = failed;
    out.clear();
  }
  finish();
  return out;
}

} // namespace kvroom::bench
