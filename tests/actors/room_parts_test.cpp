// Who counts which part, who hears the commit, and what a room with no
// protocol on a rank answers: the decisions the room actors used to make
// themselves, now the protocol's, each on one rank's protocol with time
// passed in. Also the one interpreter of effects (`carry_out`) and the one
// place time rules live (`room_timing`).
#include <catch2/catch.hpp>

#include <algorithm>

#include "caf/all.hpp"

#include "kvroom/actors/room/room_port.hpp"
#include "kvroom/messages/room_messages.hpp"
#include "kvroom/actors/room/room_protocol.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

constexpr room_id room = 7;

rank_ref make_rank(role side, int32_t tp, int32_t tp_size, rank_id id) {
  return test::make_rank(side, 0, tp, id, tp_size);
}

room_timeouts timeouts() {
  return test::short_timeouts();
}

std::vector<const room_effect*> of_kind(const room_effects& fx, room_effect::kind k) {
  std::vector<const room_effect*> out;
  for (auto& e : fx)
    if (e.what == k)
      out.push_back(&e);
  return out;
}

bool published(const room_effects& fx, kv_poll state) {
  return std::any_of(fx.begin(), fx.end(), [&](const room_effect& e) {
    return e.what == room_effect::kind::publish && e.state == state;
  });
}

} // namespace

TEST_CASE("the decider counts the parts it is the only source of; the last one commits") {
  auto me = make_rank(role::prefill, 0, 1, 0);
  room_protocol p{room, me, 0, timeouts(), 0};
  auto d0 = make_rank(role::decode, 0, 2, 100);
  auto d1 = make_rank(role::decode, 1, 2, 101);
  // Its one written part is d0's slot: prepared, d0 hears nothing yet (the
  // commit will be its confirmation) and is a commit recipient.
  auto& fx = p.all_written({written_part{d0, true, true}}, 10);
  CHECK(p.prepared());
  CHECK(of_kind(fx, room_effect::kind::tell_done).empty());
  CHECK(of_kind(fx, room_effect::kind::report_part).empty());
  // The other slot comes from another source: commit, to d0 and that source.
  auto& fx2 = p.part_done(1, 2, d1.id, 1, 20);
  auto commits = of_kind(fx2, room_effect::kind::commit);
  REQUIRE(commits.size() == 1);
  auto to = commits.front()->recipients;
  std::sort(to.begin(), to.end());
  CHECK(to == std::vector<rank_id>{1, 100, 101});
  CHECK(p.state() == kv_poll::success);
}

TEST_CASE("a decider whose own part is the last one commits and says so in its tell_done") {
  auto me = make_rank(role::prefill, 0, 1, 0);
  room_protocol p{room, me, 0, timeouts(), 0};
  auto d0 = make_rank(role::decode, 0, 1, 100);
  auto& fx = p.all_written({written_part{d0, true, true}}, 10);
  auto done = of_kind(fx, room_effect::kind::tell_done);
  REQUIRE(done.size() == 1);
  CHECK(done.front()->rank == d0.id);
  CHECK(done.front()->counted);
  CHECK(done.front()->committed);
  // The commit itself goes to nobody else: d0 learns it from the tell_done.
  auto commits = of_kind(fx, room_effect::kind::commit);
  REQUIRE(commits.size() == 1);
  CHECK(commits.front()->recipients.empty());
  CHECK(published(fx, kv_poll::success));
}

TEST_CASE("another prefill rank reports its slot itself, or tells the decode rank") {
  auto me = make_rank(role::prefill, 1, 2, 1);
  room_protocol p{room, me, 0, timeouts(), 0};
  auto d1 = make_rank(role::decode, 1, 2, 101);
  auto d0 = make_rank(role::decode, 0, 2, 100);
  // Without declared layouts it is d1's one source and reports the slot;
  // with them (a decode rank with several sources) d0 hears and counts.
  auto& fx = p.all_written({written_part{d1, true, true}, written_part{d0, false, false}}, 10);
  auto reports = of_kind(fx, room_effect::kind::report_part);
  REQUIRE(reports.size() == 1);
  CHECK(reports.front()->rank == d1.id);
  CHECK(reports.front()->source == me.id);
  CHECK(reports.front()->slot == 1);
  CHECK(reports.front()->slots == 2);
  CHECK(reports.front()->decider.dp_rank == 0);
  auto done = of_kind(fx, room_effect::kind::tell_done);
  REQUIRE(done.size() == 1);
  CHECK(done.front()->rank == d0.id);
  CHECK_FALSE(done.front()->counted);
  CHECK(p.prepared());
  CHECK_FALSE(p.concluded());
}

TEST_CASE("a decode rank reports its part once every source finished, once") {
  auto me = make_rank(role::decode, 0, 1, 100);
  room_protocol p{room, me, 0, timeouts(), 0};
  p.dst_sent(0);
  p.dst_sent(1);
  CHECK(p.source_finished(source_report{0, 4, 4}, 10).empty());
  CHECK_FALSE(p.prepared());
  CHECK(p.source_finished(source_report{0, 4, 4}, 11).empty()); // a duplicate
  auto& fx = p.source_finished(source_report{1, 4, 4}, 12);
  auto reports = of_kind(fx, room_effect::kind::report_part);
  REQUIRE(reports.size() == 1);
  CHECK(reports.front()->rank == me.id);
  CHECK(reports.front()->source == 1);
  CHECK(p.prepared());
  CHECK(p.writers().empty());
  // The commit concludes it.
  CHECK(published(p.committed(13), kv_poll::success));
}

TEST_CASE("a decode rank refuses a confirmation it cannot accept") {
  auto me = make_rank(role::decode, 0, 1, 100);
  SECTION("from a rank it sent nothing to") {
    room_protocol p{room, me, 0, timeouts(), 0};
    p.dst_sent(0);
    auto& fx = p.source_finished(source_report{5, 4, 4}, 10);
    auto props = of_kind(fx, room_effect::kind::propose);
    REQUIRE(props.size() == 1);
    CHECK_THAT(props.front()->error.failure_reason,
               Catch::Contains("unexpected transfer confirmation from rank 5"));
  }
  SECTION("with fewer pages than its destination holds") {
    room_protocol p{room, me, 0, timeouts(), 0};
    p.dst_sent(0);
    auto props = of_kind(p.source_finished(source_report{0, 3, 4}, 10),
                         room_effect::kind::propose);
    REQUIRE(props.size() == 1);
    CHECK_THAT(props.front()->error.failure_reason,
               Catch::Contains("confirmed 3 pages, expected 4"));
  }
  SECTION("counted by the decider while several ranks write") {
    room_protocol p{room, me, 0, timeouts(), 0};
    p.dst_sent(0, true);
    p.dst_sent(1);
    auto props = of_kind(p.source_finished(source_report{0, 4, 4, true, true}, 10),
                         room_effect::kind::propose);
    REQUIRE(props.size() == 1);
    CHECK_THAT(props.front()->error.failure_reason, Catch::Contains("2 ranks write"));
    CHECK_FALSE(p.concluded());
  }
}

TEST_CASE("a commit confirms a decode rank's only source when that source reports for it") {
  auto me = make_rank(role::decode, 0, 1, 100);
  SECTION("it does: Success at once, the fence released") {
    room_protocol p{room, me, 0, timeouts(), 0};
    p.dst_sent(0, true);
    auto& fx = p.committed(10);
    CHECK(published(fx, kv_poll::success));
    CHECK(p.writers().empty());
  }
  SECTION("it does not: the commit waits for the source's own word") {
    room_protocol p{room, me, 0, timeouts(), 0};
    p.dst_sent(3);
    CHECK(p.committed(10).empty());
    CHECK_FALSE(p.concluded());
    auto& fx = p.source_finished(source_report{3, 2, 2}, 11);
    CHECK(published(fx, kv_poll::success));
  }
}

TEST_CASE("a decider's counted tell_done that carries the commit concludes the decode rank") {
  auto me = make_rank(role::decode, 0, 1, 100);
  room_protocol p{room, me, 0, timeouts(), 0};
  p.dst_sent(0, true);
  auto& fx = p.source_finished(source_report{0, 4, 4, true, true}, 10);
  CHECK(published(fx, kv_poll::success));
  CHECK(of_kind(fx, room_effect::kind::report_part).empty());
}

TEST_CASE("ranks told to hear the commit hear it, without duplicates or self") {
  auto me = make_rank(role::prefill, 0, 2, 0);
  room_protocol p{room, me, 0, timeouts(), 0};
  p.commit_also({0, 1, 1});
  auto& fx = p.part_done(0, 1, 100, 1, 10);
  auto commits = of_kind(fx, room_effect::kind::commit);
  REQUIRE(commits.size() == 1);
  auto to = commits.front()->recipients;
  std::sort(to.begin(), to.end());
  CHECK(to == std::vector<rank_id>{1, 100});
}

TEST_CASE("a mapped room's decider commits to its whole prefill group; no other rank does") {
  auto decider = make_rank(role::prefill, 0, 4, 0);
  room_protocol d{room, decider, 0, timeouts(), 0};
  REQUIRE(d.deciding());
  // Ranks 1-3: 3 is a dummy (nothing to write), it hears the commit too.
  d.mapped_group({0, 1, 2, 3});
  auto& fx = d.part_done(0, 1, 100, 1, 10);
  auto commits = of_kind(fx, room_effect::kind::commit);
  REQUIRE(commits.size() == 1);
  auto to = commits.front()->recipients;
  std::sort(to.begin(), to.end());
  CHECK(to == std::vector<rank_id>{1, 2, 3, 100});
  // A rank that does not decide adds no one.
  auto other = make_rank(role::prefill, 1, 4, 1);
  room_protocol o{room, other, 0, timeouts(), 0};
  REQUIRE_FALSE(o.deciding());
  o.mapped_group({0, 1, 2, 3});
  auto& ofx = o.part_done(0, 1, 100, 1, 10);
  CHECK(of_kind(ofx, room_effect::kind::commit).empty());
}

TEST_CASE("who reports a decode slot's part: the sole source, the decode rank, or the checker") {
  auto d = make_rank(role::decode, 0, 1, 100);
  // No declared layouts: one source per slot, which reports.
  auto plain = room_protocol::part_written(d, false, 0, false);
  CHECK(plain.sole_source);
  CHECK(plain.reports_part);
  // Mapped: the decode rank counts its sources and reports; a sole source
  // is still its slot's only writer.
  auto sole = room_protocol::part_written(d, true, 1, false);
  CHECK(sole.sole_source);
  CHECK_FALSE(sole.reports_part);
  auto shared = room_protocol::part_written(d, true, 2, false);
  CHECK_FALSE(shared.sole_source);
  CHECK_FALSE(shared.reports_part);
  // Checked for integrity: neither, mapped or not.
  for (bool mapped : {false, true}) {
    auto checked = room_protocol::part_written(d, mapped, 1, true);
    CHECK_FALSE(checked.sole_source);
    CHECK_FALSE(checked.reports_part);
    CHECK(checked.decode.id == 100);
  }
}

TEST_CASE("rooms with no protocol here: the unopened decision and the cleared answer") {
  kv_transfer_error proposed{room, "bad indices", false, 101};
  auto decided = room_protocol::decide_unopened(proposed);
  CHECK(decided.is_from_another_rank);
  CHECK(decided.origin_rank == 101);
  CHECK(decided.failure_reason == "bad indices");
  auto failed = room_protocol::answer_cleared(true, proposed, 101);
  CHECK(failed.what == room_effect::kind::answer);
  CHECK(failed.state == kv_poll::failed);
  CHECK(failed.rank == 101);
  CHECK(failed.error.failure_reason == "bad indices");
  auto ok = room_protocol::answer_cleared(false, proposed, 101);
  CHECK(ok.state == kv_poll::success);
  CHECK(ok.error.failure_reason.empty());
}

TEST_CASE("every window follows from the timeouts") {
  room_timing t{room_timeouts{8000, 4000, 2000}};
  CHECK(t.tick() == std::chrono::milliseconds{250});
  CHECK(t.decision_ms() == 2000);
  CHECK(t.prepared_ms() == 4000);
  CHECK(t.fence_ms() == 4000);
  CHECK(t.unopened_grace_ms() == 500);
  CHECK(t.lost_window_ms() == 3000);
  CHECK(t.parking_ms() == 8000);
  CHECK(t.group_query() == std::chrono::milliseconds{1000});
  room_timing fast{room_timeouts{40, 40, 40}};
  CHECK(fast.tick() == std::chrono::milliseconds{5});
  CHECK(fast.unopened_grace_ms() == 20);
  CHECK(fast.lost_window_ms() == 40);
  room_timing slow{room_timeouts{600'000, 600'000, 600'000}};
  CHECK(slow.tick() == std::chrono::milliseconds{2000});
  auto a = room_timing::now();
  CHECK(room_timing::now() >= a);
}

namespace {

/// Records what `carry_out` asks of a port.
struct recording_port : room_port {
  std::vector<std::string> calls;
  void publish(kv_poll state, kv_transfer_error) override {
    calls.push_back("publish " + to_string(state));
  }
  void concluded(const room_effect& fx) override {
    calls.push_back("concluded " + to_string(fx.state));
  }
  void to_decider(const decider_ref& g, caf::message m) override {
    calls.push_back("decider dp" + std::to_string(g.dp_rank) + " "
                    + (m.match_elements<room_failed>() ? "room_failed" : "?"));
  }
  void to_rank(rank_id r, caf::message m) override {
    calls.push_back("rank " + std::to_string(r) + " "
                    + (m.match_elements<room_failed>()      ? "room_failed"
                       : m.match_elements<room_committed>() ? "room_committed"
                                                            : "?"));
  }
};

} // namespace

TEST_CASE("one interpreter: a proposal, an answer and a commit reach the port") {
  auto me = make_rank(role::prefill, 1, 2, 1);
  recording_port port;
  room_protocol p{room, me, 0, timeouts(), 0};
  carry_out(room, me, p.fail_local("bad", failure_cause::bad_input, 10), port);
  REQUIRE(port.calls.size() == 1);
  CHECK(port.calls[0] == "decider dp0 room_failed");
  room_effects fx{room_protocol::answer_cleared(false, {}, 100)};
  carry_out(room, me, fx, port);
  CHECK(port.calls.back() == "rank 100 room_committed");
  room_effect commit;
  commit.what = room_effect::kind::commit;
  commit.recipients = {0, 100};
  room_effects fx2{commit};
  carry_out(room, me, fx2, port);
  CHECK(port.calls.size() == 4);
  CHECK(port.calls.back() == "rank 100 room_committed");
}
