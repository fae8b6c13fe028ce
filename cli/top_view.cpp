#include "top_view.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

namespace kvroom::cli {

std::vector<prom_sample> parse_exposition(const std::string& text) {
  static const std::regex sample{
    R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([-+0-9.eE]+|\+Inf|-Inf|NaN)$)"};
  static const std::regex label{R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re"};
  std::vector<prom_sample> out;
  std::istringstream in{text};
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || !std::regex_match(line, m, sample))
      continue;
    prom_sample s;
    s.name = m[1];
    auto labels = m[2].str();
    for (std::sregex_iterator i{labels.begin(), labels.end(), label}, end; i != end; ++i)
      s.labels[(*i)[1]] = (*i)[2];
    auto v = m[3].str();
    s.value = v == "+Inf"   ? std::numeric_limits<double>::infinity()
              : v == "-Inf" ? -std::numeric_limits<double>::infinity()
                            : std::strtod(v.c_str(), nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

double sum_of(const std::vector<prom_sample>& xs, const std::string& name, const std::string& rank,
              const std::map<std::string, std::string>& want = {}) {
  double out = 0;
  for (auto& s : xs) {
    if (s.name != name)
      continue;
    auto r = s.labels.find("rank");
    if (r == s.labels.end() || r->second != rank)
      continue;
    bool ok = true;
    for (auto& [k, v] : want) {
      auto l = s.labels.find(k);
      ok = ok && l != s.labels.end() && l->second == v;
    }
    if (ok)
      out += s.value;
  }
  return out;
}

} // namespace

double histogram_quantile(const std::vector<prom_sample>& xs, const std::string& name,
                          const std::string& rank, double q) {
  std::vector<std::pair<double, double>> buckets; // le, cumulative
  for (auto& s : xs) {
    if (s.name != name + "_bucket")
      continue;
    auto r = s.labels.find("rank");
    auto le = s.labels.find("le");
    if (r == s.labels.end() || r->second != rank || le == s.labels.end())
      continue;
    auto bound = le->second == "+Inf" ? std::numeric_limits<double>::infinity()
                                      : std::strtod(le->second.c_str(), nullptr);
    buckets.emplace_back(bound, s.value);
  }
  std::sort(buckets.begin(), buckets.end());
  if (buckets.empty() || buckets.back().second <= 0)
    return 0;
  auto target = q * buckets.back().second;
  for (auto& [le, n] : buckets)
    if (n >= target)
      return le;
  return buckets.back().first;
}

std::vector<top_row> top_rows(const std::vector<prom_sample>& now,
                              const std::vector<prom_sample>& before, double seconds) {
  std::vector<top_row> out;
  std::set<std::string> seen;
  for (auto& s : now) {
    if (s.name != "kvroom_up")
      continue;
    auto rank = s.labels.count("rank") ? s.labels.at("rank") : std::string{};
    if (!seen.insert(rank).second)
      continue;
    top_row r;
    r.rank = rank;
    r.role = s.labels.count("role") ? s.labels.at("role") : "";
    r.up = s.value > 0;
    r.in_flight = sum_of(now, "kvroom_rooms_in_flight", rank);
    r.succeeded = sum_of(now, "kvroom_rooms_total", rank, {{"state", "success"}});
    r.failed = sum_of(now, "kvroom_rooms_total", rank, {{"state", "failed"}});
    if (!before.empty() && seconds > 0) {
      auto then = sum_of(before, "kvroom_rooms_total", rank);
      r.rooms_per_s = std::max(0.0, (r.succeeded + r.failed - then) / seconds);
    }
    for (auto& f : now)
      if (f.name == "kvroom_failures_total" && f.value > 0 && f.labels.count("rank")
          && f.labels.at("rank") == rank)
        r.failures[f.labels.at("origin") + "/" + f.labels.at("cause")] += f.value;
    r.lifetime_p50_s = histogram_quantile(now, "kvroom_room_lifetime_seconds", rank, 0.5);
    r.lifetime_p99_s = histogram_quantile(now, "kvroom_room_lifetime_seconds", rank, 0.99);
    r.latency_p50_s = histogram_quantile(now, "kvroom_transfer_latency_seconds", rank, 0.5);
    r.latency_p99_s = histogram_quantile(now, "kvroom_transfer_latency_seconds", rank, 0.99);
    r.peers_usable = sum_of(now, "kvroom_peers", rank, {{"state", "usable"}});
    r.peers_lost = sum_of(now, "kvroom_peers", rank, {{"state", "lost"}});
    r.paths_healthy = sum_of(now, "kvroom_paths", rank, {{"state", "healthy"}});
    r.paths_resting = sum_of(now, "kvroom_paths", rank, {{"state", "resting"}});
    r.paths_probing = sum_of(now, "kvroom_paths", rank, {{"state", "probing"}});
    r.path_retries = sum_of(now, "kvroom_path_retries_total", rank);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

std::string ms(double seconds) {
  char buf[32];
  if (std::isinf(seconds))
    return ">30s";
  std::snprintf(buf, sizeof(buf), "%.2f", seconds * 1000);
  return buf;
}

} // namespace

std::string render(const std::string& endpoint, const std::vector<top_row>& rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line),
                "%-22s %-8s %-7s %3s %9s %9s %8s %9s %15s %15s %6s %9s %7s  %s\n", "endpoint",
                "rank", "role", "up", "rooms/s", "success", "failed", "in flight",
                "life p50/p99 ms", "xfer p50/p99 ms", "peers", "paths h/r/p", "retries",
                "failures");
  out += line;
  for (auto& r : rows) {
    std::string failures;
    for (auto& [k, v] : r.failures)
      failures += (failures.empty() ? "" : ", ") + k + " " + std::to_string(static_cast<long long>(v));
    auto count = [](double x) { return std::to_string(static_cast<long long>(x)); };
    auto paths = count(r.paths_healthy) + "/" + count(r.paths_resting) + "/"
                 + count(r.paths_probing);
    std::snprintf(line, sizeof(line),
                  "%-22s %-8s %-7s %3s %9.0f %9.0f %8.0f %9.0f %15s %15s %3.0f/%-2.0f %9s %7.0f  "
                  "%s\n",
                  endpoint.c_str(), r.rank.c_str(), r.role.c_str(), r.up ? "yes" : "no",
                  r.rooms_per_s, r.succeeded, r.failed, r.in_flight,
                  (ms(r.lifetime_p50_s) + "/" + ms(r.lifetime_p99_s)).c_str(),
                  (ms(r.latency_p50_s) + "/" + ms(r.latency_p99_s)).c_str(), r.peers_usable,
                  r.peers_lost, paths.c_str(), r.path_retries,
                  failures.empty() ? "-" : failures.c_str());
    out += line;
  }
  return out;
}

} // namespace kvroom::cli
