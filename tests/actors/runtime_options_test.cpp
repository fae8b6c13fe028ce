#include <catch2/catch.hpp>

#include <stdexcept>

#include "caf/actor_system_config.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/api/runtime.hpp"

using namespace kvroom;

// Options a runtime cannot work with are refused with the field that is
// wrong, before anything is set up: CAF 0.17 itself would run an unknown
// policy as work stealing, and an unknown log level left the level as it was.

namespace {

std::string why(const runtime_options& o) {
  auto err = check_options(o);
  return err ? describe(err) : std::string{};
}

} // namespace

TEST_CASE("runtime options: the defaults and every named policy and level pass") {
  runtime_options o;
  CHECK(why(o).empty());
  for (auto policy : {"central", "sharing", "stealing"}) {
    o.scheduler_policy = policy;
    CHECK(known_scheduler_policy(policy));
    CHECK(why(o).empty());
  }
  for (auto level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    o.log_level = level;
    CHECK(why(o).empty());
  }
  o.network = true;
  CHECK(why(o).empty()); // heartbeat 100 ms, timeout 1000 ms
}

TEST_CASE("runtime options: each refusal names what is wrong") {
  runtime_options o;
  o.scheduler_policy = "Central";
  CHECK_FALSE(known_scheduler_policy(o.scheduler_policy));
  CHECK_THAT(why(o), Catch::Contains("scheduler policy 'Central'")
                       && Catch::Contains("central, sharing or stealing"));
  o = {};
  o.log_level = "verbose";
  CHECK_THAT(why(o), Catch::Contains("log level 'verbose'"));
  o = {};
  o.tls_certificate = "cert.pem";
  o.tls_key = "key.pem";
  CHECK_THAT(why(o), Catch::Contains("all three"));
  o = {};
  o.network = true;
  o.heartbeat_ms = 0;
  CHECK_THAT(why(o), Catch::Contains("heartbeat of 0 ms"));
  o.heartbeat_ms = 500;
  o.connection_timeout_ms = 500;
  CHECK_THAT(why(o), Catch::Contains("not above the heartbeat"));
  // Off the network the heartbeat is not used: no reason to refuse.
  o.network = false;
  CHECK(why(o).empty());
}

TEST_CASE("runtime options: prepare_config refuses them before it touches the config") {
  runtime_options o;
  o.scheduler_policy = "fifo";
  caf::actor_system_config cfg;
  auto before = cfg.module_factories.size();
  CHECK_THROWS_WITH(prepare_config(cfg, o), Catch::Contains("scheduler policy 'fifo'"));
  CHECK(cfg.module_factories.size() == before);
  CHECK_THROWS_AS(runtime{o}, std::invalid_argument);
}
