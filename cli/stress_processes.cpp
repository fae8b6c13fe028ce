// `kvroom stress --processes`: the stress run with one process per rank.
#include "stress_processes.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvroom/kit/harness.hpp"
#include "stress_check.hpp"
#include "stress_plan.hpp"

namespace kvroom::stress {

using harness::read_report;
using harness::slurp;
using harness::spawn;
using harness::wait_until;
using harness::wall_ms;

namespace {

using clock_type = std::chrono::steady_clock;

struct child {
  std::string name;
  rank_ref rank;
  pid_t pid = -1;
  int status = 0;
  bool exited = false;
};

} // namespace

int run_processes(const process_options& opt) {
  char dir_template[] = "/tmp/kvroom-stress-XXXXXX";
  if (!::mkdtemp(dir_template)) {
    std::perror("mkdtemp");
    return 2;
  }
  std::string dir = dir_template;
  char exe_buf[4096];
  auto n = ::readlink("/proc/self/exe", exe_buf, sizeof(exe_buf) - 1);
  if (n <= 0)
    return 2;
  std::string exe(exe_buf, static_cast<size_t>(n));
  auto phase1 = opt.rooms;
  auto phase2 = std::max<int64_t>(20, opt.rooms / 5);
  auto pace_us = std::max<int64_t>(0, 1'500'000 / std::max<int64_t>(1, phase1));
  auto port = harness::free_port(mix(opt.seed) ^ static_cast<uint64_t>(::getpid()));
  if (port == 0) {
    std::fprintf(stderr, "stress: no free loopback port for the registry\n");
    return 2;
  }
  // The registry lives in prefill tp0, never the victim.
  auto victim_index = 1 + static_cast<int>(mix(opt.seed + 1) % static_cast<uint64_t>(2 * opt.tp - 1));
  if (!opt.victim.empty()) {
    auto side_p = opt.victim[0] == 'p';
    auto t = std::atoi(opt.victim.c_str() + 1);
    victim_index = (side_p ? 0 : opt.tp) + t;
    if ((opt.victim[0] != 'p' && opt.victim[0] != 'd') || t < 0 || t >= opt.tp
        || victim_index == 0) {
      std::fprintf(stderr, "--victim must name p1..p%d or d0..d%d (p0 hosts the registry)\n",
                   opt.tp - 1, opt.tp - 1);
      return 2;
    }
  }
  bool stop = opt.signal == "sigstop" || (opt.signal == "seeded" && mix(opt.seed + 2) % 2 == 1);
  auto kill_after_ms = 300 + static_cast<int64_t>(mix(opt.seed + 3) % 700);
  std::vector<child> ranks;
  for (auto side : {role::prefill, role::decode})
    for (int t = 0; t < opt.tp; ++t) {
      child c;
      c.name = std::string{side == role::prefill ? "p" : "d"} + std::to_string(t);
      c.rank.side = side;
      c.rank.tp_rank = t;
      c.rank.tp_size = opt.tp;
      c.rank.id = default_rank_id(side, 0, t, opt.tp);
      ranks.push_back(c);
    }
  auto& victim = ranks[static_cast<size_t>(victim_index)];
  std::printf("kvroom stress --processes: seed %llu, %d prefill + %d decode processes, %lld + %lld rooms, "
              "transfer faults %.3f; %s of %s after %lld ms, then a restart; work dir %s\n",
              static_cast<unsigned long long>(opt.seed), opt.tp, opt.tp,
              static_cast<long long>(phase1), static_cast<long long>(phase2), opt.p_transfer,
              stop ? "SIGSTOP" : "SIGKILL", to_string(victim.rank).c_str(),
              static_cast<long long>(kill_after_ms), dir.c_str());
  std::fflush(stdout);
  auto secret_option = harness::write_secret(dir);
  if (secret_option.empty()) {
    std::fprintf(stderr, "kvroom stress --processes: cannot write a secret in %s\n", dir.c_str());
    return 2;
  }
  auto args_for = [&](const child& c, int64_t first, int64_t rooms, int64_t then) {
    std::vector<std::string> a{"serve",
                               "--role=" + to_string(c.rank.side),
                               "--tp=" + std::to_string(c.rank.tp_rank),
                               "--tp-size=" + std::to_string(opt.tp),
                               "--bootstrap-port=" + std::to_string(port),
                               "--first-room=" + std::to_string(first),
                               "--rooms=" + std::to_string(rooms),
                               "--concurrency=" + std::to_string(opt.concurrency),
                               "--pace-us=" + std::to_string(pace_us),
                               "--timeout-ms=" + std::to_string(opt.timeout_ms),
                               "--fault-seed=" + std::to_string(opt.seed),
                               "--p-transfer=" + std::to_string(opt.p_transfer),
                               "--log-level=" + opt.log_level,
                               "--report=" + dir + "/" + c.name + ".json",
                               secret_option};
    if (then > 0) {
      a.push_back("--then-rooms=" + std::to_string(then));
      a.push_back("--then-wait-file=" + dir + "/go");
    }
    if (c.name == "p0")
      a.push_back("--publish-registry");
    return a;
  };
  auto log_of = [&](const child& c) { return dir + "/" + c.name + ".log"; };
  auto has = [&](const child& c, const char* text) {
    return slurp(log_of(c)).find(text) != std::string::npos;
  };
  auto start_time = clock_type::now();
  auto limit = std::chrono::seconds(opt.max_seconds);
  std::vector<violation> violations;
  auto kill_all = [&] {
    for (auto& c : ranks)
      if (c.pid > 0 && !c.exited)
        ::kill(c.pid, SIGKILL);
    for (auto& c : ranks)
      if (c.pid > 0 && !c.exited) {
        ::waitpid(c.pid, &c.status, 0);
        harness::remove_segments(c.pid);
      }
  };
  for (auto& c : ranks)
    c.pid = spawn(exe, args_for(c, 1, phase1, phase2), log_of(c));
  if (!wait_until([&] {
        for (auto& c : ranks)
          if (!has(c, "\"ready\""))
            return false;
        return true;
      },
      std::chrono::seconds(30))) {
    kill_all();
    std::printf("stress: ranks did not start (see %s)\nstress: INVARIANTS BROKEN\n", dir.c_str());
    return 1;
  }
  auto say = [&](const std::string& what) {
    std::printf("  [%6.1fs] %s\n",
                std::chrono::duration<double>(clock_type::now() - start_time).count(),
                what.c_str());
    std::fflush(stdout);
  };
  say("all " + std::to_string(ranks.size()) + " ranks up; first batch running");
  std::this_thread::sleep_for(std::chrono::milliseconds(kill_after_ms));
  ::kill(victim.pid, stop ? SIGSTOP : SIGKILL);
  auto hit_ms = wall_ms();
  say(std::string{stop ? "SIGSTOP" : "SIGKILL"} + " sent to " + to_string(victim.rank));
  if (stop) {
    // Frozen long enough to be declared lost, then gone for good.
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    ::kill(victim.pid, SIGKILL);
  }
  ::waitpid(victim.pid, &victim.status, 0);
  harness::remove_segments(victim.pid);
  victim.exited = true;
  bool phase1_done = wait_until([&] {
    for (auto& c : ranks)
      if (&c != &victim && !has(c, "batch_done"))
        return false;
    return true;
  }, std::chrono::duration_cast<std::chrono::milliseconds>(limit));
  if (!phase1_done)
    violations.push_back({0, -1, "survivors did not finish the first batch in time"});
  else
    say("survivors finished the first batch; restarting " + to_string(victim.rank));
  // The restarted rank serves only the second batch.
  victim.exited = false;
  victim.pid = spawn(exe, args_for(victim, phase1 + 1, phase2, 0), log_of(victim) + ".restart");
  std::string restart_log = log_of(victim) + ".restart";
  wait_until([&] { return slurp(restart_log).find("\"ready\"") != std::string::npos; },
             std::chrono::seconds(30));
  std::ofstream{dir + "/go"} << "go\n";
  say("second batch running on all ranks");
  for (auto& c : ranks) {
    bool done = wait_until([&] { return ::waitpid(c.pid, &c.status, WNOHANG) == c.pid; },
                           std::chrono::duration_cast<std::chrono::milliseconds>(limit));
    c.exited = done;
    if (!done)
      violations.push_back({0, c.rank.id, "process did not finish in time"});
    else if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0)
      violations.push_back({0, c.rank.id, "process exited with status " + std::to_string(c.status)});
  }
  kill_all();
  // Every room, across every rank that served it.
  std::map<std::string, std::map<room_id, harness::report_line>> reports;
  for (auto& c : ranks)
    reports[c.name] = read_report(dir + "/" + c.name + ".json");
  fault_odds odds{opt.p_transfer, 0, 0};
  uint64_t ok_rooms = 0, failed_rooms = 0, outage_rooms = 0;
  for (room_id room = 1; room <= static_cast<room_id>(phase1 + phase2); ++room) {
    bool first_batch = room <= static_cast<room_id>(phase1);
    room_record rec;
    rec.room = room;
    auto plan = plan_for(opt.seed, room, odds, opt.tp);
    bool outage = false;
    for (auto& c : ranks) {
      if (first_batch && &c == &victim)
        continue; // its first report died with it
      auto& rep = reports[c.name];
      auto i = rep.find(room);
      rank_outcome o;
      o.rank = c.rank;
      if (i == rep.end()) {
        o.state = kv_poll::bootstrapping; // never concluded: a stuck room
      } else {
        o.state = i->second.state;
        o.error = i->second.error;
        if (!i->second.data_error.empty())
          rec.data_error = i->second.data_error;
        if (first_batch && o.error
            && (o.error->origin_rank == victim.rank.id || i->second.at_ms >= hit_ms - 5))
          outage = true;
      }
      rec.outcomes.push_back(std::move(o));
    }
    if (outage) {
      rec.fault = {fault_kind::outage, -1, "lost " + to_string(victim.rank), true};
      rec.concurrent_origins = {victim.rank.id};
      if (plan.kind == fault_kind::transfer)
        rec.concurrent_origins.push_back(default_rank_id(role::prefill, 0, plan.tp, opt.tp));
      ++outage_rooms;
    } else if (plan.kind == fault_kind::transfer) {
      rec.fault = {fault_kind::transfer, default_rank_id(role::prefill, 0, plan.tp, opt.tp),
                   to_string(plan.point), true};
    }
    bool any_failed = false;
    for (auto& o : rec.outcomes)
      any_failed = any_failed || o.state == kv_poll::failed;
    if (rec.fault.kind == fault_kind::transfer && !any_failed)
      violations.push_back({room, rec.fault.rank, "Success reported over an injected transfer fault"});
    for (auto& v : check_room(rec)) {
      v.what += " [fault: " + to_string(rec.fault.kind) + " " + rec.fault.detail + "]";
      violations.push_back(v);
    }
    (any_failed ? failed_rooms : ok_rooms) += 1;
  }
  auto secs = std::chrono::duration<double>(clock_type::now() - start_time).count();
  std::printf("%llu rooms checked in %.1f s: %llu ok, %llu failed (%llu touched by the lost rank); seed %llu\n",
              static_cast<unsigned long long>(ok_rooms + failed_rooms), secs,
              static_cast<unsigned long long>(ok_rooms),
              static_cast<unsigned long long>(failed_rooms),
              static_cast<unsigned long long>(outage_rooms),
              static_cast<unsigned long long>(opt.seed));
  for (size_t i = 0; i < violations.size() && i < 20; ++i)
    std::printf("invariant violated: %s\n", to_string(violations[i]).c_str());
  if (!opt.json.empty()) {
    std::ofstream out{opt.json};
    nlohmann::ordered_json j;
    j["mode"] = "processes";
    j["seed"] = opt.seed;
    j["tp"] = opt.tp;
    j["rooms"] = phase1 + phase2;
    j["ok"] = ok_rooms;
    j["failed"] = failed_rooms;
    j["outage"] = outage_rooms;
    j["victim"] = to_string(victim.rank);
    j["signal"] = stop ? "SIGSTOP" : "SIGKILL";
    j["violations"] = violations.size();
    j["seconds"] = secs;
    out << j.dump() << "\n";
  }
  if (violations.empty()) {
    // Keep the evidence of a broken run, drop that of a clean one.
    std::system(("rm -rf " + dir).c_str());
  }
  std::printf("%s\n", violations.empty() ? "stress: all invariants hold" : "stress: INVARIANTS BROKEN");
  return violations.empty() ? 0 : 1;
}

} // namespace kvroom::stress
