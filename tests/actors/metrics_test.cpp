// The rank's metrics without an actor system: failure reasons kvroom writes
// fall into their cause class, the snapshot counts what it was told, and
// the Prometheus exposition parses (HELP and TYPE for every family, valid
// samples, cumulative histogram buckets ending in +Inf = count).
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/rank_metrics.hpp"

using namespace kvroom;

namespace {

/// Families (name -> type) and samples of a text exposition; fails the test
/// on a line that is not one.
struct parsed {
  std::map<std::string, std::string> types;
  std::set<std::string> helps;
  std::vector<std::tuple<std::string, std::string, double>> samples; // name, labels, value
};

parsed parse(const std::string& text) {
  parsed out;
  std::istringstream in{text};
  std::string line;
  std::regex help{R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)"};
  std::regex type{R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)"};
  std::regex sample{
    R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*)?\})? ([-+0-9.eE]+|\+Inf|-Inf|NaN)$)"};
  std::smatch m;
  while (std::getline(in, line)) {
    INFO(line);
    if (std::regex_match(line, m, help)) {
      out.helps.insert(m[1]);
    } else if (std::regex_match(line, m, type)) {
      REQUIRE(out.types.count(m[1]) == 0);
      out.types[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample)) {
      auto v = m[7].str();
      out.samples.emplace_back(m[1], m[3], v == "+Inf" ? 1e308 : std::stod(v));
    } else {
      FAIL("not an exposition line");
    }
  }
  return out;
}

std::string family_of(const std::string& sample, const std::map<std::string, std::string>& types) {
  for (auto suffix : {"_bucket", "_sum", "_count"}) {
    auto s = std::string{suffix};
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      auto base = sample.substr(0, sample.size() - s.size());
      if (types.count(base) && types.at(base) == "histogram")
        return base;
    }
  }
  return sample;
}

} // namespace

TEST_CASE("failure causes: one list gives the enum, its names and its count") {
  CHECK(failure_cause_count == 10);
  std::set<std::string> names;
  for (size_t c = 0; c < failure_cause_count; ++c) {
    auto x = static_cast<failure_cause>(c);
    auto name = to_string(x);
    CHECK_FALSE(name.empty());
    CHECK(failure_cause_named(name) == x);
    names.insert(name);
  }
  CHECK(names.size() == failure_cause_count);
  CHECK(to_string(failure_cause::timeout_bootstrapping) == "timeout_bootstrapping");
  CHECK(to_string(failure_cause::integrity) == "integrity");
  CHECK(failure_cause_named("no such cause") == failure_cause::other);
}

TEST_CASE("a rank's metrics count what happened and render as valid Prometheus text") {
  rank_ref me;
  me.side = role::decode;
  me.id = 65536;
  rank_metrics m{me};
  m.set_ready(true);
  m.set_in_flight(3);
  m.concluded(true, false, failure_cause::other, 0.004, 0.002, 4096, transport_index("shm"));
  m.concluded(true, false, failure_cause::other, 0.5, -1, 0, -1);
  m.concluded(false, true, failure_cause::fault, 0.02, 0.01, 0, -1);
  m.concluded(false, false, failure_cause::timeout_waiting, 40, -1, 0, -1);
  m.set_peers(2, 1, 1);
  m.stranger();
  m.set_parked(5, 9);
  m.set_suspected(1);
  m.report_refuted();
  m.report_refuted();
  auto s = m.snapshot();
  CHECK(s.rooms_success == 2);
  CHECK(s.rooms_failed == 2);
  CHECK(s.failures[1][static_cast<size_t>(failure_cause::fault)] == 1);
  CHECK(s.failures[0][static_cast<size_t>(failure_cause::timeout_waiting)] == 1);
  CHECK(s.transfer_bytes[static_cast<size_t>(transport_index("shm"))] == 4096);
  CHECK(s.room_lifetime.count == 4);
  CHECK(s.transfer_latency.count == 2);
  // 40 s is beyond the last bound: the +Inf bucket.
  CHECK(s.room_lifetime.counts.back() == 1);
  auto text = prometheus_text({s}, {{"tcp_refused_batch", 4}});
  auto p = parse(text);
  // Every sample's family has HELP and TYPE.
  for (auto& [name, labels, value] : p.samples) {
    INFO(name);
    auto fam = family_of(name, p.types);
    CHECK(p.types.count(fam) == 1);
    CHECK(p.helps.count(fam) == 1);
  }
  for (auto fam : {"kvroom_rooms_total", "kvroom_failures_total", "kvroom_rooms_in_flight",
                   "kvroom_transfer_bytes_total", "kvroom_transfer_latency_seconds",
                   "kvroom_room_lifetime_seconds", "kvroom_peers", "kvroom_refused_total",
                   "kvroom_parked", "kvroom_tombstones", "kvroom_up",
                   "kvroom_registry_reports_refuted_total"})
    CHECK(p.types.count(fam) == 1);
  auto value = [&](const std::string& name, const std::string& labels) {
    for (auto& [n, l, v] : p.samples)
      if (n == name && l == labels)
        return v;
    FAIL("no sample " << name << "{" << labels << "}");
    return -1.0;
  };
  CHECK(value("kvroom_rooms_total", R"(rank="65536",role="decode",state="success")") == 2);
  CHECK(value("kvroom_failures_total",
              R"(rank="65536",role="decode",origin="propagated",cause="fault")")
        == 1);
  CHECK(value("kvroom_failures_total",
              R"(rank="65536",role="decode",origin="local",cause="timeout_waiting")")
        == 1);
  CHECK(value("kvroom_refused_total", R"(what="tcp_refused_batch")") == 4);
  CHECK(value("kvroom_room_lifetime_seconds_count", R"(rank="65536",role="decode")") == 4);
  CHECK(value("kvroom_room_lifetime_seconds_bucket", R"(rank="65536",role="decode",le="+Inf")")
        == 4);
  CHECK(value("kvroom_peers", R"(rank="65536",role="decode",state="lost")") == 1);
  CHECK(value("kvroom_peers", R"(rank="65536",role="decode",state="suspected")") == 1);
  CHECK(value("kvroom_registry_reports_refuted_total", R"(rank="65536",role="decode")") == 2);
  // Buckets are cumulative.
  double last = -1;
  for (auto& [n, l, v] : p.samples)
    if (n == "kvroom_room_lifetime_seconds_bucket") {
      CHECK(v >= last);
      last = v;
    }
  // Health: a lost peer makes the rank not ready.
  auto h = health_of({s});
  CHECK_FALSE(h.ready);
  CHECK(h.body.find("\"peers_lost\":1") != std::string::npos);
  m.set_peers(2, 0, 0);
  CHECK(health_of({m.snapshot()}).ready);
}

TEST_CASE("JSON log lines carry an event's fields and survive any reason") {
  auto line = json_log_line("2026-12-01T00:00:00.000Z", "warning", "kvroom",
                            R"({"event":"room_failed","room":7,"reason":"a \"quoted\"\nline\u0001"})");
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find(R"("event":"room_failed")") != std::string::npos);
  CHECK(line.find(R"("reason":"a \"quoted\"\nline\u0001")") != std::string::npos);
  CHECK(line.find(R"("msg")") == std::string::npos);
  auto text = json_log_line("t", "info", "kvroom", "plain {text} with \"quotes\"\tand\ttabs");
  CHECK(text.find(R"("msg":"plain {text} with \"quotes\"\tand\ttabs")") != std::string::npos);
  // Bytes that are not UTF-8 are replaced, never a broken line.
  auto bad = json_log_line("t", "info", "kvroom", std::string("bad \xff byte"));
  CHECK(bad.find("bad ") != std::string::npos);
}
