#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kvroom/messages/ids.hpp"

namespace kvroom {

/// When a data path rests and for how long: Mooncake TENT's failover rules
/// (docs/source/design/tent/failover.md): a path with `errors_to_rest`
/// errors within `error_window_ms` rests for `first_rest_ms`; a path that
/// rests again before it stayed healthy for `max_rest_ms` rests twice as
/// long as the last time, up to `max_rest_ms`.
struct path_rules {
  uint32_t errors_to_rest = 3;
  uint32_t error_window_ms = 10'000;
  uint32_t first_rest_ms = 30'000;
  uint32_t max_rest_ms = 300'000;
};

/// How the path layer spreads and retries batches.
struct path_options {
  path_rules rules;
  /// A batch of at least twice this many bytes with several healthy paths
  /// in its nearest tier is cut into one slice per path (each at least this
  /// large), every slice its own batch with its own grant check.
  uint64_t slice_bytes = 256 * 1024;
  /// Paths remembered at most; healthy ones unused the longest go first.
  size_t max_paths = 1024;
};

/// Transports the path layer counts by (the transport table's rows).
constexpr size_t max_path_transports = 8;

/// Counters of a rank's path layer since it started.
struct path_counters {
  /// Slices moved to another path after theirs failed, by the failed
  /// path's transport (its row in the transport table).
  std::array<uint64_t, max_path_transports> retries{};
  /// Slices sent on a farther transport because every path of the nearest
  /// one rested or had failed them (verbs -> tcp), by the transport taken.
  std::array<uint64_t, max_path_transports> fallbacks{};
  /// Paths sent to rest.
  uint64_t rests = 0;
  /// Batches cut into slices.
  uint64_t sliced = 0;
  /// Batches that failed with no path left.
  uint64_t exhausted = 0;
  /// Paths known now, by state (healthy, resting, probing).
  std::array<uint64_t, 3> paths{};
};

enum class path_state : uint8_t {
  healthy,  ///< carries batches
  resting,  ///< carries none while another path can (until its rest ends)
  probing,  ///< after an error or a rest: one batch at a time until one lands
};

std::string to_string(path_state x);

/// One path as operators see it (`kvroom_paths`, `kvroom top`).
struct path_report {
  std::string transport;
  std::string address;
  rank_id peer = -1;
  path_state state = path_state::healthy;
  uint64_t errors = 0;
  uint64_t rest_until_ms = 0;
  std::string last_error;
};

} // namespace kvroom
