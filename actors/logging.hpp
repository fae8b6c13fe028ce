#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace kvroom {

/// kvroom's logger ("kvroom", stderr). Embedders may replace it through
/// spdlog's registry before the first rank starts.
std::shared_ptr<spdlog::logger> logger();

/// Sets the level from a name: trace, debug, info, warn, error, off.
bool set_log_level(const std::string& level);

} // namespace kvroom
