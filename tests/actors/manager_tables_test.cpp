// The KV manager's tables as plain classes: no actor system, time passed in.
#include <catch2/catch.hpp>

#include "kvroom/actors/control/bootstrap_registry.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "caf/all.hpp"

#include "kvroom/actors/manager/control_outbox.hpp"
#include "kvroom/actors/manager/parking.hpp"
#include "kvroom/actors/manager/peer_directory.hpp"
#include "kvroom/actors/manager/room_directory.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

using test::make_rank;

dst_info dst_for(room_id room, rank_id decode) {
  dst_info d;
  d.room = room;
  d.decode_rank = make_rank(role::decode, 0, 0, decode);
  return d;
}

room_failed failure(room_id room, rank_id origin, bool propagated) {
  return room_failed{room, kv_transfer_error{room, "fault", false, origin}, propagated, origin};
}

} // namespace

TEST_CASE("room directory: rooms by id and by actor, closed rooms leave tombstones") {
  room_directory dir{3};
  room_directory::entry e;
  e.prefill_dp = 2;
  dir.open(7, 1007, e);
  REQUIRE(dir.find(7));
  CHECK(dir.find(7)->prefill_dp == 2);
  CHECK(dir.room_of(1007) == std::optional<room_id>{7});
  auto closed = dir.close(7);
  REQUIRE(closed);
  CHECK_FALSE(dir.find(7));
  CHECK_FALSE(dir.room_of(1007));
  CHECK_FALSE(dir.close(7));
  dir.bury(7, true, kv_transfer_error{7, "why", false, 3});
  REQUIRE(dir.tombstone_of(7));
  CHECK(dir.tombstone_of(7)->error.failure_reason == "why");
}

TEST_CASE("room directory: a room involves its peers and its prefill group, no one else") {
  room_directory::entry e;
  e.prefill_dp = 1;
  e.dst_ranks = {65537};
  CHECK(e.involves(test::make_rank(role::decode, 1, 1, 65537)));     // handed a destination
  CHECK(e.involves(test::make_rank(role::prefill, 1, 0, 2)));        // its prefill group
  CHECK_FALSE(e.involves(test::make_rank(role::decode, 0, 0, 65536)));  // another group's
  CHECK_FALSE(e.involves(test::make_rank(role::prefill, 0, 0, 0)));
}

TEST_CASE("room directory: tombstones are bounded by count, oldest first out") {
  room_directory dir{3};
  for (room_id r = 1; r <= 10; ++r)
    dir.bury(r, false, {});
  CHECK(dir.tombstones() == 3);
  CHECK_FALSE(dir.tombstone_of(7));
  CHECK(dir.tombstone_of(8));
  CHECK(dir.tombstone_of(10));
}

TEST_CASE("room directory: a reused id is live again, its tombstone gone") {
  room_directory dir{8};
  dir.bury(5, true, {});
  dir.open(5, 99, {});
  CHECK_FALSE(dir.tombstone_of(5));
  CHECK(dir.find(5));
  CHECK(dir.tombstones() == 0);
}

TEST_CASE("parking: one bound over destinations, parts, failures and decider messages") {
  parking p{4, 1000};
  CHECK(p.park_dst(dst_for(1, 100), 0));
  CHECK(p.park_part(part_done{2, 0, 2, 100, {}, 0, {}}, 0));
  CHECK(p.park_failure(failure(3, 100, true), 0));
  CHECK(p.park_for_decider(decider_ref{role::prefill, 0}, caf::make_message(1), 0));
  CHECK(p.size() == 4);
  CHECK_FALSE(p.park_dst(dst_for(4, 100), 0));
  CHECK_FALSE(p.park_part(part_done{5, 0, 2, 100, {}, 0, {}}, 0));
  CHECK_FALSE(p.park_failure(failure(6, 100, true), 0));
  CHECK_FALSE(p.park_for_decider(decider_ref{role::prefill, 0}, caf::make_message(2), 0));
}

TEST_CASE("parking: the first failure for a room stands") {
  parking p{16, 1000};
  CHECK(p.park_failure(failure(3, 100, false), 0));
  CHECK(p.park_failure(failure(3, 101, false), 1));
  REQUIRE(p.failure(3));
  CHECK(p.failure(3)->error.origin_rank == 100);
  CHECK(p.failures() == 1);
  auto taken = p.take_failure(3);
  REQUIRE(taken);
  CHECK(taken->error.origin_rank == 100);
  CHECK_FALSE(p.failure(3));
}

TEST_CASE("parking: proposals older than the grace are handed over to be decided") {
  parking p{16, 10'000};
  p.park_failure(failure(1, 100, false), 0);
  p.park_failure(failure(2, 100, true), 0);
  p.park_failure(failure(3, 100, false), 50);
  auto due = p.take_proposals(60, 40);
  REQUIRE(due.size() == 1);
  CHECK(due[0].room == 1);
  CHECK(p.failure(2));  // a decision is not a proposal
  CHECK(p.failure(3));  // too young
  CHECK(p.has_proposals());
  CHECK(p.take_proposals(100, 40).size() == 1);
  CHECK_FALSE(p.has_proposals()); // what is left is a decision
  CHECK(p.failure(2));
}

TEST_CASE("parking: destinations are taken once their rank is known, and expire") {
  parking p{16, 100};
  p.park_dst(dst_for(1, 100), 0);
  p.park_dst(dst_for(1, 101), 0);
  auto ready = p.take_dsts(1, [](const dst_info& d) { return d.decode_rank.id == 101; });
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].decode_rank.id == 101);
  CHECK(p.size() == 1);
  CHECK(p.expire(99).empty());
  auto expired = p.expire(100);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].decode_rank.id == 100);
  CHECK(p.size() == 0);
  CHECK(p.dst_rooms().empty());
}

TEST_CASE("parking: one expiry drops parts, failures and decider messages alike") {
  parking p{16, 100};
  p.park_part(part_done{2, 0, 2, 100, {}, 0, {}}, 0);
  p.park_failure(failure(3, 100, true), 0);
  p.park_for_decider(decider_ref{role::prefill, 0}, caf::make_message(1), 0);
  p.park_part(part_done{4, 0, 2, 100, {}, 0, {}}, 60);
  p.expire(100);
  CHECK(p.size() == 1);
  CHECK(p.take_parts(4).size() == 1);
  CHECK(p.take_parts(2).empty());
}

TEST_CASE("parking: decider messages go once the decider is listed, in order") {
  parking p{16, 1000};
  p.park_for_decider(decider_ref{role::prefill, 0}, caf::make_message(1), 0);
  p.park_for_decider(decider_ref{role::prefill, 1}, caf::make_message(2), 0);
  std::vector<int> sent;
  p.flush_deciders([&](const decider_ref& to, caf::message& m) {
    if (to.dp_rank != 0)
      return false;
    sent.push_back(m.get_as<int>(0));
    return true;
  });
  CHECK(sent == std::vector<int>{1});
  CHECK(p.size() == 1);
}

TEST_CASE("parking: messages for a rank not usable yet go once it is, in order, and expire") {
  // The decider hears a decode rank's part before its own link to that
  // rank is up: the commit it answers with must wait, not vanish.
  parking p{3, 1000};
  CHECK(p.park_for_rank(101, caf::make_message(1), 0));
  CHECK(p.park_for_rank(102, caf::make_message(2), 0));
  CHECK(p.park_for_rank(101, caf::make_message(3), 10));
  CHECK_FALSE(p.park_for_rank(101, caf::make_message(4), 10)); // the one bound
  std::vector<int> sent;
  p.flush_ranks([&](rank_id to, caf::message& m) {
    if (to != 101)
      return false;
    sent.push_back(m.get_as<int>(0));
    return true;
  });
  CHECK(sent == std::vector<int>{1, 3});
  CHECK(p.size() == 1);
  p.expire(999);
  CHECK(p.size() == 1);
  p.expire(1000);
  CHECK(p.size() == 0);
}

TEST_CASE("peer directory: groups, deciders, losses and their window") {
  peer_directory dir{0, 500};
  std::vector<rank_entry> ranks;
  for (auto r : {make_rank(role::prefill, 0, 1, 1), make_rank(role::prefill, 0, 0, 0),
                 make_rank(role::decode, 0, 0, 100), make_rank(role::decode, 0, 1, 101)})
    ranks.push_back(rank_entry{r, {}, {}, {}});
  dir.update(ranks);
  CHECK(dir.find(101));
  auto group = dir.group(role::prefill, 0);
  REQUIRE(group.size() == 2);
  CHECK(group[0]->rank.tp_rank == 0);
  REQUIRE(dir.decider(decider_ref{role::prefill, 0}));
  CHECK(dir.decider(decider_ref{role::prefill, 0})->rank.id == 0);
  CHECK_FALSE(dir.decider(decider_ref{role::prefill, 1}));
  dir.lose(peer_lost{make_rank(role::decode, 0, 1, 101), "gone"}, 1000);
  CHECK_FALSE(dir.find(101));
  CHECK(dir.lost().count(101) == 1);
  dir.expire(1499);
  CHECK(dir.lost().count(101) == 1);
  dir.expire(1500);
  CHECK(dir.lost().empty());
  // Registered again: listed, and no longer lost.
  dir.lose(peer_lost{make_rank(role::decode, 0, 1, 101), "gone"}, 2000);
  dir.update(ranks);
  CHECK(dir.find(101));
  CHECK(dir.lost().empty());
  // A partial view (a restarted registry) removes no one.
  dir.update({ranks[0]});
  CHECK(dir.find(101));
}

TEST_CASE("peer directory: ranks with a control endpoint are usable only once linked") {
  peer_directory dir{0, 500};
  rank_entry remote{make_rank(role::decode, 0, 0, 100), {}, {}, {}, "127.0.0.1", 4000, 7};
  auto changes = dir.update({remote});
  CHECK(changes.usable.empty());
  REQUIRE(changes.to_link.size() == 1);
  CHECK_FALSE(dir.find(100));
  CHECK(dir.listed(100));
  // Listed again with the same incarnation: nothing new to link.
  CHECK(dir.update({remote}).to_link.empty());
  // A link for another incarnation is kept, not used.
  CHECK_FALSE(dir.link(100, 8, {}));
  CHECK_FALSE(dir.find(100));
  CHECK(dir.link(100, 7, {}));
  CHECK(dir.find(100));
  CHECK_FALSE(dir.listed(100));
  // A replacement (new incarnation) of a lost rank: no longer lost, to link.
  dir.lose(peer_lost{remote.rank, "gone"}, 1000);
  CHECK(dir.lost().count(100) == 1);
  remote.incarnation = 9;
  CHECK(dir.update({remote}).to_link.size() == 1);
  CHECK(dir.lost().empty());
  // A peer that linked before the listing came is usable when it comes.
  rank_entry early{make_rank(role::decode, 0, 1, 101), {}, {}, {}, "127.0.0.1", 4001, 3};
  CHECK_FALSE(dir.link(101, 3, {}));
  auto later = dir.update({early});
  CHECK(later.to_link.empty());
  CHECK(later.usable.size() == 1);
  CHECK(dir.find(101));
}

TEST_CASE("peer directory: a link of another incarnation ends a loss before the listing does") {
  peer_directory dir{0, 500};
  rank_entry remote{make_rank(role::prefill, 0, 1, 1), {}, {}, {}, "127.0.0.1", 4000, 7};
  dir.update({remote});
  REQUIRE(dir.link(1, 7, {}));
  // Incarnation 7 lost.
  dir.lose(peer_lost{remote.rank, "gone"}, 1000, 7);
  REQUIRE(dir.lost().count(1) == 1);
  // A late handshake of the incarnation that went proves nothing new.
  CHECK_FALSE(dir.link(1, 7, {}));
  CHECK(dir.lost().count(1) == 1);
  // Its replacement linked before the registry's push listed it: the rank
  // is back, so rooms that open now wait for the listing, not fail.
  CHECK_FALSE(dir.link(1, 8, {}));
  CHECK(dir.lost().empty());
  // And the listing makes the early link usable.
  remote.incarnation = 8;
  CHECK(dir.update({remote}).usable.size() == 1);
  CHECK(dir.find(1));
  // A loss whose incarnation is not known stays until the listing.
  dir.lose(peer_lost{remote.rank, "gone"}, 2000);
  CHECK_FALSE(dir.link(1, 9, {}));
  CHECK(dir.lost().count(1) == 1);
}

TEST_CASE("membership: proofs bind both nonces, both ids and the roles") {
  membership m{deployment_secret{"a deployment secret of some length"}};
  membership other{deployment_secret{"another deployment's secret here"}};
  auto na = make_nonce(), nb = make_nonce();
  // B accepts A: A checks B's proof with the same inputs.
  auto accept = m.accept_proof(na, nb, 2, 1);
  CHECK(membership::matches(accept, m.accept_proof(na, nb, 2, 1)));
  CHECK_FALSE(membership::matches(accept, other.accept_proof(na, nb, 2, 1)));
  CHECK_FALSE(membership::matches(accept, m.accept_proof(nb, na, 2, 1)));
  CHECK_FALSE(membership::matches(accept, m.accept_proof(na, nb, 1, 2)));
  // A's answer to B cannot be made from B's (reflection): other label.
  CHECK_FALSE(membership::matches(m.join_proof(nb, na, 1, 7, 2), accept));
  CHECK_FALSE(membership::matches(m.join_proof(nb, na, 1, 7, 2), m.join_proof(nb, na, 1, 8, 2)));
  // Registration: the registry's proof is not the rank's, ids and
  // incarnations matter.
  CHECK_FALSE(membership::matches(m.registry_proof(na, nb), m.rank_proof(na, nb, 0, 0)));
  CHECK_FALSE(membership::matches(m.rank_proof(nb, na, 5, 1), m.rank_proof(nb, na, 6, 1)));
  CHECK_FALSE(membership::matches(m.rank_proof(nb, na, 5, 1), m.rank_proof(nb, na, 5, 2)));
  // An insecure deployment runs the same proofs with a key everyone knows.
  membership open;
  CHECK(open.insecure());
  CHECK(membership::matches(open.registry_proof(na, nb), membership{}.registry_proof(na, nb)));
}

TEST_CASE("pending table: bounded, expiring, taken once") {
  pending_table<int, std::string> t{2, 100};
  CHECK(t.put(1, "a", 0));
  CHECK(t.put(2, "b", 0));
  CHECK_FALSE(t.put(3, "c", 50)); // full, nothing expired yet
  CHECK(t.put(3, "c", 101));      // the first two expired
  CHECK(t.size() == 1);
  CHECK(t.take(3, 150) == std::optional<std::string>{"c"});
  CHECK_FALSE(t.take(3, 150));
  CHECK(t.put(4, "d", 200));
  CHECK_FALSE(t.take(4, 301)); // past its deadline
}

TEST_CASE("layout check: refuses what cannot be mapped, with the reason") {
  auto entry = [](rank_id id, uint64_t page, size_t buffers, int32_t tp) {
    rank_entry e;
    e.rank = make_rank(role::prefill, 0, 0, id);
    e.rank.tp_size = tp;
    for (size_t i = 0; i < buffers; ++i)
      e.layout.kv.push_back(paged_buffer{mem_desc{0x1000 * (i + 1), 64 * page, -1}, page});
    return e;
  };
  std::vector<rank_entry> ranks{entry(0, 4096, 4, 1)};
  CHECK(layout_conflict(ranks, entry(1, 4096, 4, 1)).empty());
  CHECK(layout_conflict(ranks, entry(1, 8192, 4, 1)).find("8192 B pages") != std::string::npos);
  CHECK(layout_conflict(ranks, entry(1, 4096, 2, 1)).find("2 KV buffers") != std::string::npos);
  CHECK(layout_conflict(ranks, entry(1, 4096, 4, 2)).find("TP size 2") != std::string::npos);
  // Registering again (same id) is checked against the others only.
  CHECK(layout_conflict(ranks, entry(0, 8192, 4, 1)).empty());
}

TEST_CASE("place check: one live rank per side, DP group, TP rank and PP stage") {
  auto entry = [](role side, int32_t dp, int32_t tp, rank_id id, int32_t pp = 0) {
    rank_entry e;
    e.rank = make_rank(side, dp, tp, id);
    e.rank.tp_size = 2;
    e.rank.pp_rank = pp;
    return e;
  };
  std::vector<rank_entry> ranks{entry(role::prefill, 0, 0, 0), entry(role::decode, 0, 0, 100)};
  // Its own place again (registering again), and every other place: free.
  CHECK(place_conflict(ranks, entry(role::prefill, 0, 0, 0)).empty());
  CHECK(place_conflict(ranks, entry(role::prefill, 0, 1, 1)).empty());
  CHECK(place_conflict(ranks, entry(role::prefill, 1, 0, 2)).empty());
  CHECK(place_conflict(ranks, entry(role::prefill, 0, 0, 3, 1)).empty());
  CHECK(place_conflict(ranks, entry(role::decode, 0, 1, 101)).empty());
  // Another id in a live rank's place.
  auto why = place_conflict(ranks, entry(role::prefill, 0, 0, 7));
  CHECK(why.find("takes the place of the live prefill[dp0,tp0]#0") != std::string::npos);
  CHECK(place_conflict(ranks, entry(role::decode, 0, 0, 7)).find("#100") != std::string::npos);
}

TEST_CASE("layout check: ranks that declare a parallel layout are checked by what the mapping needs") {
  auto entry = [](rank_id id, role side, int32_t head_dim, int32_t pp) {
    rank_entry e;
    e.rank = make_rank(side, 0, 0, id);
    e.rank.tp_size = 1;
    e.has_parallel = true;
    e.parallel.layers = 2;
    e.parallel.pp_size = side == role::prefill ? pp : 1;
    e.parallel.head_dim = head_dim;
    e.parallel.total_kv_heads = 8;
    e.parallel.tokens_per_page = 16;
    for (int i = 0; i < 4; ++i)
      e.layout.kv.push_back(paged_buffer{mem_desc{0x1000u * (i + 1u), 64 * e.parallel.page_bytes(), -1},
                                         e.parallel.page_bytes()});
    return e;
  };
  std::vector<rank_entry> ranks{entry(0, role::prefill, 128, 1)};
  CHECK(layout_conflict(ranks, entry(1, role::decode, 128, 1)).empty());
  auto why = layout_conflict(ranks, entry(1, role::decode, 64, 1));
  INFO(why);
  CHECK(why.find("KV shape differs") != std::string::npos);
  CHECK(why.find("head_dim 64") != std::string::npos);
  // A rank that declares nothing (SGLang's decode names no heads) is
  // accepted when its pages are the declared model's at its TP size.
  auto undeclared = entry(1, role::decode, 128, 1);
  undeclared.has_parallel = false;
  CHECK(layout_conflict(ranks, undeclared).empty());
  auto other_model = entry(1, role::decode, 64, 1);
  other_model.has_parallel = false;
  why = layout_conflict(ranks, other_model);
  CHECK(why.find("does not declare a parallel layout") != std::string::npos);
  CHECK(why.find("pages of 16384 B, the model's at TP 1 are 32768 B") != std::string::npos);
  auto staged = entry(2, role::prefill, 128, 2);
  staged.parallel.layers = 1;
  CHECK(layout_conflict(ranks, staged).find("TP x PP 1 x 2 against 1 x 1") != std::string::npos);
}

TEST_CASE("control outbox: messages per peer in order, a full peer's bundle leaves at once") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto peer = [&] { return sys.spawn([] { return caf::behavior{[](int) {}}; }); };
  auto a = peer(), b = peer();
  detail::control_outbox out;
  CHECK_FALSE(out.add(a, caf::make_message(1)));
  CHECK_FALSE(out.add(b, caf::make_message(10)));
  CHECK_FALSE(out.add(a, caf::make_message(2)));
  CHECK(out.held() == 3);
  auto for_a = out.take(a);
  REQUIRE(for_a.size() == 2);
  CHECK(for_a[0].get_as<int>(0) == 1);
  CHECK(for_a[1].get_as<int>(0) == 2);
  CHECK(out.held() == 1);
  CHECK(out.take(a).empty());
  // The bound: the peer's max_bundle-th message asks for it to leave.
  for (size_t i = 1; i < detail::control_outbox::max_bundle; ++i)
    CHECK_FALSE(out.add(a, caf::make_message(static_cast<int>(i))));
  CHECK(out.add(a, caf::make_message(0)));
  CHECK(out.take(a).size() == detail::control_outbox::max_bundle);
  auto all = out.take_all();
  REQUIRE(all.size() == 1);
  CHECK(all[0].first == b);
  CHECK(all[0].second.size() == 1);
  CHECK(out.held() == 0);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
}
