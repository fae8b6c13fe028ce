#include "kvroom/actors/rank_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvroom/transport/log.hpp"
#include "kvroom/transport/transport_table.hpp"

namespace kvroom {

int transport_index(const std::string& name) noexcept {
  auto i = transport_position(name);
  return i < static_cast<int>(max_transports) ? i : -1;
}

const std::vector<double>& atomic_histogram::default_bounds() {
  static const std::vector<double> bounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                          0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                          1,      2.5,     5,      10,    30};
  return bounds;
}

void atomic_histogram::observe(double seconds) noexcept {
  if (!(seconds >= 0))
    seconds = 0;
  auto& b = default_bounds();
  auto i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), seconds) - b.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(seconds * 1e9)), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

histogram_snapshot atomic_histogram::snapshot() const {
  histogram_snapshot out;
  out.bounds = default_bounds();
  for (size_t i = 0; i <= out.bounds.size(); ++i)
    out.counts.push_back(counts_[i].load(std::memory_order_relaxed));
  out.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  // The count is the buckets' sum: a reader between two increments sees a
  // consistent histogram.
  out.count = 0;
  for (auto n : out.counts)
    out.count += n;
  return out;
}

void rank_metrics::concluded(bool success, bool propagated, failure_cause cause,
                             double lifetime_s, double latency_s, uint64_t bytes,
                             int transport) noexcept {
  if (success)
    success_.fetch_add(1, std::memory_order_relaxed);
  else {
    failed_.fetch_add(1, std::memory_order_relaxed);
    failures_[propagated ? 1 : 0][static_cast<size_t>(cause)].fetch_add(
      1, std::memory_order_relaxed);
  }
  lifetime_.observe(lifetime_s);
  if (latency_s >= 0)
    latency_.observe(latency_s);
  if (transport >= 0 && static_cast<size_t>(transport) < bytes_.size() && bytes > 0)
    bytes_[static_cast<size_t>(transport)].fetch_add(bytes, std::memory_order_relaxed);
}

void rank_metrics::set_peers(uint64_t usable, uint64_t listed, uint64_t lost) noexcept {
  usable_.store(usable, std::memory_order_relaxed);
  listed_.store(listed, std::memory_order_relaxed);
  lost_.store(lost, std::memory_order_relaxed);
}

void rank_metrics::set_parked(uint64_t parked, uint64_t tombstones) noexcept {
  parked_.store(parked, std::memory_order_relaxed);
  tombstones_.store(tombstones, std::memory_order_relaxed);
}

metrics_snapshot rank_metrics::snapshot() const {
  metrics_snapshot out;
  auto get = [](const counter& x) { return x.load(std::memory_order_relaxed); };
  out.rank = self_;
  out.ready = ready_.load(std::memory_order_relaxed);
  out.rooms_success = get(success_);
  out.rooms_failed = get(failed_);
  for (size_t o = 0; o < 2; ++o)
    for (size_t c = 0; c < failure_cause_count; ++c)
      out.failures[o][c] = get(failures_[o][c]);
  out.rooms_in_flight = get(in_flight_);
  for (size_t i = 0; i < bytes_.size(); ++i)
    out.transfer_bytes[i] = get(bytes_[i]);
  out.transfer_latency = latency_.snapshot();
  out.room_lifetime = lifetime_.snapshot();
  out.peers_usable = get(usable_);
  out.peers_listed = get(listed_);
  out.peers_lost = get(lost_);
  out.peers_suspected = get(suspected_);
  out.registry_reports_refuted = get(refuted_);
  out.refused_messages = get(refused_messages_);
  out.parked = get(parked_);
  out.tombstones = get(tombstones_);
  return out;
}

namespace {

/// Label values are ours (role, state, cause names, numbers): nothing to
/// escape but what Prometheus says, done anyway.
std::string escape_label(const std::string& x) {
  std::string out;
  for (char c : x) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double x) {
  if (std::isinf(x))
    return x > 0 ? "+Inf" : "-Inf";
  std::ostringstream os;
  os.precision(12);
  os << x;
  return os.str();
}

class exposition {
public:
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
  }

  void sample(const std::string& name, const std::vector<std::pair<std::string, std::string>>& labels,
              double value) {
    out_ << name;
    if (!labels.empty()) {
      out_ << '{';
      for (size_t i = 0; i < labels.size(); ++i)
        out_ << (i ? "," : "") << labels[i].first << "=\"" << escape_label(labels[i].second)
             << '"';
      out_ << '}';
    }
    out_ << ' ' << number(value) << '\n';
  }

  std::string str() const {
    return out_.str();
  }

private:
  std::ostringstream out_;
};

using labels = std::vector<std::pair<std::string, std::string>>;

labels of(const metrics_snapshot& r) {
  return {{"rank", std::to_string(r.rank.id)}, {"role", to_string(r.rank.side)}};
}

labels with(labels base, std::string key, std::string value) {
  base.emplace_back(std::move(key), std::move(value));
  return base;
}

void histogram(exposition& e, const char* name, const char* help,
               const std::vector<metrics_snapshot>& ranks,
               histogram_snapshot metrics_snapshot::*which) {
  e.family(name, "histogram", help);
  for (auto& r : ranks) {
    auto& h = r.*which;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      auto le = i < h.bounds.size() ? number(h.bounds[i]) : std::string{"+Inf"};
      e.sample(std::string{name} + "_bucket", with(of(r), "le", le),
               static_cast<double>(cumulative));
    }
    e.sample(std::string{name} + "_sum", of(r), h.sum);
    e.sample(std::string{name} + "_count", of(r), static_cast<double>(h.count));
  }
}

/// A counter family with one sample per rank and transport of the table.
void by_transport(exposition& e, const char* name, const char* help,
                  const std::vector<metrics_snapshot>& ranks,
                  std::array<uint64_t, max_path_transports> path_counters::*which) {
  e.family(name, "counter", help);
  for (auto& r : ranks)
    for (auto* row : transport_table())
      if (auto i = transport_position(row->name);
          i >= 0 && static_cast<size_t>(i) < max_path_transports)
        e.sample(name, with(of(r), "transport", row->name),
                 static_cast<double>((r.paths.*which)[static_cast<size_t>(i)]));
}

/// One sample per state of a rank: `states` pairs each `state` label with
/// the member of the snapshot that counts it.
void by_state(exposition& e, const char* name, const metrics_snapshot& r,
              std::initializer_list<std::pair<const char*, uint64_t metrics_snapshot::*>> states) {
  for (auto& [state, member] : states)
    e.sample(name, with(of(r), "state", state), static_cast<double>(r.*member));
}

} // namespace

std::string prometheus_text(const std::vector<metrics_snapshot>& ranks,
                            const refusal_counts& refusals) {
  exposition e;
  e.family("kvroom_up", "gauge", "1 once the rank joined its deployment");
  for (auto& r : ranks)
    e.sample("kvroom_up", of(r), r.ready ? 1 : 0);
  e.family("kvroom_rooms_total", "counter", "Rooms that reached a terminal state, by state");
  for (auto& r : ranks)
    by_state(e, "kvroom_rooms_total", r,
             {{"success", &metrics_snapshot::rooms_success},
              {"failed", &metrics_snapshot::rooms_failed}});
  e.family("kvroom_failures_total", "counter",
           "Failed rooms by origin (local: identified on this rank; propagated: learned "
           "from the origin) and cause class");
  for (auto& r : ranks)
    for (size_t o = 0; o < 2; ++o)
      for (size_t c = 0; c < failure_cause_count; ++c)
        e.sample("kvroom_failures_total",
                 with(with(of(r), "origin", o == 0 ? "local" : "propagated"), "cause",
                      to_string(static_cast<failure_cause>(c))),
                 static_cast<double>(r.failures[o][c]));
  e.family("kvroom_rooms_in_flight", "gauge", "Rooms open on the rank (not yet cleared)");
  for (auto& r : ranks)
    e.sample("kvroom_rooms_in_flight", of(r), static_cast<double>(r.rooms_in_flight));
  e.family("kvroom_transfer_bytes_total", "counter",
           "KV, state and aux bytes this rank moved, by data plane");
  for (auto& r : ranks)
    for (auto* row : transport_table())
      if (auto i = transport_index(row->name); i >= 0)
        e.sample("kvroom_transfer_bytes_total", with(of(r), "transport", row->name),
                 static_cast<double>(r.transfer_bytes[static_cast<size_t>(i)]));
  histogram(e, "kvroom_transfer_latency_seconds",
            "Prefill: the last chunk reaching the room to its terminal state; decode: the "
            "destination handed over to the terminal state",
            ranks, &metrics_snapshot::transfer_latency);
  histogram(e, "kvroom_room_lifetime_seconds", "A room's open to its terminal state", ranks,
            &metrics_snapshot::room_lifetime);
  e.family("kvroom_peers", "gauge",
           "Other ranks by state (usable: linked and proven; listed: named by the registry, "
           "not linked yet; lost: gone, within the loss window; suspected: reported lost by "
           "the registry, never linked here, being checked)");
  for (auto& r : ranks)
    by_state(e, "kvroom_peers", r,
             {{"usable", &metrics_snapshot::peers_usable},
              {"listed", &metrics_snapshot::peers_listed},
              {"lost", &metrics_snapshot::peers_lost},
              {"suspected", &metrics_snapshot::peers_suspected}});
  e.family("kvroom_registry_reports_refuted_total", "counter",
           "The registry's reports of a rank's loss that this rank found false (the rank "
           "answered): a registry that stalls or loses its network");
  for (auto& r : ranks)
    e.sample("kvroom_registry_reports_refuted_total", of(r),
             static_cast<double>(r.registry_reports_refuted));
  e.family("kvroom_refused_total", "counter",
           "What strangers and bad peers were refused: control messages from senders that "
           "never proved membership (per rank); control connections and data-plane "
           "connections and batches (per process)");
  for (auto& r : ranks)
    e.sample("kvroom_refused_total", with(of(r), "what", "control_message"),
             static_cast<double>(r.refused_messages));
  for (auto& [what, n] : refusals)
    e.sample("kvroom_refused_total", {{"what", what}}, static_cast<double>(n));
  e.family("kvroom_parked", "gauge", "Messages held for rooms or deciders not known yet");
  for (auto& r : ranks)
    e.sample("kvroom_parked", of(r), static_cast<double>(r.parked));
  e.family("kvroom_tombstones", "gauge", "Cleared room ids remembered (bounded)");
  for (auto& r : ranks)
    e.sample("kvroom_tombstones", of(r), static_cast<double>(r.tombstones));
  e.family("kvroom_paths", "gauge",
           "Data paths to peers this rank sent on, by state (healthy; resting after repeated "
           "errors; probing: rested, carrying one batch until it succeeds)");
  for (auto& r : ranks)
    for (size_t i = 0; i < r.paths.paths.size(); ++i)
      e.sample("kvroom_paths", with(of(r), "state", to_string(static_cast<path_state>(i))),
               static_cast<double>(r.paths.paths[i]));
  by_transport(e, "kvroom_path_retries_total",
               "Batches (or slices) moved to another path after theirs failed, by the failed "
               "path's transport",
               ranks, &path_counters::retries);
  by_transport(e, "kvroom_path_fallbacks_total",
               "Batches sent on a farther transport because every nearer path rested or "
               "failed them, by the transport taken",
               ranks, &path_counters::fallbacks);
  e.family("kvroom_path_rests_total", "counter", "Times a data path was sent to rest");
  for (auto& r : ranks)
    e.sample("kvroom_path_rests_total", of(r), static_cast<double>(r.paths.rests));
  e.family("kvroom_path_exhausted_total", "counter",
           "Batches that failed because every path to their peer failed them");
  for (auto& r : ranks)
    e.sample("kvroom_path_exhausted_total", of(r), static_cast<double>(r.paths.exhausted));
  return e.str();
}

refusal_counts process_refusals() {
  refusal_counts out;
  for (auto& [kind, n] : detail::limited_warning_counts()) {
    auto what = kind;
    for (auto& c : what)
      if (c == '-')
        c = '_';
    out.emplace_back(std::move(what), n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

health_report health_of(const std::vector<metrics_snapshot>& ranks) {
  health_report out;
  out.ready = !ranks.empty();
  auto doc = nlohmann::ordered_json::object();
  auto list = nlohmann::ordered_json::array();
  for (auto& r : ranks) {
    bool ok = r.ready && r.peers_lost == 0;
    out.ready = out.ready && ok;
    list.push_back({{"rank", to_string(r.rank)},
                    {"rank_id", r.rank.id},
                    {"ready", ok},
                    {"joined", r.ready},
                    {"peers_usable", r.peers_usable},
                    {"peers_listed", r.peers_listed},
                    {"peers_lost", r.peers_lost},
                    {"rooms_in_flight", r.rooms_in_flight}});
  }
  doc["ready"] = out.ready;
  doc["ranks"] = std::move(list);
  out.body = doc.dump();
  return out;
}

} // namespace kvroom
