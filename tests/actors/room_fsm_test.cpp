// The room state machine, without any actor runtime: time is passed in.
#include <catch2/catch.hpp>

#include "kvroom/actors/room_fsm.hpp"

using namespace kvroom;

namespace {

rank_ref prefill_rank() {
  rank_ref r;
  r.side = role::prefill;
  r.id = 5;
  return r;
}

room_timeouts short_timeouts() {
  return room_timeouts{100, 200, 300};
}

room_fsm make_fsm(uint64_t now = 1000) {
  return room_fsm{42, prefill_rank(), short_timeouts(), now};
}

} // namespace

TEST_CASE("a new room is bootstrapping with the bootstrap deadline") {
  auto fsm = make_fsm();
  CHECK(fsm.state() == kv_poll::bootstrapping);
  CHECK(fsm.deadline_ms() == 1100);
  CHECK_FALSE(fsm.concluded());
  CHECK_FALSE(fsm.cleared());
}

TEST_CASE("non-terminal states only move forward") {
  auto fsm = make_fsm();
  CHECK(fsm.advance(kv_poll::waiting_for_input, 1010) == fsm_result::changed);
  CHECK(fsm.deadline_ms() == 1210);
  CHECK(fsm.advance(kv_poll::waiting_for_input, 1020) == fsm_result::unchanged);
  CHECK(fsm.advance(kv_poll::bootstrapping, 1020) == fsm_result::ignored_backward);
  CHECK(fsm.state() == kv_poll::waiting_for_input);
  CHECK(fsm.advance(kv_poll::transferring, 1030) == fsm_result::changed);
  CHECK(fsm.deadline_ms() == 1330);
  CHECK(fsm.advance(kv_poll::waiting_for_input, 1040) == fsm_result::ignored_backward);
  CHECK(fsm.state() == kv_poll::transferring);
}

TEST_CASE("a state may be skipped forward") {
  auto fsm = make_fsm();
  CHECK(fsm.advance(kv_poll::transferring, 1001) == fsm_result::changed);
  CHECK(fsm.state() == kv_poll::transferring);
}

TEST_CASE("Failed overrides every non-terminal state") {
  for (auto st : {kv_poll::bootstrapping, kv_poll::waiting_for_input,
                  kv_poll::transferring}) {
    auto fsm = make_fsm();
    if (st != kv_poll::bootstrapping)
      fsm.advance(st, 1001);
    CHECK(fsm.fail_local("boom", failure_cause::other) == fsm_result::changed);
    CHECK(fsm.state() == kv_poll::failed);
    CHECK(fsm.deadline_ms() == 0);
    CHECK(fsm.failure().failure_reason == "boom");
    CHECK_FALSE(fsm.failure().is_from_another_rank);
    CHECK(fsm.failure().origin_rank == 5);
    CHECK(fsm.failure().bootstrap_room == 42);
  }
}

TEST_CASE("the first conclusion wins and keeps its first root cause") {
  SECTION("a second failure does not overwrite the first") {
    auto fsm = make_fsm();
    fsm.fail_local("first", failure_cause::other);
    CHECK(fsm.fail_remote({42, "second", false, 9}) == fsm_result::ignored_terminal);
    CHECK(fsm.fail_local("third", failure_cause::other) == fsm_result::ignored_terminal);
    CHECK(fsm.failure().failure_reason == "first");
    CHECK(fsm.failure().origin_rank == 5);
  }
  SECTION("a late Success after Failed stays Failed") {
    auto fsm = make_fsm();
    fsm.fail_local("first", failure_cause::other);
    CHECK(fsm.succeed() == fsm_result::ignored_terminal);
    CHECK(fsm.state() == kv_poll::failed);
  }
  SECTION("a late Failed after Success is ignored") {
    auto fsm = make_fsm();
    fsm.advance(kv_poll::transferring, 1001);
    CHECK(fsm.succeed() == fsm_result::changed);
    CHECK(fsm.fail_remote({42, "late", false, 9}) == fsm_result::ignored_terminal);
    CHECK(fsm.fail_local("late", failure_cause::other) == fsm_result::ignored_terminal);
    CHECK(fsm.state() == kv_poll::success);
  }
  SECTION("no state change after conclusion") {
    auto fsm = make_fsm();
    fsm.succeed();
    CHECK(fsm.advance(kv_poll::transferring, 1001) == fsm_result::ignored_terminal);
    CHECK(fsm.state() == kv_poll::success);
  }
}

TEST_CASE("a propagated failure keeps the origin's reason and rank") {
  auto fsm = make_fsm();
  CHECK(fsm.fail_remote({0, "disk on fire", false, 65537}) == fsm_result::changed);
  auto& err = fsm.failure();
  CHECK(err.bootstrap_room == 42);
  CHECK(err.failure_reason == "disk on fire");
  CHECK(err.is_from_another_rank);
  CHECK(err.origin_rank == 65537);
}

TEST_CASE("a cleared room ignores everything and cannot be resurrected") {
  auto fsm = make_fsm();
  fsm.fail_local("first", failure_cause::other);
  CHECK(fsm.clear() == fsm_result::changed);
  CHECK(fsm.clear() == fsm_result::ignored_cleared);
  CHECK(fsm.advance(kv_poll::waiting_for_input, 1001) == fsm_result::ignored_cleared);
  CHECK(fsm.succeed() == fsm_result::ignored_cleared);
  CHECK(fsm.fail_local("x", failure_cause::other) == fsm_result::ignored_cleared);
  CHECK(fsm.fail_remote({42, "y", false, 1}) == fsm_result::ignored_cleared);
  CHECK(fsm.tick(999999) == fsm_result::ignored_cleared);
  CHECK(fsm.state() == kv_poll::failed);
  CHECK(fsm.failure().failure_reason == "first");
  auto live = make_fsm();
  live.clear();
  CHECK(live.succeed() == fsm_result::ignored_cleared);
  CHECK(live.state() == kv_poll::bootstrapping);
  CHECK(live.deadline_ms() == 0);
}

TEST_CASE("each non-terminal state times out on its own deadline") {
  SECTION("bootstrapping") {
    auto fsm = make_fsm(1000);
    CHECK(fsm.tick(1099) == fsm_result::unchanged);
    CHECK(fsm.tick(1100) == fsm_result::changed);
    CHECK(fsm.state() == kv_poll::failed);
    auto& reason = fsm.failure().failure_reason;
    CHECK(reason.find("timed out in bootstrapping") != std::string::npos);
    CHECK(reason.find("limit 100 ms") != std::string::npos);
    CHECK(reason.find("no decode destination") != std::string::npos);
  }
  SECTION("waiting_for_input") {
    auto fsm = make_fsm(1000);
    fsm.advance(kv_poll::waiting_for_input, 1050);
    CHECK(fsm.tick(1249) == fsm_result::unchanged);
    CHECK(fsm.tick(1250) == fsm_result::changed);
    CHECK(fsm.failure().failure_reason.find("timed out in waiting_for_input")
          != std::string::npos);
    CHECK(fsm.failure().failure_reason.find("limit 200 ms") != std::string::npos);
  }
  SECTION("transferring") {
    auto fsm = make_fsm(1000);
    fsm.advance(kv_poll::waiting_for_input, 1010);
    fsm.advance(kv_poll::transferring, 1020);
    CHECK(fsm.tick(1319) == fsm_result::unchanged);
    CHECK(fsm.tick(1320) == fsm_result::changed);
    CHECK(fsm.failure().failure_reason.find("timed out in transferring")
          != std::string::npos);
    CHECK(fsm.failure().failure_reason.find("limit 300 ms") != std::string::npos);
  }
  SECTION("a decode room names what it waited for") {
    rank_ref d;
    d.side = role::decode;
    d.id = 70000;
    room_fsm fsm{7, d, short_timeouts(), 0};
    fsm.advance(kv_poll::waiting_for_input, 0);
    fsm.tick(500);
    CHECK(fsm.failure().failure_reason.find("decode room") == 0);
    CHECK(fsm.failure().failure_reason.find("no data arrived") != std::string::npos);
    CHECK(fsm.failure().origin_rank == 70000);
  }
  SECTION("a concluded room never times out") {
    auto fsm = make_fsm(1000);
    fsm.succeed();
    CHECK(fsm.tick(999999) == fsm_result::ignored_terminal);
    CHECK(fsm.state() == kv_poll::success);
  }
}

TEST_CASE("expiry is visible without concluding, for rooms that must ask before failing") {
  auto fsm = make_fsm(1000);
  CHECK_FALSE(fsm.expired(1099));
  CHECK(fsm.expired(1100));
  CHECK(fsm.timeout_reason(1100).find("timed out in bootstrapping") != std::string::npos);
  CHECK(fsm.state() == kv_poll::bootstrapping);
  fsm.succeed();
  CHECK_FALSE(fsm.expired(999999));
}
