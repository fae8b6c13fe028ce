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

#include "kvroom/api/metrics.hpp"

namespace kvroom {

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

class rank_metrics {
public:
  explicit rank_metrics(rank_ref self) : self_(self) {
    // nop
  }

  // -- the manager writes -----------------------------------------------------

  /// Written by the rank's control actor, at its registration.
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
  /// The registry's reports of a loss being checked, and one found false.
  void set_suspected(uint64_t n) noexcept {
    suspected_.store(n, std::memory_order_relaxed);
  }
  void report_refuted() noexcept {
    refuted_.fetch_add(1, std::memory_order_relaxed);
  }
  /// A stranger's control message dropped. Also written by the rank's
  /// control actor (registration and links): an atomic add, not a store.
  void stranger() noexcept {
    refused_messages_.fetch_add(1, std::memory_order_relaxed);
  }

  // -- anyone reads -------------------------------------------------------------

  uint64_t strangers() const noexcept {
    return refused_messages_.load(std::memory_order_relaxed);
  }

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
  counter suspected_{0}, refuted_{0};
};

} // namespace kvroom
