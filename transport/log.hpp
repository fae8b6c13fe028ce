#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvroom::detail {

/// A data-plane event worth a warning (a refused batch, a peer turned away),
/// logged through kvroom's spdlog logger without depending on actors/.
void transport_warning(const std::string& text);

/// The same, at most once a second per `kind`: a flood of refusals (a
/// stranger hammering a port) costs one line a second, which counts the
/// lines it stood for.
void transport_warning_limited(const char* kind, const std::string& text);

/// How many of each kind `transport_warning_limited` saw in this process
/// (logged or not), by kind: what strangers and bad peers were refused.
std::vector<std::pair<std::string, uint64_t>> limited_warning_counts();

} // namespace kvroom::detail
