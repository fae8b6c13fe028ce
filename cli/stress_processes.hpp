#pragma once

#include <cstdint>
#include <string>

namespace kvroom::stress {

/// What `kvroom stress --processes` runs.
struct process_options {
  int tp = 2;
  int64_t rooms = 300;
  int64_t concurrency = 16;
  uint64_t seed = 1;
  double p_transfer = 0.05;
  int64_t timeout_ms = 2000;
  int64_t max_seconds = 300;
  /// "sigkill", "sigstop", or "seeded" (the seed picks).
  std::string signal = "seeded";
  /// "p1", "d0", ...: the rank to stop; empty: the seed picks.
  std::string victim;
  std::string json;
  std::string log_level = "warn";
};

/// One `kvroom serve` process per rank (2 x tp), the seed's data-plane
/// faults in the prefill ranks, one rank SIGKILLed or SIGSTOPped mid-run and
/// restarted, a second batch of rooms after the restart; then every room is
/// checked across every rank's report. Returns the exit code.
int run_processes(const process_options& opt);

} // namespace kvroom::stress
