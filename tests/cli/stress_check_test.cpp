// The stress checker must catch each broken invariant: fabricated runs.
#include <catch2/catch.hpp>

#include "stress_check.hpp"

using namespace kvroom;
using namespace kvroom::stress;

namespace {

rank_ref r(role side, int tp) {
  rank_ref x;
  x.side = side;
  x.tp_rank = tp;
  x.tp_size = 2;
  x.id = default_rank_id(side, 0, tp, 2);
  return x;
}

/// A 2P x 2D room where every rank ended in `st`.
room_record room(kv_poll st) {
  room_record rec;
  rec.room = 9;
  for (auto side : {role::prefill, role::decode})
    for (int t = 0; t < 2; ++t)
      rec.outcomes.push_back({r(side, t), st, std::nullopt});
  return rec;
}

/// The same room failed by a fault on prefill tp1, propagated to the rest.
room_record failed_room() {
  auto rec = room(kv_poll::failed);
  rec.fault = {fault_kind::transfer, 1, "after_post", true};
  for (auto& o : rec.outcomes)
    o.error = kv_transfer_error{9, "injected", o.rank.id != 1, 1};
  return rec;
}

bool mentions(const std::vector<violation>& vs, const std::string& text) {
  for (auto& v : vs)
    if (v.what.find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("a clean success and a clean failure pass") {
  CHECK(check_room(room(kv_poll::success)).empty());
  CHECK(check_room(failed_room()).empty());
}

TEST_CASE("a room stuck in a non-terminal state is caught") {
  auto rec = room(kv_poll::success);
  rec.outcomes[2].state = kv_poll::transferring;
  auto vs = check_room(rec);
  REQUIRE(vs.size() == 1);
  CHECK(vs[0].rank == rec.outcomes[2].rank.id);
  CHECK(vs[0].what == "stuck in transferring");
}

TEST_CASE("Success and Failed on the same side are caught") {
  auto rec = failed_room();
  rec.outcomes[0].state = kv_poll::success;
  rec.outcomes[0].error.reset();
  CHECK(mentions(check_room(rec), "of the same side is Success"));
}

TEST_CASE("a failure that was not propagated is caught") {
  auto rec = failed_room();
  // Decode tp0 timed out on its own instead of learning the root cause.
  rec.outcomes[2].error = kv_transfer_error{9, "timed out", false, rec.outcomes[2].rank.id};
  auto vs = check_room(rec);
  CHECK(mentions(vs, "root cause differs"));
  CHECK(mentions(vs, "report themselves as origin"));
}

TEST_CASE("a propagated failure that lost its origin rank is caught") {
  auto rec = failed_room();
  rec.outcomes[3].error->origin_rank = -1;
  CHECK(mentions(check_room(rec), "root cause differs"));
}

TEST_CASE("a failure without a fault, or at the wrong rank, is caught") {
  auto rec = failed_room();
  rec.fault = {};
  CHECK(mentions(check_room(rec), "failed without an injected fault"));
  rec = failed_room();
  rec.fault.rank = 0;
  CHECK(mentions(check_room(rec), "fault was injected on rank 0"));
}

TEST_CASE("Success over wrong data is caught") {
  auto rec = room(kv_poll::success);
  rec.data_error = "buffer 0 page 3 byte 17 differs";
  CHECK(mentions(check_room(rec), "Success over wrong data"));
}

TEST_CASE("a lost rank is an origin outside the room: every member is propagated") {
  auto rec = room(kv_poll::failed);
  rec.fault = {fault_kind::kill_room, 4242, "", true};
  for (auto& o : rec.outcomes)
    o.error = kv_transfer_error{9, "rank lost", true, 4242};
  CHECK(check_room(rec).empty());
  rec.outcomes[1].error->is_from_another_rank = false;
  CHECK_FALSE(check_room(rec).empty());
}

TEST_CASE("concurrent faults allow any of their origins, and only those") {
  auto rec = failed_room();
  rec.fault = {fault_kind::outage, -1, "", true};
  rec.concurrent_origins = {1, 4242};
  rec.outcomes[2].error = kv_transfer_error{9, "rank lost", true, 4242};
  CHECK(check_room(rec).empty());
  rec.outcomes[3].error = kv_transfer_error{9, "disk on fire", false, rec.outcomes[3].rank.id};
  CHECK(mentions(check_room(rec), "which no fault hit"));
  // One timeout provoked by the outage is allowed; a fourth cause is not.
  rec.outcomes[3].error = kv_transfer_error{9, "decode room timed out", false, rec.outcomes[3].rank.id};
  CHECK(check_room(rec).empty());
  rec.outcomes[0].error = kv_transfer_error{9, "prefill room timed out", false, rec.outcomes[0].rank.id};
  CHECK(mentions(check_room(rec), "different root causes"));
}
