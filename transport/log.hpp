#pragma once

#include <string>

namespace kvroom::detail {

/// A data-plane event worth a warning (a refused batch, a peer turned away),
/// logged through kvroom's spdlog logger without depending on actors/.
void transport_warning(const std::string& text);

/// The same, at most once a second per `kind`: a flood of refusals (a
/// stranger hammering a port) costs one line a second, which counts the
/// lines it stood for.
void transport_warning_limited(const char* kind, const std::string& text);

} // namespace kvroom::detail
