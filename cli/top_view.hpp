#pragma once

// `kvroom top`'s arithmetic, apart from the terminal and the network: a
// Prometheus text exposition parsed into samples, and one row per rank from
// two scrapes (rates over the time between them, percentiles from the
// histograms' buckets).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvroom::cli {

struct prom_sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// The samples of `text`; comment lines skipped, malformed lines too.
std::vector<prom_sample> parse_exposition(const std::string& text);

struct top_row {
  std::string rank;  ///< rank id
  std::string role;
  bool up = false;
  double in_flight = 0;
  double succeeded = 0;
  double failed = 0;
  /// Rooms concluded per second since the previous scrape (0 on the first).
  double rooms_per_s = 0;
  /// Failures by "origin/cause", the non-zero ones.
  std::map<std::string, double> failures;
  double lifetime_p50_s = 0;
  double lifetime_p99_s = 0;
  double latency_p50_s = 0;
  double latency_p99_s = 0;
  double peers_usable = 0;
  double peers_lost = 0;
  /// Data paths by state, and batches moved to another path (all time).
  double paths_healthy = 0;
  double paths_resting = 0;
  double paths_probing = 0;
  double path_retries = 0;
};

/// The quantile `q` of histogram `name` for rank `rank`: the upper bound of
/// the first bucket holding it (0 without observations).
double histogram_quantile(const std::vector<prom_sample>& xs, const std::string& name,
                          const std::string& rank, double q);

/// One row per rank in `now`; `before` (may be empty) and `seconds` between
/// them give the rates.
std::vector<top_row> top_rows(const std::vector<prom_sample>& now,
                              const std::vector<prom_sample>& before, double seconds);

/// The rows as a fixed-width table.
std::string render(const std::string& endpoint, const std::vector<top_row>& rows);

} // namespace kvroom::cli
