#pragma once

#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "transport/backend.hpp"
#include "transport/fault_plan.hpp"

namespace kvroom {

/// What a rank asks the factory for.
struct backend_config {
  /// "local" (same process); further backends as they are compiled in.
  std::string name = "local";
  /// The rank whose memory the backend registers.
  rank_id owner = 0;
  /// Faults to inject; an empty plan adds no wrapper.
  fault_plan faults;
};

/// The one place that knows every backend: builds the one named in `cfg`,
/// wrapped in the fault injector when `cfg.faults` selects anything.
caf::expected<backend_ptr> make_backend(const backend_config& cfg);

/// Whether a backend can run here, and why not when it cannot.
struct backend_availability {
  std::string name;
  bool compiled = false;
  bool available = false;
  std::string detail;
};

/// Every backend kvroom knows, compiled in or not, with its run-time status.
std::vector<backend_availability> probe_backends();

} // namespace kvroom
