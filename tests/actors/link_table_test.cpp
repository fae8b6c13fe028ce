// A rank's links as a plain class: two tables play the handshake against
// each other, with time passed in and peers as plain values (no actor
// system).
#include <catch2/catch.hpp>

#include <functional>

#include "kvroom/actors/control/link_table.hpp"
#include "kvroom/actors/control/stranger_log.hpp"
#include "ranks.hpp"

using namespace kvroom;

namespace {

/// A peer manager's handle: its number (0: none).
struct fake_peer {
  int id = 0;
  explicit operator bool() const noexcept {
    return id != 0;
  }
  bool operator==(const fake_peer& other) const noexcept {
    return id == other.id;
  }
};

} // namespace

template <>
struct std::hash<fake_peer> {
  size_t operator()(const fake_peer& x) const noexcept {
    return std::hash<int>{}(x.id);
  }
};

namespace {

using table = basic_link_table<fake_peer, int>;

auto members(const char* key = "a deployment secret of some length") {
  return std::make_shared<const membership>(deployment_secret{key});
}

std::shared_ptr<const rank_entry> entry(rank_id id, uint64_t incarnation = 7) {
  auto e = std::make_shared<rank_entry>();
  e->rank = test::make_rank(role::decode, 0, 0, id);
  e->control_host = "127.0.0.1";
  e->control_port = static_cast<uint16_t>(9000 + id);
  e->incarnation = incarnation;
  return e;
}

constexpr uint32_t query_ms = 2000;
constexpr uint32_t idle_ms = 10000;

table make(rank_id self, const char* key = "a deployment secret of some length") {
  return table{self, members(key), link_timing{query_ms, idle_ms}, 42};
}

/// A (rank 1, peer 11) dials B (rank 2, peer 22) through the handshake; the
/// outcome of each step is checked.
struct pair {
  table a = make(1);
  table b = make(2);
  fake_peer a_peer{11};
  fake_peer b_peer{22};
  std::shared_ptr<const rank_entry> b_entry = entry(2, 200);

  /// A wants B and connects at `now`: its hello.
  link_hello dial(uint64_t now = 0) {
    a.want(b_entry, now);
    a.begin(2, now);
    auto hello = a.connected(2, b_entry, b_peer, 1, now);
    REQUIRE(hello);
    return *hello;
  }

  /// The handshake up to A's finish (B accepted the hello at `now`).
  link_finish finish(uint64_t now = 0) {
    auto reply = b.hello(dial(now), a_peer, now);
    auto fin = a.reply(reply.message, b_peer, 1, now);
    REQUIRE(fin.what == table::reply_outcome::finish);
    return fin.message;
  }
};

} // namespace

TEST_CASE("link table: a link is usable on both sides only after all four messages") {
  pair p;
  uint64_t now = 1000;
  REQUIRE(p.a.want(p.b_entry, now) == table::want_result::dial_now); // 2 > 1: no yield
  CHECK(p.a.want(p.b_entry, now) == table::want_result::under_way);
  REQUIRE(p.a.begin(2, now) == p.b_entry);
  auto hello = p.a.connected(2, p.b_entry, p.b_peer, 100, now + 1);
  REQUIRE(hello);
  CHECK(hello->from == 1);
  CHECK(hello->incarnation == 100);

  auto reply = p.b.hello(*hello, p.a_peer, now + 2);
  REQUIRE(reply.what == table::hello_outcome::answer);
  CHECK(p.b.accepting() == 1);

  // An answer from another peer than the one dialled is not this link's.
  CHECK(p.a.reply(reply.message, fake_peer{33}, 100, now + 3).what
        == table::reply_outcome::ignored);
  auto fin = p.a.reply(reply.message, p.b_peer, 100, now + 3);
  REQUIRE(fin.what == table::reply_outcome::finish);
  CHECK(fin.peer == p.b_peer);
  // Finished once: a duplicate reply does nothing.
  CHECK(p.a.reply(reply.message, p.b_peer, 100, now + 3).what == table::reply_outcome::ignored);
  // Not usable on A before the ack.
  CHECK(p.a.dialing() == 1);

  auto accepted = p.b.finish(fin.message, p.a_peer, now + 4);
  REQUIRE(accepted.what == table::finish_outcome::accepted);
  CHECK(accepted.link.id == 1);
  CHECK(accepted.link.incarnation == 100);
  CHECK(accepted.link.peer == p.a_peer);
  CHECK(p.b.accepting() == 0);

  CHECK_FALSE(p.a.ack(link_ack{2}, fake_peer{33}));
  auto made = p.a.ack(link_ack{2}, p.b_peer);
  REQUIRE(made);
  CHECK(made->id == 2);
  CHECK(made->incarnation == 200);
  CHECK(made->peer == p.b_peer);
  CHECK(p.a.dialing() == 0);
}

TEST_CASE("link table: proofs of another deployment are refused on both sides") {
  auto a = make(1);
  auto stranger = make(2, "another deployment's secret here");
  auto e = entry(2);
  a.want(e, 0);
  a.begin(2, 0);
  auto hello = a.connected(2, e, fake_peer{22}, 1, 0);
  REQUIRE(hello);
  auto reply = stranger.hello(*hello, fake_peer{11}, 0);
  REQUIRE(reply.what == table::hello_outcome::answer);
  auto out = a.reply(reply.message, fake_peer{22}, 1, 10);
  CHECK(out.what == table::reply_outcome::bad_proof);
  // The link pauses for bad_proof_ms, then is attempted again.
  CHECK(a.due(10 + link_timing::bad_proof_ms - 1).empty());
  CHECK(a.due(10 + link_timing::bad_proof_ms) == std::vector<rank_id>{2});

  // The other way: a stranger's finish does not pass a member's check.
  auto b = make(2);
  auto s2 = make(1, "another deployment's secret here");
  s2.want(entry(2), 0);
  s2.begin(2, 0);
  auto h2 = s2.connected(2, nullptr, fake_peer{22}, 1, 0);
  CHECK_FALSE(h2); // not the entry dialled: stale
  auto e2 = entry(2);
  s2.want(e2, 0);
  s2.begin(2, 0);
  h2 = s2.connected(2, e2, fake_peer{22}, 1, 0);
  REQUIRE(h2);
  auto r2 = b.hello(*h2, fake_peer{11}, 0);
  // The stranger cannot check B's proof, but can send a finish anyway.
  CHECK(b.finish(link_finish{1, "forged"}, fake_peer{11}, 1).what
        == table::finish_outcome::bad_proof);
  // The handshake is used up: a second try has nothing to finish.
  CHECK(b.finish(link_finish{1, "forged"}, fake_peer{11}, 1).what
        == table::finish_outcome::ignored);
  (void) r2;
}

TEST_CASE("link table: a finish for another rank, or after the handshake expired, is dropped") {
  pair p;
  auto other = p.finish();
  other.from = 3;
  CHECK(p.b.finish(other, p.a_peer, 1).what == table::finish_outcome::ignored);

  // Again, finished after accepting_ms.
  pair q;
  CHECK(q.b.finish(q.finish(), q.a_peer, link_timing::accepting_ms + 1).what
        == table::finish_outcome::ignored);
}

TEST_CASE("link table: a retried hello with the same nonce gets the same answer") {
  pair p;
  auto hello = p.dial();
  auto first = p.b.hello(hello, p.a_peer, 0);
  // The attempt stalls; A tries again with the same nonce (kept per link).
  p.a.begin(2, 600);
  auto again = *p.a.connected(2, p.b_entry, p.b_peer, 1, 600);
  CHECK(again.nonce == hello.nonce);
  auto second = p.b.hello(again, p.a_peer, 600);
  CHECK(second.message.nonce == first.message.nonce);
  // So the earlier attempt's reply still verifies on A.
  CHECK(p.a.reply(first.message, p.b_peer, 1, 601).what == table::reply_outcome::finish);
}

TEST_CASE("link table: a stranger holds at most max_accepting handshakes, for accepting_ms") {
  auto b = make(2);
  link_hello h{1, 1, std::string(32, 'n')};
  for (int i = 1; i <= static_cast<int>(link_timing::max_accepting); ++i)
    REQUIRE(b.hello(h, fake_peer{i}, 0).what == table::hello_outcome::answer);
  int next = static_cast<int>(link_timing::max_accepting) + 1;
  CHECK(b.hello(h, fake_peer{next}, 10).what == table::hello_outcome::refused);
  CHECK(b.accepting() == link_timing::max_accepting);
  // Expired ones make room; `due` expires them too.
  CHECK(b.hello(h, fake_peer{next}, link_timing::accepting_ms + 1).what
        == table::hello_outcome::answer);
  b.due(2 * link_timing::accepting_ms + 2);
  CHECK(b.accepting() == 0);
  // A malformed nonce, or no sender, is no handshake.
  CHECK(b.hello(link_hello{1, 1, "short"}, fake_peer{1}, 0).what
        == table::hello_outcome::ignored);
  CHECK(b.hello(h, fake_peer{}, 0).what == table::hello_outcome::ignored);
}

TEST_CASE("link table: the lower id yields, then dials when its pause ends") {
  auto b = make(2);
  auto a_entry = entry(1);
  REQUIRE(b.want(a_entry, 1000) == table::want_result::dial_later);
  CHECK(b.due(1000 + 19).empty());
  auto at = b.due(1000 + 120);
  CHECK(at == std::vector<rank_id>{1});
  // The manager wakes for it at exactly that moment, not at its sweep.
  b.want(a_entry, 1000);
  auto due = b.next_due();
  REQUIRE(due);
  CHECK(*due >= 1000 + 20);
  CHECK(*due <= 1000 + 119);
  CHECK(b.due(*due - 1).empty());
  CHECK(b.due(*due) == std::vector<rank_id>{1});
  // Before then, the peer's link came first: nothing to dial any more.
  b.stop(1);
  CHECK(b.due(1000 + 120).empty());
  CHECK_FALSE(b.next_due());
  // An entry of a newer incarnation replaces the link wanted.
  b.want(a_entry, 0);
  CHECK(b.want(entry(1, 8), 0) == table::want_result::dial_later);
  CHECK(b.dialing() == 1);
}

TEST_CASE("link table: attempts are retried with backoff, stalls and deadlines") {
  auto a = make(1);
  auto e = entry(2);
  a.want(e, 0);
  a.begin(2, 0);
  // In progress: nothing due until the attempt deadline, and no wake-up
  // (a deadline is a failure the sweep finds).
  CHECK_FALSE(a.next_due());
  CHECK(a.due(query_ms).empty());
  CHECK(a.due(query_ms + 1) == std::vector<rank_id>{2});
  // Connect failures back off: the second attempt pauses 100..200 ms;
  // later attempts more, never past 1 s.
  a.begin(2, 0);
  auto pause = a.connect_failed(2, e, 0);
  REQUIRE(pause);
  CHECK(*pause >= 100);
  CHECK(*pause <= 200);
  for (int i = 0; i < 10; ++i)
    a.begin(2, 0);
  pause = a.connect_failed(2, e, 0);
  CHECK(*pause >= 500);
  CHECK(*pause <= 1000);
  CHECK(a.due(*pause - 1).empty());
  CHECK(a.due(*pause) == std::vector<rank_id>{2});
  // An answer for an entry no longer dialled is stale.
  CHECK_FALSE(a.connect_failed(2, entry(2, 9), 0));
  // Nothing published at the endpoint: again after unpublished_ms.
  a.begin(2, 0);
  a.unpublished(2, e, 5);
  CHECK(a.due(5 + link_timing::unpublished_ms - 1).empty());
  CHECK(a.due(5 + link_timing::unpublished_ms) == std::vector<rank_id>{2});
  // Connected, no answer for stalled_ms: a handshake message was lost.
  a.begin(2, 0);
  REQUIRE(a.connected(2, e, fake_peer{22}, 1, 100));
  CHECK(a.due(100 + link_timing::stalled_ms).empty());
  CHECK(a.due(100 + link_timing::stalled_ms + 1) == std::vector<rank_id>{2});
}

TEST_CASE("link timing: the backoff and reconnect rules") {
  CHECK(link_timing{100, 0}.attempt_ms() == 500);
  CHECK(link_timing{3000, 0}.attempt_ms() == 3000);
  CHECK(link_timing::dial_backoff_ms(1, 0) == 50);
  CHECK(link_timing::dial_backoff_ms(1, 50) == 100);
  CHECK(link_timing::dial_backoff_ms(30, 0) == 500);
  CHECK(link_timing::dial_backoff_ms(30, 500) == 1000);
  CHECK(link_timing::reconnect_ms(0) == 50);
  CHECK(link_timing::reconnect_ms(50) == 100);
  CHECK(link_timing::reconnect_ms(400) == 500);
  CHECK(link_timing::reconnect_ms(500) == 500);
  CHECK(link_timing::yield_ms(0) == 20);
  CHECK(link_timing::yield_ms(19) == 39);
  CHECK(link_timing::yield_ms(20) == 20);
  CHECK(link_timing::yield_ms(UINT32_MAX) < 40);
  CHECK(link_timing::rejoin_ms(249) == 299);
}

TEST_CASE("link table: idle processes are asked to close once, not while in use") {
  auto a = make(1);
  a.traffic(5, 0);
  a.traffic(6, 0);
  std::function<bool(int)> in_use = [](int node) { return node == 6; };
  CHECK(a.idle(idle_ms - 1, in_use).empty());
  CHECK(a.idle(idle_ms, in_use) == std::vector<int>{5});
  // Asked: not asked again while the answer may come.
  CHECK(a.idle(idle_ms + 1, in_use).empty());
  // No answer for another idle period: asked again.
  CHECK(a.idle(2 * idle_ms + 1, in_use) == std::vector<int>{5});
  // It refused (still uses it): that is traffic, the clock starts again.
  a.close_answered(5, false, 2 * idle_ms + 2);
  CHECK(a.idle(3 * idle_ms + 1, in_use).empty());
  CHECK(a.idle(3 * idle_ms + 2, in_use) == std::vector<int>{5});
  // Forgotten (its last link went): never asked again.
  a.forget(5);
  CHECK(a.idle(10 * idle_ms, in_use).empty());
  // idle_ms 0: links stay.
  table keep{1, members(), link_timing{query_ms, 0}, 1};
  keep.traffic(5, 0);
  CHECK(keep.idle(100 * idle_ms, [](int) { return false; }).empty());
}

TEST_CASE("stranger log: one line a second, the rest counted into the next") {
  stranger_log log;
  auto step = link_timing::stranger_log_ms;
  // The first is written, with nothing before it.
  CHECK(log.note(10) == std::optional<uint64_t>{0});
  CHECK(stranger_log::more(0).empty());
  // A flood within the second: counted, not written.
  for (uint64_t t = 11; t < 10 + step; ++t)
    CHECK_FALSE(log.note(t));
  // The next second's first line says how many went unwritten.
  auto unlogged = log.note(10 + step);
  REQUIRE(unlogged);
  CHECK(*unlogged == step - 1);
  CHECK(stranger_log::more(*unlogged) == " (and " + std::to_string(step - 1)
                                           + " more since the last such line)");
  // And the count starts again.
  CHECK(log.note(10 + 3 * step) == std::optional<uint64_t>{0});
}
