#include "kvroom/actors/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace kvroom {

std::shared_ptr<spdlog::logger> logger() {
  static auto instance = [] {
    if (auto existing = spdlog::get("kvroom"))
      return existing;
    auto created = spdlog::stderr_color_mt("kvroom");
    created->set_level(spdlog::level::info);
    return created;
  }();
  return instance;
}

bool set_log_level(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    return false;
  logger()->set_level(lvl);
  return true;
}

} // namespace kvroom
