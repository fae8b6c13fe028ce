// Benchmarks across processes: one `kvroom serve` process per rank on this
// host, started by this program and read back through their reports.
//
//   processes  rooms/s end to end with prefill and decode in different
//              processes (shm data plane, CAF middleman control plane)
//   detect     time from a peer's SIGKILL / SIGSTOP to every affected room
//              Failed on every survivor
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>

#include "kvroom/kit/harness.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <thread>

#include "benches.hpp"
#include "report.hpp"

namespace kvroom::bench {

namespace {

class process_config : public bench_config {
public:
  std::string kvroom;  ///< path of the `kvroom` command
  std::string concurrency = "1,16,64,256";
  std::string tps = "1,2";
  int64_t rooms = 3000;
  std::string signals = "sigkill,sigstop";
  int64_t trials = 3;
  int64_t latency_rooms = 1000;
  int64_t threads = 1;
  // serve's own default: each rank's scheduler loop sleeps 50 us when an
  // iteration changed nothing. At 10 us the two scheduler loops took the 2
  // cores from the actors doing the work (1P x 1D 23-26 K rooms/s against
  // 25-26 K; 2P x 2D 10.6-11.1 K against 11.5-11.7 K, same hour).
  int64_t idle_us = 50;
  bool insecure = false;
  bool caf_clock = false;
  process_config() {
    opt_group{custom_options_, "global"}
      .add(kvroom, "kvroom", "path of the kvroom command (default: next to this one)")
      .add(concurrency, "concurrency", "processes: rooms in flight, comma-separated")
      .add(tps, "tps", "processes: TP sizes (1: 1P x 1D, 2: 2P x 2D), comma-separated")
      .add(rooms, "rooms", "rooms per point (processes) or per trial (detect)")
      .add(signals, "signals", "detect: sigkill, sigstop or both")
      .add(trials, "trials", "detect: runs per signal")
      .add(latency_rooms, "latency-rooms", "processes: rooms of the one-at-a-time latency run (0: none)")
      .add(threads, "threads", "serve --threads (CAF scheduler threads per rank process)")
      .add(insecure, "insecure", "processes: ranks without a deployment secret (what "
                                 "membership costs: compare with a run with one)")
      .add(caf_clock, "caf-clock", "processes: serve --caf-clock (CAF's own clock: compare "
                                   "with a run without)")
      .add(idle_us, "idle-us", "serve --idle-us (its scheduler loop's sleep when idle; "
                               "default serve's own)");
  }
};

/// Round trips of one byte over a loopback TCP connection (TCP_NODELAY both
/// ways, an echo thread): the floor any cross-process control message pays.
std::vector<double> tcp_round_trips_us(int n) {
  std::vector<double> out;
  int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (ls < 0 || ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::listen(ls, 1) != 0 || ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (ls >= 0)
      ::close(ls);
    return out;
  }
  std::thread echo{[ls] {
    int fd = ::accept(ls, nullptr, nullptr);
    if (fd < 0)
      return;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char c;
    while (::recv(fd, &c, 1, 0) == 1 && ::send(fd, &c, 1, 0) == 1) {
    }
    ::close(fd);
  }};
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char c = 'k';
    for (int i = 0; i < n; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (::send(fd, &c, 1, 0) != 1 || ::recv(fd, &c, 1, 0) != 1)
        break;
      out.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                      .count());
    }
  }
  if (fd >= 0)
    ::close(fd);
  echo.join();
  ::close(ls);
  return out;
}

/// The `kvroom` command: as given, next to this program (installed), or in
/// the build tree's cli/ (built).


/// One deployment of 2 x tp serve processes on this host.
struct deployment {
  struct proc {
    std::string name;
    rank_ref rank;
    pid_t pid = -1;
    bool exited = false;
  };
  std::string exe;
  std::string dir;
  bool insecure = false;
  bool caf_clock = false;  ///< serve --caf-clock
  int tp = 1;
  int port = 0;
  std::vector<proc> procs;

  deployment(std::string kvroom, int tp_size) : exe(std::move(kvroom)), tp(tp_size) {
    dir = harness::make_temp_dir("kvroom-bench");
    port = harness::free_port(static_cast<uint64_t>(::getpid()) * 7919
                              + static_cast<uint64_t>(harness::wall_ms()));
    for (auto side : {role::prefill, role::decode})
      for (int t = 0; t < tp; ++t) {
        proc p;
        p.name = std::string{side == role::prefill ? "p" : "d"} + std::to_string(t);
        p.rank.side = side;
        p.rank.tp_rank = t;
        p.rank.tp_size = tp;
        p.rank.id = default_rank_id(side, 0, t, tp);
        procs.push_back(p);
      }
  }

  ~deployment() {
    kill_all();
  }

  std::string report_of(const proc& p) const {
    return dir + "/" + p.name + ".json";
  }

  /// Starts every rank with `extra` options; true once all are ready.
  bool start(const std::vector<std::string>& extra) {
    if (port == 0)
      return false; // no free loopback port for the registry
    // Once: every rank reads it (--insecure: none, to measure what
    // membership costs).
    auto secret = insecure ? std::string{"--insecure"} : harness::write_secret(dir);
    if (secret.empty())
      return false;
    for (auto& p : procs) {
      std::vector<std::string> a{"serve",
                                 "--role=" + to_string(p.rank.side),
                                 "--tp=" + std::to_string(p.rank.tp_rank),
                                 "--tp-size=" + std::to_string(tp),
                                 "--bootstrap-port=" + std::to_string(port),
                                 "--wait-file=" + dir + "/go",
                                 "--report=" + report_of(p),
                                 "--log-level=error",
                                 secret};
      a.insert(a.end(), extra.begin(), extra.end());
      if (caf_clock)
        a.push_back("--caf-clock");
      if (p.name == "p0")
        a.push_back("--publish-registry");
      p.pid = harness::spawn(exe, a, dir + "/" + p.name + ".log");
    }
    return harness::wait_until(
      [&] {
        for (auto& p : procs)
          if (harness::slurp(dir + "/" + p.name + ".log").find("\"ready\"") == std::string::npos)
            return false;
        return true;
      },
      std::chrono::seconds(30));
  }

  void go() {
    std::ofstream{dir + "/go"} << "go\n";
  }

  /// Waits for every process not killed to exit, within `limit`.
  bool wait_all(std::chrono::seconds limit) {
    return harness::wait_until(
      [&] {
        for (auto& p : procs) {
          if (p.exited || p.pid <= 0)
            continue;
          int status = 0;
          if (::waitpid(p.pid, &status, WNOHANG) == p.pid)
            p.exited = true;
          else
            return false;
        }
        return true;
      },
      limit);
  }

  void kill_all() {
    for (auto& p : procs)
      if (p.pid > 0 && !p.exited) {
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, nullptr, 0);
        harness::remove_segments(p.pid);
        p.exited = true;
      }
  }
};

} // namespace

std::string find_kvroom(const std::string& given) {
  if (!given.empty())
    return given;
  auto self = harness::self_exe();
  auto dir = self.substr(0, self.rfind('/'));
  for (auto& candidate : {dir + "/kvroom", dir + "/../cli/kvroom"})
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  return {};
}

int bench_processes(int argc, char** argv) {
  process_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto exe = find_kvroom(cfg.kvroom);
  if (exe.empty()) {
    std::fprintf(stderr, "kvroom command not found: pass --kvroom=PATH\n");
    return 2;
  }
  auto conc = parse_list(cfg.concurrency);
  auto tps = parse_list(cfg.tps);
  std::printf("kvroom-bench processes: one `kvroom serve` per rank (%s), prefill and decode in "
              "different processes on this host, tiny rooms (1 layer x K/V, one 256 B page, "
              "64 B aux), %lld rooms per point; control through CAF's middleman, data over shm\n",
              exe.c_str(), static_cast<long long>(cfg.rooms));
  std::printf("%-8s %12s %10s %10s %8s\n", "groups", "concurrency", "rooms/s", "succeeded",
              "failed");
  std::vector<std::string> rows;
  struct point {
    int64_t tp, concurrency;
    double rate;
  };
  std::vector<point> across;
  for (auto tp : tps) {
    for (auto c : conc) {
      deployment d{exe, static_cast<int>(tp)};
      d.insecure = cfg.insecure;
      d.caf_clock = cfg.caf_clock;
      if (d.dir.empty() || !d.start({"--rooms=" + std::to_string(cfg.rooms),
                                     "--concurrency=" + std::to_string(c), "--layers=1",
                                     "--page-bytes=256", "--pages-per-room=1",
                                     "--timeout-ms=10000",
                                     "--threads=" + std::to_string(cfg.threads),
                                     "--idle-us=" + std::to_string(cfg.idle_us)})) {
        std::printf("%lldP x %lldD: ranks did not start (see %s)\n", static_cast<long long>(tp),
                    static_cast<long long>(tp), d.dir.c_str());
        return 1;
      }
      d.go();
      if (!d.wait_all(std::chrono::seconds(120))) {
        std::printf("%lldP x %lldD at %lld: did not finish in 120 s (see %s)\n",
                    static_cast<long long>(tp), static_cast<long long>(tp),
                    static_cast<long long>(c), d.dir.c_str());
        return 1;
      }
      int64_t first = INT64_MAX, last = 0;
      uint64_t ok = 0, failed = 0;
      std::vector<int64_t> done_at; // decode tp0's successes, ms
      int64_t first_done_at = INT64_MAX;
      // Open to conclusion on each side's TP rank 0: with the rooms in
      // flight, what throughput is made of (rooms/s = in flight / latency).
      std::vector<double> prefill_us, decode_us;
      for (auto& p : d.procs) {
        for (auto& [room, r] : harness::read_report(d.report_of(p))) {
          first = std::min(first, r.opened_ms);
          last = std::max(last, r.at_ms);
          if (p.name == "p0")
            prefill_us.push_back(static_cast<double>(r.latency_us));
          if (p.name == "d0")
            decode_us.push_back(static_cast<double>(r.latency_us));
          // A room counts once: on decode tp0, which verified its bytes.
          if (p.name == "d0") {
            bool good = r.state == kv_poll::success && r.data_error.empty();
            (good ? ok : failed) += 1;
            if (good)
              done_at.push_back(r.at_ms);
            first_done_at = std::min(first_done_at, r.at_ms);
          }
        }
      }
      auto secs = std::max<double>(1, static_cast<double>(last - first)) / 1000.0;
      auto whole_rate = static_cast<double>(ok) / secs;
      // Rooms/s at `c` in flight is a steady state, as the in-process
      // baseline measures it after a warm-up: from the c-th success to the
      // (n - c)-th, leaving out the pipeline's fill with the first link's
      // dial and handshake (35-60 ms here, printed apart as first_done_ms;
      // 3,000 rooms at 64 in flight last ~90 ms) and the drain at the end.
      // The whole run's rate is kept beside it.
      auto rate = whole_rate;
      bool steady = false;
      std::sort(done_at.begin(), done_at.end());
      auto n = done_at.size(), edge = static_cast<size_t>(c);
      if (n > 4 * edge && done_at[n - edge] - done_at[edge] >= 20) {
        rate = static_cast<double>(n - 2 * edge)
               / (static_cast<double>(done_at[n - edge] - done_at[edge]) / 1000.0);
        steady = true;
      }
      // The first room waits for the first link (its dial, the higher id's
      // yield, the handshake): a short run counts it in its rate, and a
      // regression of it (the sweep that once served it, 2 s) shows here.
      auto first_done = first_done_at == INT64_MAX ? 0 : first_done_at - first;
      char groups[32];
      std::snprintf(groups, sizeof(groups), "%lldPx%lldD", static_cast<long long>(tp),
                    static_cast<long long>(tp));
      across.push_back({tp, c, rate});
      std::printf("%-8s %12lld %10.0f %10llu %8llu   room p50 prefill %.0f us, decode %.0f us; "
                  "first room done %lld ms after the first open; whole run %.0f rooms/s%s\n",
                  groups, static_cast<long long>(c), rate, static_cast<unsigned long long>(ok),
                  static_cast<unsigned long long>(failed), percentile(prefill_us, 50),
                  percentile(decode_us, 50), static_cast<long long>(first_done), whole_rate,
                  steady ? "" : " (too few rooms for a steady state: rooms/s is the whole run's)");
      std::fflush(stdout);
      rows.push_back(json_object{}
                       .num("tp", static_cast<double>(tp))
                       .num("concurrency", static_cast<double>(c))
                       .num("rooms_per_s", rate)
                       .num("rooms_per_s_whole_run", whole_rate)
                       .raw("steady_state", steady ? "true" : "false")
                       .num("succeeded", static_cast<double>(ok))
                       .num("failed", static_cast<double>(failed))
                       .num("prefill_latency_us_p50", percentile(prefill_us, 50))
                       .num("decode_latency_us_p50", percentile(decode_us, 50))
                       .num("first_done_ms", static_cast<double>(first_done))
                       .dump(6));
      std::filesystem::remove_all(d.dir);
    }
  }
  // One tiny room at a time across two processes, against the loopback TCP
  // round trip of the same run: what a room costs beyond the wire.
  json_object lat;
  double lat_p50 = 0, lat_rtt = 0;
  if (cfg.latency_rooms > 0) {
    deployment d{exe, 1};
    d.insecure = cfg.insecure;
    d.caf_clock = cfg.caf_clock;
    if (d.dir.empty() || !d.start({"--rooms=" + std::to_string(cfg.latency_rooms),
                                   "--concurrency=1", "--layers=1", "--page-bytes=256",
                                   "--pages-per-room=1", "--timeout-ms=10000",
                                   "--threads=" + std::to_string(cfg.threads), "--idle-us=0"})) {
      std::printf("latency: ranks did not start (see %s)\n", d.dir.c_str());
      return 1;
    }
    d.go();
    if (!d.wait_all(std::chrono::seconds(120))) {
      std::printf("latency: did not finish in 120 s (see %s)\n", d.dir.c_str());
      return 1;
    }
    std::vector<double> us;
    for (auto& [room, r] : harness::read_report(d.report_of(d.procs[1])))
      if (r.state == kv_poll::success)
        us.push_back(static_cast<double>(r.latency_us));
    std::filesystem::remove_all(d.dir);
    auto rtt = tcp_round_trips_us(10'000);
    auto p50 = percentile(us, 50), p99 = percentile(us, 99);
    auto r50 = percentile(rtt, 50), r99 = percentile(rtt, 99);
    std::printf("latency, one tiny room at a time (decode: open to Success), %zu rooms: p50 %.0f us, "
                "p99 %.0f us; loopback TCP round trip, same run: p50 %.1f us, p99 %.1f us "
                "(room p50 = %.1f round trips)\n",
                us.size(), p50, p99, r50, r99, r50 > 0 ? p50 / r50 : 0.0);
    lat_p50 = p50;
    lat_rtt = r50;
    lat.num("rooms", static_cast<double>(us.size()))
      .num("room_p50_us", p50)
      .num("room_p99_us", p99)
      .num("tcp_rtt_p50_us", r50)
      .num("tcp_rtt_p99_us", r99);
    // What one control message and its answer cost between two processes
    // through CAF's middleman alone, configured as the ranks are: a room
    // crosses processes at least once each way, so this is its floor.
    std::string why;
    auto caf = caf_round_trips_us(cfg.threads, cfg.caf_clock, cfg.latency_rooms, why);
    if (caf.empty()) {
      std::printf("CAF middleman round trip: not measured (%s)\n", why.c_str());
    } else {
      auto c50 = percentile(caf, 50), c99 = percentile(caf, 99);
      std::printf("CAF middleman round trip between an actor in each process, configured as "
                  "the ranks, same run, %zu round trips: p50 %.1f us, p99 %.1f us (%.1f loopback "
                  "round trips; room p50 = %.2f CAF round trips)\n",
                  caf.size(), c50, c99, r50 > 0 ? c50 / r50 : 0.0, c50 > 0 ? p50 / c50 : 0.0);
      lat.num("caf_rtt_p50_us", c50).num("caf_rtt_p99_us", c99);
    }
  }
  // The goals, each against a baseline of this run: the same shape in one
  // process, and the loopback round trip.
  std::vector<goal> goals;
  {
    caf::actor_system sys{cfg};
    for (auto& p : across) {
      // The goals name 64 in flight; the other points are printed above
      // (at 1 in flight a room's rate is its latency, which has its own goal).
      if (p.concurrency != 64)
        continue;
      auto local = in_process_rooms_per_s(sys, static_cast<int>(p.tp), p.concurrency, 1.5);
      char what[128];
      std::snprintf(what, sizeof(what), "%lldP x %lldD across processes / in one process, %lld in flight",
                    static_cast<long long>(p.tp), static_cast<long long>(p.tp),
                    static_cast<long long>(p.concurrency));
      goals.push_back({what, p.rate, local, 0.5});
    }
  }
  if (lat_p50 > 0)
    goals.push_back({"one tiny room across processes p50 / loopback TCP round trip p50", lat_p50,
                     lat_rtt, 3.0, true});
  auto goals_json = report_goals(goals);
  auto out = json_object{}
               .str("bench", "processes")
               .raw("points", json_array(rows))
               .raw("latency", lat.dump(4))
               .raw("goals", goals_json)
               .dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

int bench_detect(int argc, char** argv) {
  process_config cfg;
  cfg.rooms = 200;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto exe = find_kvroom(cfg.kvroom);
  if (exe.empty()) {
    std::fprintf(stderr, "kvroom command not found: pass --kvroom=PATH\n");
    return 2;
  }
  constexpr int tp = 2;
  std::printf("kvroom-bench detect: 2P x 2D, one `kvroom serve` per rank; %lld rooms per trial "
              "opened over ~2 s, 16 in flight (decode admits each 100 ms after it is ready); decode tp1 is signalled 700 ms in; heartbeats "
              "100 ms, connection timeout 1 s, room timeouts 10 s (so failures come from "
              "detection, not timeouts); %lld trials per signal\n",
              static_cast<long long>(cfg.rooms), static_cast<long long>(cfg.trials));
  std::printf("%-8s %8s %12s %12s %12s %14s\n", "signal", "rooms", "p50 ms", "p99 ms", "max ms",
              "after-loss ms");
  std::vector<std::string> rows;
  for (auto& sig : split_list(cfg.signals)) {
    if (sig != "sigkill" && sig != "sigstop") {
      std::fprintf(stderr, "unknown signal '%s'\n", sig.c_str());
      return 2;
    }
    // Per room in flight at the signal: until it is Failed on every survivor.
    std::vector<double> in_flight;
    // Per room opened after the loss: from its open to Failed everywhere.
    std::vector<double> after;
    for (int64_t t = 0; t < cfg.trials; ++t) {
      deployment d{exe, tp};
      auto pace = std::max<int64_t>(1, 2'000'000 / std::max<int64_t>(1, cfg.rooms));
      // Decode admits each room 100 ms after it is ready, so 16 rooms are
      // in flight on every rank when the signal arrives.
      if (d.dir.empty() || !d.start({"--rooms=" + std::to_string(cfg.rooms), "--concurrency=16",
                                     "--pace-us=" + std::to_string(pace), "--timeout-ms=10000",
                                     "--layers=2", "--pages-per-room=2", "--init-delay-ms=100"})) {
        std::printf("detect: ranks did not start (see %s)\n", d.dir.c_str());
        return 1;
      }
      d.go();
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
      auto& victim = d.procs[static_cast<size_t>(tp + 1)];  // decode tp1
      ::kill(victim.pid, sig == "sigkill" ? SIGKILL : SIGSTOP);
      auto hit = harness::wall_ms();
      if (sig == "sigstop") {
        // Frozen past the connection timeout, then gone.
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        ::kill(victim.pid, SIGKILL);
      }
      ::waitpid(victim.pid, nullptr, 0);
      victim.exited = true;
      // A killed process cannot unlink its shared-memory segments.
      harness::remove_segments(victim.pid);
      if (!d.wait_all(std::chrono::seconds(60))) {
        std::printf("detect: survivors did not finish (see %s)\n", d.dir.c_str());
        return 1;
      }
      // room -> (latest Failed among survivors, opened earliest, count)
      struct seen {
        int64_t opened = INT64_MAX;
        int64_t failed_at = 0;
        int survivors = 0;
      };
      std::map<room_id, seen> rooms;
      for (auto& p : d.procs) {
        if (&p == &victim)
          continue;
        for (auto& [room, r] : harness::read_report(d.report_of(p))) {
          if (r.state != kv_poll::failed || !r.error || r.error->origin_rank != victim.rank.id)
            continue;
          auto& s = rooms[room];
          s.opened = std::min(s.opened, r.opened_ms);
          s.failed_at = std::max(s.failed_at, r.at_ms);
          ++s.survivors;
        }
      }
      for (auto& [room, s] : rooms) {
        if (s.survivors != 2 * tp - 1)
          continue;  // failed on some survivors only: not "every survivor"
        if (s.opened <= hit)
          in_flight.push_back(static_cast<double>(s.failed_at - hit));
        else
          after.push_back(static_cast<double>(s.failed_at - s.opened));
      }
      std::filesystem::remove_all(d.dir);
    }
    auto p50 = percentile(in_flight, 50), p99 = percentile(in_flight, 99),
         mx = percentile(in_flight, 100), after_p50 = percentile(after, 50);
    std::printf("%-8s %8zu %12.0f %12.0f %12.0f %14.0f\n", sig.c_str(), in_flight.size(), p50, p99,
                mx, after_p50);
    std::fflush(stdout);
    rows.push_back(json_object{}
                     .str("signal", sig)
                     .num("rooms_in_flight", static_cast<double>(in_flight.size()))
                     .num("detect_ms_p50", p50)
                     .num("detect_ms_p99", p99)
                     .num("detect_ms_max", mx)
                     .num("rooms_after_loss", static_cast<double>(after.size()))
                     .num("after_loss_ms_p50", after_p50)
                     .dump(6));
  }
  auto out = json_object{}.str("bench", "detect").raw("signals", json_array(rows)).dump();
  std::printf("%s\n", out.c_str());
  return cfg.json.empty() || write_file(cfg.json, out) ? 0 : 1;
}

} // namespace kvroom::bench
