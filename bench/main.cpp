// kvroom-bench: benchmarks that print their configuration, a table and JSON,
// each against a baseline measured in the same run. They never assert.
//
//   kvroom-bench rooms      room throughput vs concurrency (+ CAF ceiling)
//   kvroom-bench latency    per-room end-to-end latency, small and realistic
//   kvroom-bench poll       poll() cost with 10,000 rooms in flight
//   kvroom-bench memory     resident bytes per in-flight room per rank
//   kvroom-bench bandwidth  GB/s per transport vs memcpy / a plain socket
//   kvroom-bench processes  rooms/s with prefill and decode in two processes
//   kvroom-bench detect     SIGKILL / SIGSTOP of a peer to rooms Failed
//   kvroom-bench scale      32+ rank processes at once: ready, rooms/s, memory,
//                           links, loss known (built-in registry vs etcd)
//   kvroom-bench layers     transfer time exposed after a forward's last layer:
//                           layer by layer vs the whole room after it
#include <cstdio>
#include <cstring>
#include <string>

#include "benches.hpp"

int main(int argc, char** argv) {
  using namespace kvroom::bench;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::puts("usage: kvroom-bench <rooms|latency|poll|memory|bandwidth|processes|detect|scale|layers> [options]\n"
              "`kvroom-bench <bench> --help` lists the options.");
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  if (cmd == "rooms")
    return bench_rooms(argc - 1, argv + 1);
  if (cmd == "latency")
    return bench_latency(argc - 1, argv + 1);
  if (cmd == "poll")
    return bench_poll(argc - 1, argv + 1);
  if (cmd == "memory")
    return bench_memory(argc - 1, argv + 1);
  if (cmd == "bandwidth")
    return bench_bandwidth(argc - 1, argv + 1);
  if (cmd == "processes")
    return bench_processes(argc - 1, argv + 1);
  if (cmd == "detect")
    return bench_detect(argc - 1, argv + 1);
  if (cmd == "scale")
    return bench_scale(argc - 1, argv + 1);
  if (cmd == "layers")
    return bench_layers(argc - 1, argv + 1);
  // Not a benchmark: the other end of `processes`' CAF round trips.
  if (cmd == "caf-echo")
    return bench_caf_echo(argc - 1, argv + 1);
  std::fprintf(stderr, "kvroom-bench: unknown benchmark '%s'\n", cmd.c_str());
  return 2;
}
