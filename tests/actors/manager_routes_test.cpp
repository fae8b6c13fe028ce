// The manager's room tables behind one look-up, its failure records, and
// whom a failure fans out to: plain classes, no actor system.
#include <catch2/catch.hpp>

#include <algorithm>

#include "kvroom/actors/manager/failure_log.hpp"
#include "kvroom/actors/manager/peer_directory.hpp"
#include "kvroom/actors/manager/room_directory.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

using test::make_rank;

room_timeouts timeouts() {
  return test::short_timeouts();
}

std::vector<rank_id> ids(const std::vector<peer_directory::entry_ptr>& xs) {
  std::vector<rank_id> out;
  for (auto& x : xs)
    out.push_back(x->rank.id);
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE("room directory: one look-up tells open, dead, cleared and unknown rooms apart") {
  using route = room_directory::route_t;
  room_directory dir{8};
  dir.open(1, 1001, room_directory::entry{});
  auto me = make_rank(role::decode, 0, 0, 100);
  dir.carry(2, room_protocol{2, me, 0, timeouts(), 0});
  dir.bury(3, true, kv_transfer_error{3, "lost", false, 7});
  CHECK(dir.route(1).where == route::open);
  CHECK(dir.route(1).room == dir.find(1));
  CHECK(dir.route(2).where == route::dead);
  CHECK(dir.route(2).protocol == dir.dead(2));
  CHECK(dir.route(3).where == route::tombstone);
  CHECK(dir.route(3).grave->error.failure_reason == "lost");
  CHECK(dir.route(4).where == route::unknown);
  CHECK(dir.dead_rooms() == std::vector<room_id>{2});
}

TEST_CASE("room directory: a dead room is buried with its root cause once published") {
  room_directory dir{8};
  auto me = make_rank(role::prefill, 0, 0, 0);
  auto& p = dir.carry(5, room_protocol{5, me, 0, timeouts(), 0});
  (void) p.fail_local("actor exited", failure_cause::other, 10);
  REQUIRE(dir.dead_size() == 1);
  dir.bury_dead(5);
  CHECK(dir.dead_size() == 0);
  REQUIRE(dir.tombstone_of(5));
  CHECK(dir.tombstone_of(5)->failed);
  CHECK(dir.tombstone_of(5)->error.failure_reason == "actor exited");
  dir.bury_dead(5); // nothing left: no-op
  CHECK(dir.tombstones() == 1);
}

TEST_CASE("room directory: a fence collects its decode ranks until the worker confirms") {
  room_directory dir{8};
  CHECK_FALSE(dir.join_fence(9, 100)); // none pending: tell it at once
  dir.fence(9, {100, 101});
  dir.fence(9, {101});
  CHECK(dir.join_fence(9, 102));
  CHECK(dir.fencing() == 1);
  CHECK(dir.end_fence(9) == std::vector<rank_id>{100, 101, 102});
  CHECK(dir.fencing() == 0);
  CHECK(dir.end_fence(9).empty());
}

TEST_CASE("an orphaned decode room waits for the senders that did not fence") {
  auto me = make_rank(role::decode, 0, 0, 100);
  room_protocol::options opts;
  auto p = room_protocol::orphaned(4, me, 0, timeouts(), 0, opts, {0, 1}, {1}, {});
  CHECK(p.prepared());
  CHECK(p.writers() == std::vector<rank_id>{0});
  REQUIRE(p.counterparts().size() == 1);
  CHECK(p.counterparts()[0].id == -1); // the whole prefill group
  // Its Failed (decided by the room's decider) waits for sender 0's fence.
  (void) p.on_failure(kv_transfer_error{4, "room actor exited", false, 100}, false, 0, 5);
  CHECK(p.state() == kv_poll::failed);
  CHECK(p.fence_held());
  (void) p.fenced(0, 6);
  CHECK_FALSE(p.fence_held());
  opts.fence = false;
  auto q = room_protocol::orphaned(4, me, 0, timeouts(), 0, opts, {0, 1}, {1}, {});
  CHECK(q.writers().empty());
}

TEST_CASE("an orphaned prefill room names the decode ranks it wrote to") {
  auto me = make_rank(role::prefill, 0, 0, 0);
  auto p = room_protocol::orphaned(4, me, 0, timeouts(), 0, {}, {100}, {},
                                   {make_rank(role::decode, 0, 0, 100)});
  REQUIRE(p.counterparts().size() == 1);
  CHECK(p.counterparts()[0].id == 100);
  CHECK(p.prepared());
}

TEST_CASE("failure log: a record per Failed room until it is cleared, counted by origin") {
  failure_log log{make_rank(role::decode, 0, 0, 100)};
  log.concluded(1, kv_poll::success, {}, false);
  log.concluded(2, kv_poll::failed, kv_transfer_error{2, "bad indices", false, 100}, false);
  log.concluded(3, kv_poll::failed, kv_transfer_error{3, "peer lost", true, 7}, false);
  log.concluded(4, kv_poll::failed, kv_transfer_error{4, "aborted", false, 100}, true);
  CHECK(log.successes() == 1);
  CHECK(log.origin_failures() == 2);
  CHECK(log.propagated_failures() == 1);
  CHECK(log.size() == 3);
  REQUIRE(log.find(3));
  CHECK(log.find(3)->origin_rank == 7);
  CHECK_FALSE(log.find(1));
  log.forget(3);
  CHECK_FALSE(log.find(3));
  CHECK(log.size() == 2);
}

TEST_CASE("peer directory: a failure fans out to the rank's group and its counterparts' groups") {
  peer_directory dir{0, 500};
  std::vector<rank_entry> ranks;
  for (auto r : {make_rank(role::prefill, 0, 0, 0), make_rank(role::prefill, 0, 1, 1),
                 make_rank(role::prefill, 1, 0, 2), make_rank(role::decode, 0, 0, 100),
                 make_rank(role::decode, 0, 1, 101), make_rank(role::decode, 1, 0, 102)})
    ranks.push_back(rank_entry{r, {}, {}, {}});
  dir.update(ranks);
  auto self = make_rank(role::prefill, 0, 0, 0);
  // Its own group (not itself) and decode group 0 (rank 100 stands for it).
  CHECK(ids(dir.fan_out_targets(self, {make_rank(role::decode, 0, 0, 100)}))
        == std::vector<rank_id>{1, 100, 101});
  // No counterpart known yet: the whole other side too.
  CHECK(ids(dir.fan_out_targets(self, {})) == std::vector<rank_id>{1, 100, 101, 102});
  CHECK(dir.fan_out_unlinked(self, {}).empty());
}

TEST_CASE("peer directory: a failure fans out to listed ranks not linked yet, through their link") {
  peer_directory dir{0, 500};
  std::vector<rank_entry> ranks;
  for (auto r : {make_rank(role::prefill, 0, 0, 0), make_rank(role::decode, 0, 0, 100),
                 make_rank(role::decode, 0, 1, 101), make_rank(role::decode, 1, 0, 102)})
    ranks.push_back(rank_entry{r, {}, {}, {}});
  // Rank 101 is in another process (a control endpoint): listed, linked
  // only when something needs it (here: a replacement that just registered).
  ranks[2].control_host = "127.0.0.1";
  ranks[2].control_port = 4101;
  ranks[2].incarnation = 2;
  auto changes = dir.update(ranks);
  REQUIRE(changes.to_link.size() == 1);
  auto self = make_rank(role::prefill, 0, 0, 0);
  auto counterpart = std::vector<rank_ref>{make_rank(role::decode, 0, 0, 100)};
  CHECK(ids(dir.fan_out_targets(self, counterpart)) == std::vector<rank_id>{100});
  CHECK(dir.fan_out_unlinked(self, counterpart) == std::vector<rank_id>{101});
  // Another group's unlinked rank is no target, nor the other side when no
  // counterpart is known (a dial to each of its ranks for one room).
  CHECK(dir.fan_out_unlinked(self, {make_rank(role::decode, 1, 0, 102)}).empty());
  CHECK(dir.fan_out_unlinked(self, {}).empty());
}

TEST_CASE("peer directory: the decode TP size, declared or not") {
  peer_directory dir{0, 500};
  CHECK(dir.decode_tp() == 0); // no decode rank known
  rank_entry prefill{make_rank(role::prefill, 0, 0, 0), {}, {}, {}};
  prefill.rank.tp_size = 2;
  dir.update({prefill});
  CHECK(dir.decode_tp() == 0);
  // SGLang's decode declares no layout: it holds the model at its TP size.
  rank_entry undeclared{make_rank(role::decode, 0, 0, 100), {}, {}, {}};
  undeclared.rank.tp_size = 3;
  dir.update({undeclared});
  CHECK(dir.decode_tp() == 3);
  peer_directory other{0, 500};
  rank_entry declared{make_rank(role::decode, 1, 1, 103), {}, {}, {}};
  declared.has_parallel = true;
  declared.parallel.tp_size = 4;
  declared.rank.tp_size = 4;
  other.update({declared});
  CHECK(other.decode_tp() == 4);
}
