#pragma once

// What a rank counts for operators, as any thread reads it: rooms by
// outcome, failures by cause and origin, bytes by transport, latency
// histograms, peers, refusals, the data paths (`rank::metrics()`,
// `rank::paths()`); `prometheus_text` and `health_of` render them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "caf/meta/type_name.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/api/ids.hpp"

namespace kvroom {

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

/// Bytes are counted per row of the transport table (transport_table.hpp),
/// which holds at most this many.
constexpr size_t max_transports = 8;

/// The transport's row in the table (its byte counter), or -1 for an
/// unknown name.
int transport_index(const std::string& name) noexcept;

/// A histogram as Prometheus has it: `counts[i]` observations at most
/// `bounds[i]` (not cumulative; the last count is the +Inf bucket).
struct histogram_snapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
};

struct metrics_snapshot {
  rank_ref rank;
  /// The rank joined its deployment (registered, or local-only and up).
  bool ready = false;
  uint64_t rooms_success = 0;
  uint64_t rooms_failed = 0;
  /// [0]: failures this rank identified (origin), [1]: learned (propagated).
  std::array<std::array<uint64_t, failure_cause_count>, 2> failures{};
  uint64_t rooms_in_flight = 0;
  /// By transport_index (the transport table's order).
  std::array<uint64_t, max_transports> transfer_bytes{};
  /// Prefill: the last chunk reaching the room to its terminal state;
  /// decode: the destination handed over to the terminal state.
  histogram_snapshot transfer_latency;
  /// Open to terminal state.
  histogram_snapshot room_lifetime;
  uint64_t peers_usable = 0;
  uint64_t peers_listed = 0;
  uint64_t peers_lost = 0;
  /// Ranks the registry reported lost that were never linked here, being
  /// checked (deploying.md).
  uint64_t peers_suspected = 0;
  /// Such reports the rank found false (the rank answered): each one a sign
  /// of a registry that stalled or lost its network.
  uint64_t registry_reports_refuted = 0;
  /// Control messages dropped because their sender never proved membership.
  uint64_t refused_messages = 0;
  uint64_t parked = 0;
  uint64_t tombstones = 0;
  /// The data paths: by state, retries and fallbacks by transport, rests.
  path_counters paths;
};

/// A rank manager's own counters (`rank::stats()`, a bounded query): what a
/// leak check and a stress run look at.
struct manager_stats {
  uint64_t live_rooms = 0;       ///< room actors in the directory
  uint64_t failure_records = 0;  ///< failures not yet taken by the scheduler
  uint64_t parked = 0;           ///< messages waiting for their room to open
  uint64_t early_failures = 0;   ///< failures for rooms not yet open here
  uint64_t tombstones = 0;       ///< recently cleared room ids remembered
  uint64_t origin_failures = 0;  ///< failures that started on this rank
  uint64_t propagated_failures = 0;  ///< failures learned from other ranks
  uint64_t successes = 0;
  /// Control messages dropped because their sender never proved membership.
  uint64_t stranger_messages = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, manager_stats& x) {
  return f(caf::meta::type_name("kvroom.manager_stats"), x.live_rooms,
           x.failure_records, x.parked, x.early_failures, x.tombstones,
           x.origin_failures, x.propagated_failures, x.successes, x.stranger_messages);
}

/// Process-wide refusal counts beside the ranks' own (the control gate's,
/// the data plane's), as (what, count).
using refusal_counts = std::vector<std::pair<std::string, uint64_t>>;

/// This process's: every kind of refusal the data planes and the control
/// gate logged (rate-limited) so far, counted whether logged or not
/// ("tcp_refused_connection", "tcp_refused_batch", "tcp_unauthenticated",
/// "control_gate", ...).
refusal_counts process_refusals();

/// The Prometheus text exposition (format 0.0.4) of `ranks` and the
/// process's `refusals`: every family with HELP and TYPE, every sample
/// labelled with its rank's id and role.
std::string prometheus_text(const std::vector<metrics_snapshot>& ranks,
                            const refusal_counts& refusals);

/// A `/health` answer: ready when every rank is ready and no peer is lost;
/// `body` a small JSON document saying so per rank.
struct health_report {
  bool ready = false;
  std::string body;
};

health_report health_of(const std::vector<metrics_snapshot>& ranks);

} // namespace kvroom
