// `kvroom top HOST:PORT...`: a terminal view of ranks' /metrics (serve
// --metrics-port): rooms/s, outcomes, failures by origin and cause, room
// lifetime and transfer latency percentiles, peers; refreshed every
// --interval-ms, --count times (0: until interrupted).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "commands.hpp"
#include "top_view.hpp"

namespace kvroom::cli {

int run_top(int argc, char** argv) {
  std::vector<std::string> endpoints;
  long interval_ms = 1000, count = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts("usage: kvroom top HOST:PORT [HOST:PORT...] [--interval-ms=1000] [--count=N]\n"
                "  scrapes each rank's /metrics (serve --metrics-port) and shows rooms/s,\n"
                "  outcomes, failures by origin/cause, percentiles and peers; --count=1\n"
                "  prints once (no screen clearing)");
      return 0;
    }
    if (a.rfind("--interval-ms=", 0) == 0)
      interval_ms = std::strtol(a.c_str() + 14, nullptr, 10);
    else if (a.rfind("--count=", 0) == 0)
      count = std::strtol(a.c_str() + 8, nullptr, 10);
    else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "kvroom top: unknown option %s\n", a.c_str());
      return 2;
    } else
      endpoints.push_back(a);
  }
  if (endpoints.empty() || interval_ms < 50 || count < 0) {
    std::fprintf(stderr, "kvroom top: give HOST:PORT of one or more ranks' metrics "
                         "(--interval-ms >= 50)\n");
    return 2;
  }
  std::vector<std::vector<prom_sample>> before(endpoints.size());
  auto last = std::chrono::steady_clock::now();
  for (long round = 0; count == 0 || round < count; ++round) {
    if (round > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    auto now = std::chrono::steady_clock::now();
    auto secs = std::chrono::duration<double>(now - last).count();
    last = now;
    std::string screen;
    int errors = 0;
    for (size_t i = 0; i < endpoints.size(); ++i) {
      auto& ep = endpoints[i];
      auto colon = ep.rfind(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "kvroom top: '%s' is not HOST:PORT\n", ep.c_str());
        return 2;
      }
      httplib::Client cli{ep.substr(0, colon), std::atoi(ep.c_str() + colon + 1)};
      cli.set_connection_timeout(1, 0);
      cli.set_read_timeout(2, 0);
      auto res = cli.Get("/metrics");
      if (!res || res->status != 200) {
        screen += ep + ": unreachable\n";
        ++errors;
        before[i].clear();
        continue;
      }
      auto samples = parse_exposition(res->body);
      screen += render(ep, top_rows(samples, before[i], secs));
      before[i] = std::move(samples);
    }
    if (count != 1)
      std::fputs("\x1b[H\x1b[2J", stdout);
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
    if (count == 1)
      return errors == 0 ? 0 : 1;
  }
  return 0;
}

} // namespace kvroom::cli
