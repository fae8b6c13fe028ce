#pragma once

// `kvroom stress` in one process: the seeded schedule drawn for a run, the
// run itself (a prefill and a decode group, a scheduler loop, every room
// checked as it concludes and the ranks after the last), and what it saw.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"

#include "kvroom/kit/testkit.hpp"
#include "kvroom/kit/engine.hpp"

#include "stress_check.hpp"
#include "stress_config.hpp"
#include "stress_plan.hpp"

namespace kvroom::cli {

/// What one in-process run is set up with: the groups' shape and the
/// fault schedule drawn from the seed.
struct stress_setup {
  uint64_t seed = 0;
  int prefill_tp = 1;
  int prefill_pp = 1;
  int decode_tp = 1;
  /// The model's declared layout (none: undeclared, equal TP sizes).
  std::optional<parallel_layout> model;
  kv_shape shape;
  /// Per room, by room id (index 0 unused): its fault.
  std::vector<stress::room_plan> plans;
  /// Per rank that moves the bytes (prefill; decode with --pull), in
  /// stage-major order: the data-plane faults it injects.
  std::vector<fault_plan> mover_faults;
  integrity_mode integrity = integrity_mode::off;

  /// Prefill ranks: TP size times pipeline stages.
  int prefill_ranks() const noexcept {
    return prefill_tp * prefill_pp;
  }
};

/// Draws the setup of a run of `cfg` with `seed`; an error when the declared
/// layouts do not map or an option names nothing known.
caf::expected<stress_setup> make_setup(const stress_config& cfg, uint64_t seed,
                                       const std::optional<parallel_layout>& model);

/// What a run saw.
struct stress_result {
  std::vector<stress::violation> violations;
  /// The fault that fired (or "none") -> rooms that succeeded, rooms that
  /// failed.
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_fault;
  uint64_t concluded = 0;
  uint64_t failed_rooms = 0;
  double seconds = 0;
  uint64_t rss_start = 0;
  uint64_t rss_end = 0;
  /// Resident growth per room after the first tenth.
  double bytes_per_room = 0;
  uint64_t path_retries = 0;
  uint64_t path_rests = 0;
};

/// Runs every room of `setup` through a prefill and a decode group in this
/// process, checks each room as it concludes and the ranks after the last;
/// an error only when the groups cannot start or a room cannot open.
caf::expected<stress_result> run_in_process(caf::actor_system& sys, const stress_config& cfg,
                                            const stress_setup& setup);

} // namespace kvroom::cli
