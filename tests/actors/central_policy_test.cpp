#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/actors/quiet_clock.hpp"
#include "kvroom/api/runtime.hpp"
#include "kvroom/kit/harness.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

// kvroom's central queue (actors/central_policy.hpp): no job is lost or
// left waiting, whether the workers are busy, spinning or asleep. Each
// test waits for every job's effect with a bound, never for a time.

namespace {

runtime_options central_options(size_t threads) {
  runtime_options o;
  o.log_level = "off";
  o.max_threads = threads;
  return o;
}

/// Bounces a count back and forth with its partner until it reaches zero,
/// then adds one to `done`.
caf::behavior bouncer(caf::event_based_actor* self, std::atomic<int>* done) {
  return {[=](caf::actor partner, int left) {
    if (left == 0) {
      done->fetch_add(1);
      self->quit();
      return;
    }
    self->send(partner, caf::actor_cast<caf::actor>(self), left - 1);
    if (left == 1)
      self->quit();
  }};
}

/// Starts `pairs` pairs bouncing `hops` messages each.
void start_pairs(caf::actor_system& sys, std::atomic<int>& done, int pairs, int hops) {
  for (int i = 0; i < pairs; ++i) {
    auto a = sys.spawn(bouncer, &done);
    auto b = sys.spawn(bouncer, &done);
    caf::anon_send(a, b, hops);
  }
}

} // namespace

TEST_CASE("central policy: the runtime's default scheduler is kvroom's central queue") {
  runtime rt{central_options(0)};
  CHECK(detail::runs_central_policy(rt.system()));
  runtime_options caf_sharing = central_options(0);
  caf_sharing.scheduler_policy = "sharing";
  runtime other{caf_sharing};
  CHECK_FALSE(detail::runs_central_policy(other.system()));
}

TEST_CASE("central policy: ping-pong pairs all finish, in bursts with idle workers between") {
  // More workers than cores: workers contend for the queue, one spins and
  // the others sleep, and the idle gap between bursts lets every worker
  // fall asleep, so each burst starts with wake-ups.
  runtime rt{central_options(4)};
  auto& sys = rt.system();
  std::atomic<int> done{0};
  int expected = 0;
  for (int burst = 0; burst < 20; ++burst) {
    start_pairs(sys, done, 50, 40);
    expected += 50;
    REQUIRE(harness::wait_until([&] { return done.load() == expected; }, 20s));
    std::this_thread::sleep_for(2ms);
  }
  CHECK(done.load() == expected);
}

TEST_CASE("central policy: one message at a time from outside the workers always runs") {
  // The pattern of one room at a time: every job comes from a thread that
  // is not a worker, after the workers went idle.
  runtime rt{central_options(2)};
  auto& sys = rt.system();
  std::atomic<int> done{0};
  for (int i = 0; i < 300; ++i) {
    start_pairs(sys, done, 1, 1);
    REQUIRE(harness::wait_until([&] { return done.load() == i + 1; }, 10s));
    if (i % 30 == 0)
      std::this_thread::sleep_for(1ms);
  }
  CHECK(done.load() == 300);
}

TEST_CASE("central policy: a burst of spawns from several threads all run") {
  runtime rt{central_options(2)};
  auto& sys = rt.system();
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] { start_pairs(sys, done, 2000, 3); });
  for (auto& t : threads)
    t.join();
  REQUIRE(harness::wait_until([&] { return done.load() == 6000; }, 60s));
}
