// `kvroom stress`: thousands of rooms through a prefill and a decode group at
// a chosen concurrency, with a fault schedule drawn from a seed (transfer
// errors at every point, scheduler aborts and room-actor kills in every
// state, delayed control messages), then kvroom's invariants checked on every
// room and on the ranks afterwards. Exits 1 naming the room and rank when an
// invariant breaks. The options: stress_config.hpp; a run in one process:
// stress_run.cpp; across processes: stress_processes.cpp.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "caf/all.hpp"

#include "command_line.hpp"
#include "commands.hpp"
#include "stress_config.hpp"
#include "stress_processes.hpp"
#include "stress_run.hpp"

namespace kvroom::cli {

std::string invalid_options(const stress_config& cfg) {
  if (cfg.prefill_tp < 1 || cfg.decode_tp < 1 || cfg.prefill_tp > 64 || cfg.decode_tp > 64)
    return ("prefill-tp and decode-tp must lie in [1, 64]");
  if (cfg.prefill_pp < 1 || cfg.prefill_pp > 16 || cfg.layers % cfg.prefill_pp != 0)
    return ("prefill-pp must lie in [1, 16] and divide layers");
  if (cfg.state != "none" && cfg.state != "mamba" && cfg.state != "swa")
    return ("--state must be none, mamba or swa");
  if (cfg.state != "none" && (cfg.prefill_tp != cfg.decode_tp || cfg.prefill_pp != 1))
    return ("--state moves a rank's own state: equal TP sizes and no PP");
  if (cfg.state != "none" && cfg.processes)
    return ("--state runs in one process (across processes: serve --state)");
  if (cfg.prefill_pp > 1 && !cfg.parallel.declared())
    return ("--prefill-pp needs a declared layout (--kv-heads or --mla)");
  if (cfg.parallel.pp_size != 1 || cfg.parallel.pp != 0)
    return ("stress takes --prefill-pp, not --pp-size/--pp");
  if (cfg.prefill_tp != cfg.decode_tp && !cfg.parallel.declared())
    return ("prefill-tp " + std::to_string(cfg.prefill_tp) + " and decode-tp "
               + std::to_string(cfg.decode_tp)
               + " differ: declare the model's layout (--kv-heads or --mla) to slice heads");
  if (cfg.processes && (cfg.prefill_tp != cfg.decode_tp || cfg.parallel.declared()))
    return ("--processes runs equal TP sizes without a declared layout (unequal TP and "
               "MLA across processes: process_parallel_test)");
  if (auto model = cfg.parallel.layout(1, 0, cfg.layers); !model)
    return describe(model.error());
  if (cfg.rooms < 1 || cfg.concurrency < 1 || cfg.layers < 1
      || cfg.page_bytes < 8 || cfg.pages_per_room < 2 || cfg.timeout_ms < 10
      || cfg.max_seconds < 1)
    return ("sizes must be positive (pages-per-room at least 2)");
  for (double p : {cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late,
                   cfg.p_delay})
    if (p < 0.0 || p > 1.0)
      return ("probabilities must lie in [0, 1]");
  if (cfg.p_transfer + cfg.p_abort + cfg.p_kill + cfg.p_multi + cfg.p_late > 1.0)
    return ("p-transfer + p-abort + p-kill + p-multi + p-late must not exceed 1");
  if (cfg.max_tombstones < 1 || cfg.max_bytes_per_room < 0)
    return ("max-tombstones must be positive, max-bytes-per-room not negative");
  if (cfg.sabotage != "none" && cfg.sabotage != "drop-fan-out" && cfg.sabotage != "no-fence"
      && cfg.sabotage != "local-decisions" && cfg.sabotage != "keep-monitors")
    return ("unknown sabotage '" + cfg.sabotage + "'");
  if (cfg.pull && (cfg.parallel.declared() || cfg.processes || cfg.p_flip > 0 || !cfg.fault_path.empty()))
    return ("--pull runs in one process, equal TP sizes without a declared layout, with "
               "no --p-flip (a flip is a writer's) and no --fault-path (a read names one "
               "path and is not moved to another)");
  if (cfg.processes && cfg.signal != "sigkill" && cfg.signal != "sigstop"
      && cfg.signal != "seeded")
    return "--signal must be sigkill, sigstop or seeded";
  return {};
}

namespace {

using namespace kvroom::stress;

int bad(const std::string& what) {
  return usage_error("stress", what);
}

/// Prints what the run saw (the fault table, rates, memory, violations)
/// and writes it as JSON with --json; the exit code.
int report(const stress_config& cfg, const stress_setup& setup, const stress_result& res) {
  std::printf("\nfault fired      rooms ok   rooms failed\n");
  for (auto& kvp : res.by_fault)
    std::printf("  %-12s %10llu %14llu\n", kvp.first.c_str(),
                static_cast<unsigned long long>(kvp.second.first),
                static_cast<unsigned long long>(kvp.second.second));
  std::printf("%llu rooms in %.2f s (%.0f rooms/s); resident memory %.1f -> %.1f MiB "
              "(%.1f bytes per room after the first tenth); seed %llu\n",
              static_cast<unsigned long long>(res.concluded), res.seconds,
              static_cast<double>(res.concluded) / res.seconds,
              static_cast<double>(res.rss_start) / 1048576.0,
              static_cast<double>(res.rss_end) / 1048576.0, res.bytes_per_room,
              static_cast<unsigned long long>(setup.seed));
  if (cfg.transport != "local")
    std::printf("data paths (%s over %s): %llu batches moved to another path, %llu rests\n",
                cfg.transport.c_str(), cfg.tcp_host.c_str(),
                static_cast<unsigned long long>(res.path_retries),
                static_cast<unsigned long long>(res.path_rests));
  for (size_t i = 0; i < res.violations.size() && i < 20; ++i)
    std::printf("invariant violated: %s\n", to_string(res.violations[i]).c_str());
  if (res.violations.size() > 20)
    std::printf("... and %zu more res.violations\n", res.violations.size() - 20);
  if (!cfg.json.empty()) {
    nlohmann::ordered_json j;
    j["seed"] = setup.seed;
    j["prefill_tp"] = setup.prefill_tp;
    j["prefill_pp"] = setup.prefill_pp;
    j["decode_tp"] = setup.decode_tp;
    j["layout"] = !setup.model ? "undeclared" : setup.model->mla ? "mla" : to_string(setup.model->order);
    j["rooms"] = cfg.rooms;
    j["concurrency"] = cfg.concurrency;
    j["p_transfer"] = cfg.p_transfer;
    j["p_abort"] = cfg.p_abort;
    j["p_kill"] = cfg.p_kill;
    j["p_delay"] = cfg.p_delay;
    j["timeout_ms"] = cfg.timeout_ms;
    j["sabotage"] = cfg.sabotage;
    j["concluded"] = res.concluded;
    j["failed_rooms"] = res.failed_rooms;
    j["seconds"] = res.seconds;
    j["rooms_per_second"] = res.seconds > 0 ? static_cast<double>(res.concluded) / res.seconds : 0.0;
    j["rss_start_bytes"] = res.rss_start;
    j["rss_end_bytes"] = res.rss_end;
    j["bytes_per_room"] = res.bytes_per_room;
    j["transport"] = cfg.transport;
    j["path_retries"] = res.path_retries;
    j["path_rests"] = res.path_rests;
    j["res.by_fault"] = nlohmann::ordered_json::object();
    for (auto& kvp : res.by_fault)
      j["res.by_fault"][kvp.first] = {{"ok", kvp.second.first}, {"failed", kvp.second.second}};
    j["res.violations"] = nlohmann::ordered_json::array();
    for (auto& v : res.violations)
      j["res.violations"].push_back({{"room", v.room}, {"rank", v.rank}, {"what", v.what}});
    std::ofstream out{cfg.json};
    out << j.dump(2) << "\n";
  }
  std::printf("%s\n", res.violations.empty() ? "stress: all invariants hold"
                                         : "stress: INVARIANTS BROKEN");
  return res.violations.empty() ? 0 : 1;
}

} // namespace

int run_stress(int argc, char** argv) {
  stress_config cfg;
  prepare_config(cfg);
  if (auto done = parse_command_line(cfg, argc, argv, "stress"))
    return *done;
  if (!set_log_level(cfg.log_level))
    return bad("unknown log level '" + cfg.log_level + "'");
  if (auto why = invalid_options(cfg); !why.empty())
    return bad(why);
  auto seed = cfg.seed != 0 ? static_cast<uint64_t>(cfg.seed)
                            : static_cast<uint64_t>(
                                std::chrono::steady_clock::now().time_since_epoch().count());
  if (cfg.processes) {
    process_options po;
    po.tp = static_cast<int>(cfg.prefill_tp);
    po.rooms = cfg.rooms;
    po.concurrency = cfg.concurrency;
    po.seed = seed;
    po.p_transfer = cfg.p_transfer;
    po.timeout_ms = cfg.timeout_ms;
    po.max_seconds = cfg.max_seconds;
    po.signal = cfg.signal;
    po.victim = cfg.victim;
    po.json = cfg.json;
    po.log_level = cfg.log_level == "off" ? "warn" : cfg.log_level;
    return run_processes(po);
  }
  // The model's layout, its TP size and rank set per rank.
  auto model = cfg.parallel.layout(1, 0, cfg.layers);
  if (!model)
    return bad(describe(model.error()));
  auto setup = make_setup(cfg, seed, *model);
  if (!setup)
    return bad(describe(setup.error()));
  std::printf("kvroom stress: seed %llu, %d prefill x %d decode ranks in one process%s, "
              "%lld rooms at concurrency %lld\n"
              "  faults: transfer %.3f, abort %.3f, kill %.3f, same-on-every-rank %.3f, "
              "late write %.3f per room; control delay %.3f "
              "(up to %lld ms); timeouts %lld ms; sabotage %s\n",
              static_cast<unsigned long long>(setup->seed), setup->prefill_ranks(), setup->decode_tp,
              !setup->model             ? ""
              : setup->prefill_pp > 1   ? " (prefill in pipeline stages, by the rank mapping)"
              : setup->model->mla       ? " (MLA)"
                                       : " (heads sliced by the rank mapping)",
              static_cast<long long>(cfg.rooms), static_cast<long long>(cfg.concurrency),
              cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late, cfg.p_delay,
              static_cast<long long>(cfg.max_delay_ms), static_cast<long long>(cfg.timeout_ms),
              cfg.sabotage.c_str());
  std::fflush(stdout);
  caf::actor_system sys{cfg};
  auto res = run_in_process(sys, cfg, *setup);
  if (!res)
    return bad(describe(res.error()));
  return report(cfg, *setup, *res);
}

} // namespace kvroom::cli
