#pragma once

// What every `kvroom` command does first with its command line.

#include <optional>
#include <string>

#include "caf/actor_system_config.hpp"

namespace kvroom::cli {

/// Says `what` on stderr as "kvroom COMMAND: what"; the exit code of a
/// command line that cannot run (2).
int usage_error(const char* command, const std::string& what);

/// Reads the command line into `cfg`: nothing when the command goes on,
/// else its exit code: 0 once --help printed its text, 2 for options CAF
/// cannot read (said as a usage error).
std::optional<int> parse_command_line(caf::actor_system_config& cfg, int argc, char** argv,
                                      const char* command);

} // namespace kvroom::cli
