#include "kvroom/transport/log.hpp"

#include <spdlog/spdlog.h>

namespace kvroom::detail {

void transport_warning(const std::string& text) {
  if (auto lg = spdlog::get("kvroom"))
    lg->warn("{}", text);
  else
    spdlog::warn("{}", text);
}

} // namespace kvroom::detail
