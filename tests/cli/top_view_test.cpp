// `kvroom top`'s arithmetic: an exposition parsed, rates between two
// scrapes, percentiles from cumulative buckets, the table rendered.
#include <catch2/catch.hpp>

#include "top_view.hpp"

using namespace kvroom::cli;

namespace {

std::string scrape(double success, double failed) {
  return "# HELP kvroom_up up\n# TYPE kvroom_up gauge\n"
         "kvroom_up{rank=\"0\",role=\"prefill\"} 1\n"
         "kvroom_rooms_total{rank=\"0\",role=\"prefill\",state=\"success\"} "
         + std::to_string(success) + "\n"
         "kvroom_rooms_total{rank=\"0\",role=\"prefill\",state=\"failed\"} "
         + std::to_string(failed) + "\n"
         "kvroom_failures_total{rank=\"0\",role=\"prefill\",origin=\"local\",cause=\"fault\"} "
         + std::to_string(failed) + "\n"
         "kvroom_failures_total{rank=\"0\",role=\"prefill\",origin=\"local\",cause=\"abort\"} 0\n"
         "kvroom_room_lifetime_seconds_bucket{rank=\"0\",role=\"prefill\",le=\"0.001\"} 50\n"
         "kvroom_room_lifetime_seconds_bucket{rank=\"0\",role=\"prefill\",le=\"0.01\"} 99\n"
         "kvroom_room_lifetime_seconds_bucket{rank=\"0\",role=\"prefill\",le=\"+Inf\"} 100\n"
         "kvroom_peers{rank=\"0\",role=\"prefill\",state=\"usable\"} 3\n"
         "kvroom_refused_total{what=\"control_gate\"} 2\n"
         "garbage line\n";
}

} // namespace

TEST_CASE("kvroom top: rates, percentiles and failures from two scrapes") {
  auto a = parse_exposition(scrape(100, 5));
  auto b = parse_exposition(scrape(300, 25));
  REQUIRE(a.size() == 10); // the garbage line skipped
  CHECK(a[1].labels.at("state") == "success");
  auto rows = top_rows(b, a, 2.0);
  REQUIRE(rows.size() == 1);
  auto& r = rows[0];
  CHECK(r.rank == "0");
  CHECK(r.role == "prefill");
  CHECK(r.up);
  CHECK(r.succeeded == 300);
  CHECK(r.rooms_per_s == Approx(110.0)); // (325 - 105) / 2 s
  CHECK(r.failures.size() == 1);
  CHECK(r.failures.at("local/fault") == 25);
  CHECK(r.lifetime_p50_s == Approx(0.001));
  CHECK(r.lifetime_p99_s == Approx(0.01));
  CHECK(r.peers_usable == 3);
  CHECK(top_rows(b, {}, 0)[0].rooms_per_s == 0);
  auto table = render("127.0.0.1:9", rows);
  CHECK(table.find("local/fault 25") != std::string::npos);
  CHECK(table.find("prefill") != std::string::npos);
}

TEST_CASE("kvroom top: a rank's data paths by state and their retries") {
  std::string text = "kvroom_up{rank=\"4\",role=\"prefill\"} 1\n"
                     "kvroom_paths{rank=\"4\",role=\"prefill\",state=\"healthy\"} 3\n"
                     "kvroom_paths{rank=\"4\",role=\"prefill\",state=\"resting\"} 1\n"
                     "kvroom_paths{rank=\"4\",role=\"prefill\",state=\"probing\"} 0\n"
                     "kvroom_path_retries_total{rank=\"4\",role=\"prefill\",transport=\"tcp\"} 7\n"
                     "kvroom_path_retries_total{rank=\"4\",role=\"prefill\",transport=\"verbs\"} 2\n";
  auto rows = top_rows(parse_exposition(text), {}, 0);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].paths_healthy == 3);
  CHECK(rows[0].paths_resting == 1);
  CHECK(rows[0].path_retries == 9);
  auto table = render("x", rows);
  CHECK(table.find("paths h/r/p") != std::string::npos);
  CHECK(table.find("3/1/0") != std::string::npos);
}
