#pragma once

// What a rank counts for operators: rooms by outcome, failures by cause and
// origin, bytes by transport, latency histograms, peers, refusals. The
// rank's manager is the only writer (relaxed atomics, no lock); any thread
// reads a snapshot without blocking the scheduler or the actors.
// `prometheus_text` renders snapshots in Prometheus' text format.

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvroom/messages/failure_cause.hpp"
#include "kvroom/messages/ids.hpp"
#include "kvroom/transport/paths/path_options.hpp"

namespace kvroom {

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

/// A fixed-bucket histogram of seconds; one writer, any readers.
class atomic_histogram {
public:
  /// 100 us to 30 s, roughly 1-2.5-5 per decade.
  static const std::vector<double>& default_bounds();

  void observe(double seconds) noexcept;
  histogram_snapshot snapshot() const;

private:
  static constexpr size_t max_buckets = 24;
  std::array<std::atomic<uint64_t>, max_buckets> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> count_{0};
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
  /// Control messages dropped because their sender never proved membership.
  uint64_t refused_messages = 0;
  uint64_t parked = 0;
  uint64_t tombstones = 0;
  /// The data paths: by state, retries and fallbacks by transport, rests.
  path_counters paths;
};

class rank_metrics {
public:
  explicit rank_metrics(rank_ref self) : self_(self) {
    // nop
  }

  // -- the manager writes -----------------------------------------------------

  void set_ready(bool x) noexcept {
    ready_.store(x, std::memory_order_relaxed);
  }
  void set_in_flight(uint64_t n) noexcept {
    in_flight_.store(n, std::memory_order_relaxed);
  }
  /// A room concluded. `latency_s` < 0: no transfer latency (the room ended
  /// before its transfer began); `transport` < 0: no bytes counted.
  void concluded(bool success, bool propagated, failure_cause cause, double lifetime_s,
                 double latency_s, uint64_t bytes, int transport) noexcept;
  void set_peers(uint64_t usable, uint64_t listed, uint64_t lost) noexcept;
  void set_parked(uint64_t parked, uint64_t tombstones) noexcept;
  void stranger() noexcept {
    refused_messages_.fetch_add(1, std::memory_order_relaxed);
  }

  // -- anyone reads -------------------------------------------------------------

  metrics_snapshot snapshot() const;

private:
  using counter = std::atomic<uint64_t>;
  rank_ref self_;
  std::atomic<bool> ready_{false};
  counter success_{0}, failed_{0}, in_flight_{0};
  std::array<std::array<counter, failure_cause_count>, 2> failures_{};
  std::array<counter, max_transports> bytes_{};
  atomic_histogram latency_, lifetime_;
  counter usable_{0}, listed_{0}, lost_{0}, refused_messages_{0}, parked_{0}, tombstones_{0};
};

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
