#include <catch2/catch.hpp>

#include <chrono>

#include "caf/all.hpp"

#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/quiet_clock.hpp"
#include "kvroom/api/runtime.hpp"
#include "kvroom/kit/harness.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

namespace {

struct idle_state {};

struct mute_state {
  std::vector<caf::response_promise> held;
};

/// Takes requests and never answers them (the promises are kept).
caf::behavior mute(counted_actor<mute_state>* self) {
  return {[=](caf::atom_value) -> caf::response_promise {
    auto rp = self->make_response_promise();
    self->state.held.push_back(rp);
    return rp;
  }};
}

runtime_options quiet_options(bool quiet) {
  runtime_options o;
  o.log_level = "off";
  o.quiet_clock = quiet;
  return o;
}

/// Ends at once, having set no timeout.
caf::behavior brief(counted_actor<idle_state>* self) {
  self->quit();
  return {};
}

/// Asks `peer` (which never answers) with a timeout, and reports the error.
caf::behavior asker(counted_actor<idle_state>* self, caf::actor peer, caf::actor report) {
  self->request(peer, 50ms, caf::atom("ping"))
    .then([=](caf::atom_value) { self->send(report, caf::atom("answered")); self->quit(); },
          [=](caf::error& err) {
            self->send(report, err == caf::sec::request_timeout ? caf::atom("timedout")
                                                                : caf::atom("error"));
            self->quit();
          });
  return {};
}

} // namespace

TEST_CASE("quiet clock: actors that set no timeout end without a word to the clock thread") {
  runtime rt{quiet_options(true)};
  auto* clock = detail::quiet_clock_of(rt.system());
  REQUIRE(clock != nullptr);
  auto skipped = clock->skipped();
  {
    caf::scoped_actor self{rt.system()};
    for (int i = 0; i < 100; ++i)
      self->spawn<caf::monitored>(brief);
    for (int i = 0; i < 100; ++i)
      self->receive([](caf::down_msg&) {});
  }
  // An actor's monitors hear of its end just before it cancels its timeouts.
  CHECK(harness::wait_until([&] { return clock->skipped() >= skipped + 100; }, 5s));
}

TEST_CASE("quiet clock: a request timeout still fires, and its actor's end is forwarded") {
  runtime rt{quiet_options(true)};
  auto* clock = detail::quiet_clock_of(rt.system());
  REQUIRE(clock != nullptr);
  auto forwarded = clock->forwarded();
  caf::scoped_actor self{rt.system()};
  auto peer = rt.system().spawn(mute);
  self->spawn<caf::monitored>(asker, peer, caf::actor{self});
  bool timed_out = false;
  self->receive([&](caf::atom_value what) { timed_out = what == caf::atom("timedout"); },
                caf::after(5s) >> [] {});
  CHECK(timed_out);
  bool ended = false;
  self->receive([&](caf::down_msg&) { ended = true; }, caf::after(5s) >> [] {});
  REQUIRE(ended);
  // The asker ended after its timeout fired: its cancellation went through
  // (just after its monitors heard of its end).
  CHECK(harness::wait_until([&] { return clock->forwarded() > forwarded; }, 5s));
  // kvroom actors take an exit only from an actor of this process (counted_actor).
  self->send_exit(peer, caf::exit_reason::user_shutdown);
}

TEST_CASE("quiet clock: off, the system runs CAF's own clock") {
  runtime rt{quiet_options(false)};
  CHECK(detail::quiet_clock_of(rt.system()) == nullptr);
}

TEST_CASE("quiet workers: each job runs without CAF's logger, and the workers count them") {
  runtime rt{quiet_options(true)};
  auto& sys = rt.system();
  auto before = detail::resumed_jobs(sys);
  // A spawn from a job sets CAF's logger on its worker's thread (CAF's
  // spawn does); the worker clears it before its next job, so the probe,
  // whichever thread runs it after the spawner, sees none.
  auto spawner = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](caf::atom_value) {
      self->spawn([](caf::event_based_actor*) -> caf::behavior { return {}; });
      return caf::logger::current_logger() != nullptr;
    }};
  });
  auto probe = sys.spawn([]() -> caf::behavior {
    return {[](caf::atom_value) { return caf::logger::current_logger() == nullptr; }};
  });
  caf::scoped_actor self{sys};
  int spawner_had = 0, probe_had_none = 0;
  for (int i = 0; i < 20; ++i) {
    self->request(spawner, 5s, caf::atom("spawn"))
      .receive([&](bool had) { spawner_had += had ? 1 : 0; }, [](caf::error&) {});
    self->request(probe, 5s, caf::atom("probe"))
      .receive([&](bool none) { probe_had_none += none ? 1 : 0; }, [](caf::error&) {});
  }
  CHECK(spawner_had == 20);
#if CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET
  CHECK(probe_had_none == 20);
  CHECK(detail::resumed_jobs(sys) >= before + 40);
#else
  // A CAF built to log keeps CAF's own worker and logger.
  CHECK(probe_had_none == 0);
  CHECK(detail::resumed_jobs(sys) == 0);
#endif
  self->send_exit(spawner, caf::exit_reason::user_shutdown);
  self->send_exit(probe, caf::exit_reason::user_shutdown);
}

TEST_CASE("quiet workers: off, the system runs CAF's own workers") {
  runtime rt{quiet_options(false)};
  caf::scoped_actor self{rt.system()};
  auto echo = rt.system().spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  self->request(echo, 5s, 1).receive([](int) {}, [](caf::error&) {});
  CHECK(detail::resumed_jobs(rt.system()) == 0);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}
