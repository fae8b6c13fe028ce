#pragma once

#include <string>

namespace kvroom::detail {

/// A data-plane event worth a warning (a refused batch, a peer turned away),
/// logged through kvroom's spdlog logger without depending on actors/.
void transport_warning(const std::string& text);

} // namespace kvroom::detail
