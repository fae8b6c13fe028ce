#include "command_line.hpp"

#include <cstdio>

#include "caf/all.hpp"

namespace kvroom::cli {

int usage_error(const char* command, const std::string& what) {
  std::fprintf(stderr, "kvroom %s: %s\n", command, what.c_str());
  return 2;
}

std::optional<int> parse_command_line(caf::actor_system_config& cfg, int argc, char** argv,
                                      const char* command) {
  if (auto err = cfg.parse(argc, argv))
    return usage_error(command, "bad options: " + caf::to_string(err));
  if (cfg.cli_helptext_printed)
    return 0;
  return std::nullopt;
}

} // namespace kvroom::cli
