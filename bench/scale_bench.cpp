// kvroom-bench scale: a deployment of many rank processes on this host,
// started all at once, once with the built-in registry (its own process)
// and once with the directory on etcd (a member this program starts, or
// --etcd=URL). Per directory: the time until every rank is ready, rooms/s,
// each rank's memory and links, and the time until every survivor knows a
// SIGKILLed rank is gone.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <thread>

#include <httplib.h>

#include "kvroom/kit/harness.hpp"

#include "benches.hpp"
#include "report.hpp"

namespace kvroom::bench {

namespace {

class scale_config : public bench_config {
public:
  std::string kvroom;
  std::string directories = "registry,etcd";
  std::string etcd;
  int64_t ranks = 32;
  int64_t rooms = 50;
  int64_t lease_ttl_ms = 5000;
  scale_config() {
    tp = 2;
    opt_group{custom_options_, "global"}
      .add(kvroom, "kvroom", "path of the kvroom command (default: next to this one)")
      .add(directories, "directories", "registry, etcd or both (comma-separated)")
      .add(etcd, "etcd", "etcd://host:port of a running etcd (default: start a member here)")
      .add(ranks, "ranks", "rank processes (a multiple of 2 x --tp: DP groups of prefill and decode)")
      .add(rooms, "rooms", "rooms per DP group")
      .add(lease_ttl_ms, "lease-ttl-ms", "etcd: the lease TTL of every rank process");
  }
};

struct rank_proc {
  std::string name;
  pid_t pid = -1;
  std::string metrics;  ///< host:port
};

struct sample {
  double usable = 0, listed = 0, lost = 0, success = 0, failed = 0;
};


std::string field(const std::string& text, const std::string& key) {
  auto at = text.find("\"" + key + "\": \"");
  if (at == std::string::npos)
    return {};
  at += key.size() + 5;
  return text.substr(at, text.find('"', at) - at);
}

/// The sum of every sample of `family` with `label` in its labels.
double metric(const std::string& text, const std::string& family, const std::string& label) {
  double sum = 0;
  size_t at = 0;
  while ((at = text.find("\n" + family + "{", at)) != std::string::npos) {
    auto eol = text.find('\n', at + 1);
    auto line = text.substr(at + 1, eol - at - 1);
    at = eol;
    if (line.find(label) != std::string::npos)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

bool scrape(const std::string& where, sample& out) {
  auto colon = where.rfind(':');
  if (colon == std::string::npos)
    return false;
  httplib::Client cli{where.substr(0, colon), std::stoi(where.substr(colon + 1))};
  cli.set_connection_timeout(std::chrono::seconds(2));
  cli.set_read_timeout(std::chrono::seconds(2));
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200)
    return false;
  auto text = "\n" + res->body;
  out.usable = metric(text, "kvroom_peers", "state=\"usable\"");
  out.listed = metric(text, "kvroom_peers", "state=\"listed\"");
  out.lost = metric(text, "kvroom_peers", "state=\"lost\"");
  out.success = metric(text, "kvroom_rooms_total", "state=\"success\"");
  out.failed = metric(text, "kvroom_rooms_total", "state=\"failed\"");
  return true;
}

double rss_mib(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

void stop(pid_t pid) {
  if (pid <= 0)
    return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  harness::remove_segments(pid);
}

/// An etcd member on loopback for the run, or none (with why).
struct etcd_member {
  pid_t pid = -1;
  std::string url;
  std::string why;

  etcd_member(const std::string& dir, int port) {
    std::string exe;
    for (auto* d : {"/usr/bin/", "/usr/local/bin/", "/usr/sbin/"})
      if (::access((std::string{d} + "etcd").c_str(), X_OK) == 0) {
        exe = std::string{d} + "etcd";
        break;
      }
    if (exe.empty()) {
      why = "etcd is not installed (Debian: etcd-server)";
      return;
    }
    auto client = "http://127.0.0.1:" + std::to_string(port);
    auto peer = "http://127.0.0.1:" + std::to_string(port + 1);
    pid = harness::spawn(exe, {"--name", "bench", "--data-dir", dir + "/etcd.data",
                                  "--listen-client-urls", client, "--advertise-client-urls", client,
                                  "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                  "--initial-cluster", "bench=" + peer},
                         dir + "/etcd.log");
    httplib::Client cli{"127.0.0.1", port};
    bool up = harness::wait_until(
      [&] {
        auto res = cli.Get("/health");
        return res && res->status == 200 && res->body.find("true") != std::string::npos;
      },
      std::chrono::seconds(20));
    if (!up) {
      why = "the etcd member did not become healthy (" + dir + "/etcd.log)";
      return;
    }
    url = "etcd://127.0.0.1:" + std::to_string(port);
  }

  ~etcd_member() {
    stop(pid);
  }
};

std::string run_one(const scale_config& cfg, const std::string& exe, const std::string& which) {
  json_object out;
  out.str("directory", which);
  auto dir = harness::make_temp_dir("kvroom-scale");
  auto secret = harness::write_secret(dir);
  // Below the ephemeral range (32768 up): no outgoing connection holds it.
  auto port = 20000 + static_cast<int>((static_cast<uint64_t>(::getpid()) * 7919
                                        + static_cast<uint64_t>(harness::wall_ms())) % 12000);
  std::vector<std::string> directory;
  std::unique_ptr<etcd_member> member;
  pid_t registry = -1;
  if (which == "etcd") {
    std::string url = cfg.etcd;
    if (url.empty()) {
      member = std::make_unique<etcd_member>(dir, port + 10);
      if (member->url.empty())
        return out.str("skipped", member->why).dump(-1);
      url = member->url;
    }
    directory = {"--directory=" + url, "--directory-prefix=/kvroom/scale" + std::to_string(port),
                 "--lease-ttl-ms=" + std::to_string(cfg.lease_ttl_ms)};
  } else {
    registry = harness::spawn(exe, {"registry", secret, "--bootstrap-port=" + std::to_string(port),
                                    "--log-level=" + cfg.log_level},
                              dir + "/registry.log");
    if (!harness::wait_until(
          [&] { return harness::slurp(dir + "/registry.log").find("\"ready\"") != std::string::npos; },
          std::chrono::seconds(20)))
      return out.str("skipped", "the registry did not start").dump(-1);
    directory = {"--bootstrap-port=" + std::to_string(port)};
  }
  auto tp = static_cast<int>(cfg.tp);
  auto groups = static_cast<int>(cfg.ranks) / (2 * tp);
  std::vector<rank_proc> procs;
  auto t0 = harness::wall_ms();
  for (int dp = 0; dp < groups; ++dp)
    for (auto side : {"prefill", "decode"})
      for (int t = 0; t < tp; ++t) {
        rank_proc p;
        p.name = std::string{side[0]} + std::to_string(dp) + "_" + std::to_string(t);
        std::vector<std::string> a{"serve", secret, "--role=" + std::string{side},
                                   "--dp=" + std::to_string(dp), "--tp=" + std::to_string(t),
                                   "--tp-size=" + std::to_string(tp), "--threads=1",
                                   "--layers=1", "--pages-per-room=2", "--concurrency=4",
                                   "--rooms=" + std::to_string(cfg.rooms),
                                   "--first-room=" + std::to_string(dp * 1'000'000 + 1),
                                   "--timeout-ms=2000", "--hold-ms=600000", "--metrics-port=0",
                                   "--wait-file=" + dir + "/go", "--log-level=" + cfg.log_level};
        a.insert(a.end(), directory.begin(), directory.end());
        p.pid = harness::spawn(exe, a, dir + "/" + p.name + ".log");
        procs.push_back(p);
      }
  auto log_of = [&](const rank_proc& p) { return harness::slurp(dir + "/" + p.name + ".log"); };
  bool ready = harness::wait_until(
    [&] {
      return std::all_of(procs.begin(), procs.end(), [&](const rank_proc& p) {
        return log_of(p).find("\"ready\"") != std::string::npos;
      });
    },
    std::chrono::seconds(120));
  auto ready_ms = harness::wall_ms() - t0;
  auto finish = [&] {
    for (auto& p : procs)
      stop(p.pid);
    stop(registry);
  };
  if (!ready) {
    finish();
    return out.str("error", "not every rank became ready within 120 s (" + dir + ")").dump(-1);
  }
  for (auto& p : procs)
    p.metrics = field(log_of(p), "metrics");
  out.num("ranks", static_cast<double>(procs.size())).num("ready_ms", static_cast<double>(ready_ms));
  std::ofstream{dir + "/go"} << "go\n";
  auto t_go = harness::wall_ms();
  harness::wait_until(
    [&] {
      return std::all_of(procs.begin(), procs.end(), [&](const rank_proc& p) {
        return log_of(p).find("batch_done") != std::string::npos;
      });
    },
    std::chrono::seconds(300));
  auto rooms_ms = std::max<int64_t>(1, harness::wall_ms() - t_go);
  std::vector<sample> before(procs.size());
  double success = 0, failed = 0;
  std::vector<double> rss, links;
  for (size_t i = 0; i < procs.size(); ++i) {
    scrape(procs[i].metrics, before[i]);
    rss.push_back(rss_mib(procs[i].pid));
    links.push_back(before[i].usable);
    if (procs[i].name[0] == 'd' && procs[i].name.back() == '0') {
      success += before[i].success;
      failed += before[i].failed;
    }
  }
  out.num("rooms", groups * static_cast<double>(cfg.rooms))
    .num("rooms_ok", success)
    .num("rooms_failed", failed)
    .num("rooms_per_s", success * 1000.0 / static_cast<double>(rooms_ms))
    .num("rss_mib_mean", std::accumulate(rss.begin(), rss.end(), 0.0) / static_cast<double>(rss.size()))
    .num("rss_mib_max", *std::max_element(rss.begin(), rss.end()))
    .num("links_mean", std::accumulate(links.begin(), links.end(), 0.0) / static_cast<double>(links.size()))
    .num("links_max", *std::max_element(links.begin(), links.end()))
    .num("listed_mean", [&] {
      double s = 0;
      for (auto& b : before)
        s += b.listed;
      return s / static_cast<double>(before.size());
    }())
    .num("known_peers_min", [&] {
      // Every rank should know every other (linked or listed).
      double m = 1e9;
      for (auto& b : before)
        m = std::min(m, b.usable + b.listed);
      return m;
    }());
  // The last group's last prefill rank goes; every other rank must stop
  // counting it (linked or listed), whether it ever linked to it or not.
  auto victim = static_cast<size_t>((groups - 1) * 2 * tp + tp - 1);
  stop(procs[victim].pid);
  auto t_kill = harness::wall_ms();
  std::vector<int64_t> knew(procs.size(), -1);
  harness::wait_until(
    [&] {
      bool all = true;
      for (size_t i = 0; i < procs.size(); ++i) {
        if (i == victim || knew[i] >= 0)
          continue;
        sample now;
        // Known gone: counted lost, or no longer linked or listed. The lost
        // count alone tells it too when the sample before the kill was short
        // of a peer that was listed since (a count that drops by one and
        // rises by one reads the same).
        if (scrape(procs[i].metrics, now)
            && (now.lost > before[i].lost
                || now.usable + now.listed < before[i].usable + before[i].listed))
          knew[i] = harness::wall_ms() - t_kill;
        else
          all = false;
      }
      return all;
    },
    std::chrono::seconds(30));
  std::vector<double> known;
  size_t unaware = 0;
  for (size_t i = 0; i < procs.size(); ++i)
    if (i != victim)
      knew[i] >= 0 ? known.push_back(static_cast<double>(knew[i])) : static_cast<void>(++unaware);
  out.str("killed", procs[victim].name)
    .num("known_gone_ms_max", known.empty() ? -1 : *std::max_element(known.begin(), known.end()))
    .num("known_gone_ms_median", known.empty() ? -1 : percentile(known, 50))
    .num("survivors_unaware_after_30s", static_cast<double>(unaware));
  finish();
  return out.dump(-1);
}

} // namespace

int bench_scale(int argc, char** argv) {
  scale_config cfg;
  if (auto rc = parse(cfg, argc, argv); rc >= 0)
    return rc;
  auto exe = find_kvroom(cfg.kvroom);
  if (exe.empty()) {
    std::fprintf(stderr, "kvroom-bench scale: the kvroom command was not found (--kvroom)\n");
    return 1;
  }
  if (cfg.tp < 1 || cfg.ranks < 2 * cfg.tp || cfg.ranks % (2 * cfg.tp) != 0 || cfg.rooms < 1) {
    std::fprintf(stderr, "kvroom-bench scale: --ranks must be a multiple of 2 x --tp\n");
    return 1;
  }
  std::vector<std::string> runs;
  for (auto& which : split_list(cfg.directories)) {
    if (which != "registry" && which != "etcd") {
      std::fprintf(stderr, "kvroom-bench scale: unknown directory '%s'\n", which.c_str());
      return 1;
    }
    auto one = run_one(cfg, exe, which);
    std::printf("%s\n", one.c_str());
    std::fflush(stdout);
    runs.push_back(one);
  }
  json_object doc;
  doc.str("bench", "scale").num("tp", static_cast<double>(cfg.tp)).raw("runs", json_array(runs));
  if (!cfg.json.empty() && !write_file(cfg.json, doc.dump()))
    return 1;
  return 0;
}

} // namespace kvroom::bench
