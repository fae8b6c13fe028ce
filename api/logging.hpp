#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace kvroom {

/// kvroom's logger ("kvroom", stderr). Embedders may replace it through
/// spdlog's registry before the first rank starts.
std::shared_ptr<spdlog::logger> logger();

/// Sets the level from a name: trace, debug, info, warn, error, off.
/// False, and the level unchanged, for another name.
bool set_log_level(const std::string& level);

/// Whether `set_log_level` takes `level`.
bool known_log_level(const std::string& level);

/// "text" (spdlog's lines, the default) or "json": one JSON object per line
/// on stderr, {"time", "level", "logger", "msg"}, with the fields of a
/// structured event (a failed room: room, rank, origin_rank, propagated,
/// cause, reason) in place of "msg". False for another name.
bool set_log_format(const std::string& format);

/// Whether lines are JSON (`set_log_format`).
bool log_json() noexcept;

/// Renders one log line as JSON: `payload` a JSON object (an event's
/// fields: merged) or text (as "msg"). What the JSON sink writes, apart.
std::string json_log_line(const std::string& time, const std::string& level,
                          const std::string& logger_name, const std::string& payload);

} // namespace kvroom
