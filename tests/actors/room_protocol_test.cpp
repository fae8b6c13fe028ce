// The room protocol without any actor runtime: a few protocol instances, one
// per rank of a 2P x 2D room, exchange their effects through a queue the test
// delivers in the order it wants (or a seeded random one). Time is passed in.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "kvroom/actors/room/room_protocol.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

constexpr room_id room = 42;
constexpr rank_id p0 = 0, p1 = 1, d0 = 100, d1 = 101;

rank_ref make_rank(role side, int32_t tp, rank_id id) {
  return test::make_rank(side, 0, tp, id);
}

room_timeouts timeouts() {
  return test::short_timeouts();
}

/// One message between two ranks' protocols.
struct envelope {
  enum kind_t { request, decision, commit, fence } kind;
  rank_id to = -1;
  rank_id from = -1;
  kv_transfer_error error;
};

/// Four ranks of one room and the messages between them.
class room_net {
public:
  explicit room_net(room_protocol::options opts = {}) {
    for (auto r : {make_rank(role::prefill, 0, p0), make_rank(role::prefill, 1, p1),
                   make_rank(role::decode, 0, d0), make_rank(role::decode, 1, d1)}) {
      ranks_.emplace(r.id, room_protocol{room, r, 0, timeouts(), now, opts});
      published_[r.id] = kv_poll::bootstrapping;
    }
    // Decode rank k pulls from prefill rank k; each knows the other's group.
    at(p0).set_counterparts({make_rank(role::decode, 0, d0)});
    at(p1).set_counterparts({make_rank(role::decode, 1, d1)});
    at(d0).set_counterparts({make_rank(role::prefill, 0, p0)});
    at(d1).set_counterparts({make_rank(role::prefill, 1, p1)});
  }

  room_protocol& at(rank_id id) {
    return ranks_.at(id);
  }

  /// Carries out what rank `id` decided; with `end_finished`, a rank whose
  /// room finished ends there, as its actor does (room_core::run).
  void run(rank_id id, room_effects fx) {
    carry(id, std::move(fx));
    if (end_finished && at(id).finished())
      ended_.insert(id);
  }

  bool ended(rank_id id) const {
    return ended_.count(id) > 0;
  }

  /// Rank `id`'s room actor dies: what was on its way to it is lost (a
  /// commit sent straight to its actor, as in one process), and its manager
  /// carries the room on with an orphaned protocol (carry_on_dead).
  void kill(rank_id id) {
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                [&](const envelope& m) { return m.to == id; }),
                 queue_.end());
    auto self = at(id).self();
    std::vector<rank_ref> decode;
    if (self.side == role::prefill)
      decode = at(id).counterparts();
    ranks_.erase(id);
    ranks_.emplace(id, room_protocol::orphaned(room, self, 0, timeouts(), now, {}, {}, {},
                                               decode));
    run(id, at(id).fail_local("room actor exited", failure_cause::other, now));
  }

  /// Decision requests a tombstone answered.
  int tombstone_answers() const {
    return tombstone_answers_;
  }

  void carry(rank_id id, room_effects fx) {
    for (auto& e : fx) {
      switch (e.what) {
        case room_effect::kind::publish:
          published_[id] = e.state;
          if (e.state == kv_poll::failed)
            errors_[id] = e.error;
          ++publishes_[id];
          break;
        case room_effect::kind::concluded:
          if (e.fan_out)
            for (auto& kvp : ranks_)
              if (kvp.first != id)
                queue_.push_back({envelope::decision, kvp.first, id, e.error});
          if (e.state == kv_poll::failed && !e.error.is_from_another_rank)
            ++origin_counts_;
          // A failed prefill rank's manager fences its worker and tells the
          // decode rank it wrote to (as the shells do).
          if (auto_fence && e.state == kv_poll::failed && (id == p0 || id == p1))
            queue_.push_back({envelope::fence, id == p0 ? d0 : d1, id, {}});
          break;
        case room_effect::kind::propose:
          for (auto& kvp : ranks_)
            if (is_decider(kvp.second.self(), e.decider))
              queue_.push_back({envelope::request, kvp.first, e.rank, e.error});
          break;
        case room_effect::kind::answer:
          queue_.push_back({e.state == kv_poll::failed ? envelope::decision : envelope::commit,
                            e.rank, id, e.error});
          break;
        case room_effect::kind::commit:
          for (auto& kvp : ranks_)
            if (kvp.first != id)
              queue_.push_back({envelope::commit, kvp.first, id, {}});
          break;
        case room_effect::kind::fence_expired:
          ++fence_expiries_;
          break;
        case room_effect::kind::report_part:
        case room_effect::kind::tell_done:
          break; // parts are fed by hand (part_done, source_done)
      }
    }
  }

  void deliver(const envelope& m) {
    if (ended_.count(m.to) > 0) {
      // The rank's room actor ended when it finished: its manager's
      // tombstone takes the word (manager_rooms.cpp, route_t::tombstone):
      // it answers a decision request with what the room concluded and
      // drops everything else.
      if (m.kind == envelope::request) {
        ++tombstone_answers_;
        run(m.to, {room_protocol::answer_cleared(false, {}, m.from)});
      }
      return;
    }
    auto& p = at(m.to);
    switch (m.kind) {
      case envelope::request:
        run(m.to, p.on_failure(m.error, true, m.from, now));
        break;
      case envelope::decision:
        run(m.to, p.on_failure(m.error, false, m.from, now));
        break;
      case envelope::commit:
        run(m.to, p.committed(now));
        break;
      case envelope::fence:
        run(m.to, p.fenced(m.from, now));
        break;
    }
  }

  /// Delivers one queued message, picked by `rng`.
  void deliver_one(std::mt19937_64& rng) {
    auto i = std::uniform_int_distribution<size_t>{0, queue_.size() - 1}(rng);
    auto m = queue_[i];
    queue_.erase(queue_.begin() + static_cast<long>(i));
    deliver(m);
  }

  /// Delivers everything queued, in FIFO order or shuffled by `rng`.
  void settle(std::mt19937_64* rng = nullptr) {
    while (!queue_.empty()) {
      size_t i = 0;
      if (rng)
        i = std::uniform_int_distribution<size_t>{0, queue_.size() - 1}(*rng);
      auto m = queue_[i];
      queue_.erase(queue_.begin() + static_cast<long>(i));
      deliver(m);
    }
  }

  size_t queued() const {
    return queue_.size();
  }

  kv_poll published(rank_id id) const {
    return published_.at(id);
  }

  int publishes(rank_id id) const {
    auto i = publishes_.find(id);
    return i == publishes_.end() ? 0 : i->second;
  }

  const kv_transfer_error& error(rank_id id) const {
    return errors_.at(id);
  }

  int origins() const {
    return origin_counts_;
  }

  int fence_expiries() const {
    return fence_expiries_;
  }

  /// Every rank published Failed with the same root cause, exactly one rank
  /// as its origin, and that origin is `expected` (any when -1).
  void check_one_origin(rank_id expected = -1) const {
    std::optional<kv_transfer_error> first;
    int origins = 0;
    for (auto& kvp : ranks_) {
      INFO("rank " << kvp.first);
      REQUIRE(published_.at(kvp.first) == kv_poll::failed);
      auto& e = errors_.at(kvp.first);
      if (!first)
        first = e;
      CHECK(e.origin_rank == first->origin_rank);
      CHECK(e.failure_reason == first->failure_reason);
      CHECK(e.bootstrap_room == room);
      if (!e.is_from_another_rank) {
        ++origins;
        CHECK(e.origin_rank == kvp.first);
      }
    }
    bool origin_in_room = ranks_.count(first->origin_rank) > 0;
    CHECK(origins == (origin_in_room ? 1 : 0));
    CHECK(origin_counts_ == origins);
    if (expected >= 0)
      CHECK(first->origin_rank == expected);
  }

  /// Drives every rank through a successful handshake and transfer up to
  /// the decode parts (not delivered yet).
  void transfer_all() {
    for (auto id : {d0, d1}) {
      run(id, at(id).advance(kv_poll::waiting_for_input, now));
      at(id).dst_sent(id == d0 ? p0 : p1);
    }
    for (auto id : {p0, p1}) {
      run(id, at(id).advance(kv_poll::waiting_for_input, now));
      run(id, at(id).advance(kv_poll::transferring, now));
    }
    for (auto id : {d0, d1})
      run(id, at(id).advance(kv_poll::transferring, now));
  }

  /// Prefill rank `p` wrote its last byte for decode rank `d`, which sends
  /// its part to the decider.
  void part_done(rank_id p, rank_id d) {
    run(p, at(p).prepare(now));
    run(d, at(d).source_done(p, now));
    run(d, at(d).prepare(now));
    run(p0, at(p0).part_done(d == d0 ? 0 : 1, 2, now));
  }

  uint64_t now = 1000;
  /// Failed prefill ranks fence their decode rank by themselves.
  bool auto_fence = true;
  /// Ranks whose room finished end, and their tombstone answers for them.
  bool end_finished = false;

private:
  std::map<rank_id, room_protocol> ranks_;
  std::map<rank_id, kv_poll> published_;
  std::map<rank_id, kv_transfer_error> errors_;
  std::map<rank_id, int> publishes_;
  std::deque<envelope> queue_;
  std::set<rank_id> ended_;
  int tombstone_answers_ = 0;
  int origin_counts_ = 0;
  int fence_expiries_ = 0;
};

} // namespace

TEST_CASE("every rank of a room knows the same decider before any message moves") {
  room_net net;
  for (auto id : {p0, p1, d0, d1}) {
    CHECK(net.at(id).decider().side == role::prefill);
    CHECK(net.at(id).decider().dp_rank == 0);
  }
  CHECK(net.at(p0).deciding());
  CHECK_FALSE(net.at(p1).deciding());
  CHECK_FALSE(net.at(d0).deciding());
}

TEST_CASE("a room whose every part is done commits once, on every rank") {
  room_net net;
  net.transfer_all();
  net.part_done(p1, d1);
  net.settle();
  CHECK(net.published(d1) == kv_poll::transferring);
  net.part_done(p0, d0);
  net.settle();
  for (auto id : {p0, p1, d0, d1})
    CHECK(net.published(id) == kv_poll::success);
}

TEST_CASE("a commit that overtakes a decode rank's own last part is kept until the part is done") {
  // d1 hears the decider's commit before p1's confirmation that its last
  // bytes landed (two senders, two links): it was dropped, and d1 waited
  // for its deadline or the decider's loss (a 2P x 2D process run lost 6 of
  // 150 rooms so, about one run in thirty).
  room_net net;
  net.transfer_all();
  net.run(p1, net.at(p1).prepare(net.now));
  net.run(p0, net.at(p0).part_done(1, 2, net.now));  // p1 told the decider
  net.part_done(p0, d0);
  net.settle();  // the commit reaches d1 now, before its part is done
  CHECK(net.published(d0) == kv_poll::success);
  CHECK(net.published(d1) == kv_poll::transferring);
  net.run(d1, net.at(d1).source_done(p1, net.now));
  net.run(d1, net.at(d1).prepare(net.now));
  CHECK(net.published(d1) == kv_poll::success);
  CHECK(net.publishes(d1) == 3); // waiting, transferring, success: once
}

TEST_CASE("the same bad indices on every decode rank yield one origin") {
  for (int order = 0; order < 2; ++order) {
    room_net net;
    for (auto id : {d0, d1})
      net.run(id, net.at(id).advance(kv_poll::waiting_for_input, net.now));
    // Both decode ranks reject the same init at once; neither concludes on
    // its own.
    auto first = order == 0 ? d0 : d1;
    auto second = order == 0 ? d1 : d0;
    net.run(first, net.at(first).fail_local("bad receiver init: index 99", failure_cause::bad_input,
                                            net.now));
    net.run(second, net.at(second).fail_local("bad receiver init: index 99",
                                              failure_cause::bad_input, net.now));
    CHECK(net.at(d0).awaiting_decision());
    CHECK(net.at(d1).awaiting_decision());
    CHECK(net.published(d0) == kv_poll::waiting_for_input);
    net.settle();
    net.check_one_origin(first);
  }
}

TEST_CASE("simultaneous timeouts on every rank yield one origin") {
  room_net net;
  net.transfer_all();
  net.now += 5000;
  // Every rank's tick comes before any message is delivered.
  for (auto id : {d1, p1, d0, p0})
    net.run(id, net.at(id).tick(net.now));
  net.settle();
  // The decider's own timeout came first.
  net.check_one_origin(p0);
  for (auto id : {p0, p1, d0, d1})
    CHECK(net.error(id).cause == failure_cause::timeout_transferring);
}

TEST_CASE("both sides aborting at once before their handshake yields one origin") {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    room_net net;
    std::mt19937_64 rng{seed};
    net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                      net.now, true));
    net.run(p1, net.at(p1).fail_local("aborted by prefill scheduler", failure_cause::abort,
                                      net.now, true));
    net.settle(&rng);
    net.check_one_origin();
  }
}

TEST_CASE("a failure racing the commit: whichever the decider sees first wins everywhere") {
  SECTION("the abort reaches the decider before the last part: Failed everywhere") {
    room_net net;
    net.transfer_all();
    net.part_done(p1, d1);
    net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                      net.now, true));
    net.settle();
    // The last part arrives after the decision and changes nothing.
    net.run(p0, net.at(p0).part_done(0, 2, net.now));
    net.run(d0, net.at(d0).source_done(p0, net.now));
    net.settle();
    net.check_one_origin(d0);
  }
  SECTION("the commit comes first: the aborting rank is answered Success") {
    room_net net;
    net.transfer_all();
    net.part_done(p1, d1);
    net.part_done(p0, d0);
    // d1 is prepared and aborts before the commit reaches it.
    net.run(d1, net.at(d1).fail_local("aborted by decode scheduler", failure_cause::abort,
                                      net.now, true));
    net.settle();
    for (auto id : {p0, p1, d0, d1})
      CHECK(net.published(id) == kv_poll::success);
  }
}

TEST_CASE("random fault sets in random message orders always end with one origin") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng{seed};
    room_net net;
    bool transferred = rng() % 2 == 0;
    if (transferred)
      net.transfer_all();
    std::vector<rank_id> all{p0, p1, d0, d1};
    std::shuffle(all.begin(), all.end(), rng);
    auto n = 1 + rng() % 4;
    for (size_t i = 0; i < n; ++i) {
      auto id = all[i];
      net.run(id, net.at(id).fail_local("fault " + std::to_string(id), failure_cause::fault,
                                        net.now));
      // Some deliveries interleave with the faults.
      for (auto k = rng() % 3; k > 0 && net.queued() > 0; --k) {
        std::mt19937_64 pick{rng()};
        net.settle(&pick);
      }
    }
    net.settle(&rng);
    INFO("seed " << seed);
    net.check_one_origin();
  }
}

TEST_CASE("decode holds Failed until the sender that got its pages fenced") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  // Concluded, but prefill rank 0 may still be writing into d0's pages.
  CHECK(net.at(d0).state() == kv_poll::failed);
  CHECK(net.at(d0).fence_held());
  CHECK(net.published(d0) == kv_poll::transferring);
  CHECK(net.published(d1) == kv_poll::transferring);
  net.run(d1, net.at(d1).fenced(p1, net.now));
  CHECK(net.published(d1) == kv_poll::failed);
  CHECK(net.published(d0) == kv_poll::transferring);
  net.run(d0, net.at(d0).fenced(p0, net.now));
  CHECK(net.published(d0) == kv_poll::failed);
  CHECK(net.error(d0).origin_rank == d0);
  // A late transfer result after Failed, or after clear, publishes nothing.
  auto before = net.publishes(d0);
  net.run(d0, net.at(d0).source_done(p0, net.now));
  net.run(d0, net.at(d0).fenced(p0, net.now));
  net.run(d0, net.at(d0).clear(net.now));
  net.run(d0, net.at(d0).fenced(p0, net.now));
  net.run(d0, net.at(d0).source_done(p0, net.now));
  CHECK(net.publishes(d0) == before);
  CHECK(net.fence_expiries() == 0);
}

TEST_CASE("a lost sender is fenced by its loss") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  CHECK(net.published(d0) == kv_poll::transferring);
  net.run(d0, net.at(d0).peer_lost(make_rank(role::prefill, 0, p0), "rank p0 lost", net.now));
  CHECK(net.published(d0) == kv_poll::failed);
  CHECK(net.error(d0).origin_rank == d0);
}

TEST_CASE("a fence that never comes is published at its deadline, and says so") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  net.now += net.at(d0).fence_ms() - 1;
  net.run(d0, net.at(d0).tick(net.now));
  CHECK(net.published(d0) == kv_poll::transferring);
  net.now += 1;
  net.run(d0, net.at(d0).tick(net.now));
  CHECK(net.published(d0) == kv_poll::failed);
  CHECK(net.fence_expiries() == 1);
}

TEST_CASE("a sender that finished writing needs no fence") {
  room_net net;
  net.transfer_all();
  net.run(d0, net.at(d0).source_done(p0, net.now));
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  CHECK(net.published(d0) == kv_poll::failed);
}

TEST_CASE("a pulling decode rank holds Failed until its own reads are over, past the fence's deadline") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).reading(true, net.now));
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  CHECK(net.at(d0).fence_held());
  // The sender stopped serving (its fence), but a read may still be landing.
  net.run(d0, net.at(d0).fenced(p0, net.now));
  CHECK(net.published(d0) == kv_poll::transferring);
  // The worker answers every read: the hold has no deadline of its own.
  net.now += 10 * net.at(d0).fence_ms();
  net.run(d0, net.at(d0).tick(net.now));
  CHECK(net.published(d0) == kv_poll::transferring);
  CHECK(net.fence_expiries() == 0);
  net.run(d0, net.at(d0).reading(false, net.now));
  CHECK(net.published(d0) == kv_poll::failed);
  CHECK(net.error(d0).origin_rank == d0);
}

TEST_CASE("a pulling decode rank whose sender's fence expires still waits for its reads") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).reading(true, net.now));
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  net.now += net.at(d0).fence_ms();
  net.run(d0, net.at(d0).tick(net.now));
  CHECK(net.fence_expiries() == 1);
  CHECK(net.published(d0) == kv_poll::transferring);
  net.run(d0, net.at(d0).reading(false, net.now));
  CHECK(net.published(d0) == kv_poll::failed);
}

TEST_CASE("reads that end before the room concludes hold nothing") {
  room_net net;
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).reading(true, net.now));
  net.run(d0, net.at(d0).reading(false, net.now));
  net.run(d0, net.at(d0).source_done(p0, net.now));
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  CHECK(net.published(d0) == kv_poll::failed);
}

TEST_CASE("without the fence the decode rank publishes at once (the sabotage a stress run catches)") {
  room_protocol::options opts;
  opts.fence = false;
  room_net net{opts};
  net.auto_fence = false;
  net.transfer_all();
  net.run(d0, net.at(d0).fail_local("aborted by decode scheduler", failure_cause::abort,
                                    net.now, true));
  net.settle();
  CHECK(net.published(d0) == kv_poll::failed);
}

TEST_CASE("losing the decider fails the room with the lost rank as origin everywhere") {
  room_net net;
  net.transfer_all();
  auto lost = make_rank(role::prefill, 0, p0);
  for (auto id : {p1, d0, d1})
    net.run(id, net.at(id).peer_lost(lost, "rank p0 lost: remote_link_unreachable", net.now));
  net.settle();
  CHECK(net.published(p1) == kv_poll::failed);
  CHECK(net.published(d1) == kv_poll::failed);
  CHECK(net.error(d1).origin_rank == p0);
  CHECK(net.error(d1).is_from_another_rank);
  CHECK(net.error(d1).cause == failure_cause::peer_lost);
  CHECK(net.published(d0) == kv_poll::failed); // its writer was the lost rank
}

TEST_CASE("losing another rank goes through the decider: one cause everywhere") {
  room_net net;
  net.transfer_all();
  auto lost = make_rank(role::decode, 1, d1);
  net.run(p1, net.at(p1).peer_lost(lost, "rank d1 lost (seen by p1)", net.now));
  net.run(d0, net.at(d0).peer_lost(lost, "rank d1 lost (seen by d0)", net.now));
  net.run(p0, net.at(p0).peer_lost(lost, "rank d1 lost (seen by p0)", net.now));
  net.settle();
  for (auto id : {p0, p1, d0}) {
    CHECK(net.published(id) == kv_poll::failed);
    CHECK(net.error(id).origin_rank == d1);
    CHECK(net.error(id).failure_reason == "rank d1 lost (seen by p0)");
    CHECK(net.error(id).cause == failure_cause::peer_lost);
  }
}

TEST_CASE("a sender that proposed a failure reports no part, whatever lands after") {
  room_net net;
  net.transfer_all();
  // Prefill rank 1's aux batch failed while its KV batch was still moving:
  // it proposes the failure to the decider...
  net.run(p1, net.at(p1).fail_local("transfer to d1 failed: injected fault on aux data",
                                    failure_cause::fault, net.now));
  REQUIRE(net.at(p1).awaiting_decision());
  // ...and the KV batch landing next makes no whole part of it.
  auto& fx = net.at(p1).all_written({written_part{make_rank(role::decode, 1, d1)}}, net.now);
  CHECK(fx.empty());
  CHECK_FALSE(net.at(p1).prepared());
  net.settle();
  net.check_one_origin(p1);
}

TEST_CASE("an unanswered proposal concludes at the decision deadline with its own cause") {
  room_net net;
  net.run(d1, net.at(d1).fail_local("bad receiver init", failure_cause::bad_input, net.now));
  CHECK(net.at(d1).awaiting_decision());
  net.now += 999;
  net.run(d1, net.at(d1).tick(net.now));
  CHECK(net.published(d1) == kv_poll::bootstrapping);
  net.now += 1;
  net.run(d1, net.at(d1).tick(net.now));
  CHECK(net.published(d1) == kv_poll::failed);
  CHECK_FALSE(net.error(d1).is_from_another_rank);
  CHECK(net.error(d1).failure_reason.find("gave no decision") != std::string::npos);
  // The proposal's class stays: set where it was identified, not read back.
  CHECK(net.error(d1).cause == failure_cause::bad_input);
}

TEST_CASE("clearing a live room concludes it at once and fans out") {
  room_net net;
  net.run(d1, net.at(d1).clear(net.now));
  CHECK(net.queued() == 3);
  net.settle();
  for (auto id : {p0, p1, d0}) {
    CHECK(net.published(id) == kv_poll::failed);
    CHECK(net.error(id).origin_rank == d1);
    CHECK(net.error(id).cause == failure_cause::abort);
  }
}

TEST_CASE("a part confirmation that does not fit the room fails it") {
  room_net net;
  net.transfer_all();
  net.run(p0, net.at(p0).part_done(5, 2, net.now));
  net.settle();
  net.check_one_origin(p0);
  CHECK(net.error(d0).failure_reason.find("decode TP slot 5 of 2") != std::string::npos);
  CHECK(net.error(d0).cause == failure_cause::other);
}

TEST_CASE("without the decider the same fault on two ranks makes two origins (the sabotage a stress run catches)") {
  room_protocol::options opts;
  opts.one_decider = false;
  room_net net{opts};
  net.run(d0, net.at(d0).fail_local("bad receiver init: index 99", failure_cause::bad_input,
                                    net.now));
  net.run(d1, net.at(d1).fail_local("bad receiver init: index 99", failure_cause::bad_input,
                                    net.now));
  net.settle();
  CHECK(net.origins() == 2);
}

TEST_CASE("a failure's class travels with it to every rank, whatever its words") {
  room_net net;
  net.transfer_all();
  // A reason that reads like another class: only the class set counts.
  net.run(p1, net.at(p1).fail_local("timed out in Bootstrapping; aborted by; injected ",
                                    failure_cause::transport, net.now));
  net.settle();
  net.check_one_origin(p1);
  for (auto id : {p0, p1, d0, d1})
    CHECK(net.error(id).cause == failure_cause::transport);
}

TEST_CASE("a room that times out before its peers came says so by its class") {
  room_net net;
  net.now += 5000;
  for (auto id : {p0, p1, d0, d1})
    net.run(id, net.at(id).tick(net.now));
  net.settle();
  for (auto id : {p0, p1, d0, d1})
    CHECK(net.error(id).cause == failure_cause::timeout_bootstrapping);
}

TEST_CASE("a room is finished once Success is published, and never while the fence holds it or it failed") {
  room_net net;
  net.transfer_all();
  // p1 got d0's pages too and has not finished writing them.
  net.at(d0).dst_sent(p1);
  for (auto id : {p0, p1, d0, d1})
    CHECK_FALSE(net.at(id).finished());
  net.part_done(p1, d1);
  net.part_done(p0, d0);
  net.settle();
  for (auto id : {p0, p1, d1}) {
    CHECK(net.published(id) == kv_poll::success);
    CHECK(net.at(id).finished());
  }
  // d0 concluded Success, held from its scheduler while p1 may still write.
  CHECK(net.at(d0).state() == kv_poll::success);
  CHECK(net.at(d0).fence_held());
  CHECK_FALSE(net.at(d0).finished());
  net.run(d0, net.at(d0).source_done(p1, net.now));
  CHECK(net.published(d0) == kv_poll::success);
  CHECK(net.at(d0).finished());

  room_net failed;
  failed.transfer_all();
  failed.run(d1, failed.at(d1).fail_local("fault", failure_cause::fault, failed.now));
  failed.settle();
  failed.check_one_origin();
  for (auto id : {p0, p1, d0, d1})
    CHECK_FALSE(failed.at(id).finished());
}

TEST_CASE("rooms that end when they finish conclude as rooms that live until cleared, in any order") {
  // A failure (an abort, or a room actor killed and carried on by its
  // manager) raced against the commit, in random orders: the decider may
  // finish (and its actor end) before a proposal reaches it; its tombstone
  // must then answer as the room would have. A killed rank lost the commit
  // sent to its actor, so only that answer concludes it.
  int answered = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    std::map<rank_id, kv_poll> outcome[2];
    for (int mode = 0; mode < 2; ++mode) {
      std::mt19937_64 rng{seed};
      room_net net;
      net.end_finished = mode == 1;
      net.transfer_all();
      std::vector<rank_id> all{p0, p1, d0, d1};
      auto faulty = all[rng() % 4];
      bool kill = rng() % 2 == 0;
      auto fault = [&] {
        if (net.ended(faulty))
          return; // a room whose actor ended can be neither killed nor aborted
        // A room killed after it concluded is buried, not carried on: its
        // manager heard its conclusion first.
        if (kill && !net.at(faulty).concluded())
          net.kill(faulty);
        else
          net.run(faulty, net.at(faulty).fail_local("aborted", failure_cause::abort, net.now, true));
      };
      // Before every part is done, or after k deliveries of what the commit
      // set moving.
      bool before = rng() % 4 == 0;
      if (before)
        fault();
      net.part_done(p1, d1);
      net.part_done(p0, d0);
      auto k = rng() % (net.queued() + 1);
      for (uint64_t i = 0; !before && i < k && net.queued() > 0; ++i)
        net.deliver_one(rng);
      if (!before)
        fault();
      net.settle(&rng);
      INFO("seed " << seed << ", ending finished rooms: " << mode);
      for (auto id : all) {
        CHECK(is_terminal(net.published(id)));
        outcome[mode][id] = net.published(id);
      }
      if (net.published(p0) == kv_poll::failed)
        net.check_one_origin();
      answered += net.tombstone_answers();
    }
    INFO("seed " << seed);
    CHECK(outcome[0] == outcome[1]);
  }
  // The race the case is about happened: a decider ended while a proposal
  // was still on its way to it.
  CHECK(answered > 0);
}
