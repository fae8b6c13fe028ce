#pragma once

// Running `kvroom serve` processes and reading their reports: shared by
// `kvroom stress --processes` and the multi-process benchmarks.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <variant>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvroom/kit/testkit.hpp"

namespace kvroom::harness {

/// System clock, milliseconds: comparable across processes on one host.
int64_t wall_ms();

/// The whole file, or "" when it cannot be read.
std::string slurp(const std::string& path);

/// Starts `exe args...` with stdout and stderr in `log`.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::string& log);

/// This program's path (/proc/self/exe), or "" on failure.
std::string self_exe();

/// Resident set size of this process, bytes (/proc/self/statm).
uint64_t resident_bytes();

/// Removes the /dev/shm segments of process `pid` (a killed rank cannot).
void remove_segments(pid_t pid);

/// A fresh directory under /tmp named `prefix`-XXXXXX, or "" on failure.
std::string make_temp_dir(const std::string& prefix);

/// Writes a random deployment secret (mode 0600) to `dir`/secret; returns
/// the `--secret-file=...` option naming it, or "" on failure.
std::string write_secret(const std::string& dir);

/// A loopback TCP port for a deployment's registry: below the kernel's
/// ephemeral range (32768 up, where every outgoing connection takes its
/// own port, so a port there can be taken between its choice and its
/// bind), and free when asked (a bind test). Starts at a point of
/// [20000, 32000) that `seed` picks and takes the next free one; 0 when
/// none is.
int free_port(uint64_t seed);

/// Waits until `pred` holds or `limit` passes, checking every 10 ms.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

/// One room of one `serve --report` file.
struct report_line {
  kv_poll state = kv_poll::bootstrapping;
  std::optional<kv_transfer_error> error;
  int64_t opened_ms = 0;
  int64_t at_ms = 0;  ///< concluded
  int64_t latency_us = 0;  ///< open to conclusion on that rank
  std::string data_error;
};

/// room -> outcome, from one `serve --report` file (parsed as JSON; empty
/// when the file is missing or not JSON).
std::map<room_id, report_line> read_report(const std::string& path);

/// One event line of a command's stdout (`{"event": "ready", ...}`): the
/// fields in order, the layout scripts grep (`"key": value`), every key and
/// string escaped by a JSON library.
using event_value = std::variant<std::string, int64_t>;
std::string event_line(const std::vector<std::pair<std::string, event_value>>& fields);

/// The text of a `serve --report` file: the rank and its rooms, one room
/// per line (scripts grep them), every string escaped by a JSON library so
/// any reason (newlines, quotes, control characters) survives the trip.
std::string report_json(const std::string& rank, rank_id id,
                        const std::vector<std::pair<room_id, report_line>>& rooms);

} // namespace kvroom::harness
