#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"

namespace kvroom::bench {

int bench_rooms(int argc, char** argv);
int bench_latency(int argc, char** argv);
int bench_poll(int argc, char** argv);
int bench_memory(int argc, char** argv);
int bench_bandwidth(int argc, char** argv);
int bench_processes(int argc, char** argv);
int bench_detect(int argc, char** argv);
int bench_scale(int argc, char** argv);
int bench_layers(int argc, char** argv);
/// `kvroom-bench caf-echo`: publishes an actor that answers each request
/// with its value, for `caf_round_trips_us` in a parent process.
int bench_caf_echo(int argc, char** argv);

/// `n` request/reply round trips between an actor here and one in a child
/// process (`caf-echo`) through CAF's middleman, each system configured as
/// `kvroom serve --threads=threads [--caf-clock]`, in microseconds; empty
/// with `why` set when it could not be measured.
std::vector<double> caf_round_trips_us(int64_t threads, bool caf_clock, int n, std::string& why);

/// Tiny rooms per second in one process, `tp`P x `tp`D with `concurrency`
/// in flight, over `seconds` after a short warm-up: the in-process baseline
/// other benchmarks compare with in the same run.
double in_process_rooms_per_s(caf::actor_system& sys, int tp, int64_t concurrency,
                              double seconds);

/// Options every benchmark shares, through CAF's config system.
class bench_config : public caf::actor_system_config {
public:
  std::string json;
  double seconds = 2.0;
  int64_t tp = 1;
  std::string log_level = "error";

  bench_config();
};

/// Parses the options; returns -1 to go on, else the exit code.
int parse(bench_config& cfg, int argc, char** argv);

/// The `kvroom` command: `given`, else next to this program, else "".
std::string find_kvroom(const std::string& given);

/// "a,b" -> {"a", "b"}.
std::vector<std::string> split_list(const std::string& text);

/// "1,4,16" -> {1, 4, 16}; empty on a malformed list.
std::vector<int64_t> parse_list(const std::string& text);

} // namespace kvroom::bench
