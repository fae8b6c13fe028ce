// kvroom: the command-line front end. Subcommands parse their own options
// through CAF's config system (`kvroom <command> --help`).
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"

namespace {

void usage() {
  std::puts("usage: kvroom <command> [options]\n"
            "\n"
            "commands:\n"
            "  demo     prefill and decode groups in one process: transfer N rooms\n"
            "           over real buffers with one injected failure, print results\n"
            "  serve    one rank in its own process (prefill or decode), joined\n"
            "           through the bootstrap registry; runs a range of rooms\n"
            "  registry the bootstrap registry as its own process (a directory:\n"
            "           ranks link directly; restart it at will)\n"
            "  stress   thousands of rooms under a seeded fault schedule; checks\n"
            "           kvroom's invariants on every room, exits 1 when one breaks\n"
            "  top      a terminal view of ranks' /metrics (serve --metrics-port):\n"
            "           rooms/s, failures by cause, latency percentiles, peers\n"
            "  doctor   list the transports this build and machine support\n"
            "\n"
            "`kvroom <command> --help` lists a command's options.");
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0
      || std::strcmp(argv[1], "-h") == 0) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  // The subcommand sees its options as if it were the program.
  if (cmd == "demo")
    return kvroom::cli::run_demo(argc - 1, argv + 1);
  if (cmd == "top")
    return kvroom::cli::run_top(argc - 1, argv + 1);
  if (cmd == "serve")
    return kvroom::cli::run_serve(argc - 1, argv + 1);
  if (cmd == "stress")
    return kvroom::cli::run_stress(argc - 1, argv + 1);
  if (cmd == "registry")
    return kvroom::cli::run_registry(argc - 1, argv + 1);
  if (cmd == "doctor")
    return kvroom::cli::run_doctor(argc - 1, argv + 1);
  std::fprintf(stderr, "kvroom: unknown command '%s'\n\n", cmd.c_str());
  usage();
  return 2;
}
