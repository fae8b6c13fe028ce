// Rooms between ranks of different parallel layouts, in one process over
// real registered buffers: every decode rank holds, byte-exact, the heads
// its layout says, gathered from the prefill ranks the rank mapping names;
// dummy prefill ranks conclude with the room; nothing lands outside the
// room's pages.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "kvroom/kit/harness.hpp"
#include "kvroom/kit/testkit.hpp"
#include "kvroom/transport/forwarding_backend.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

namespace {

struct deployment_shape {
  int32_t prefill_tp = 1;
  int32_t decode_tp = 1;
  int32_t kv_heads = 8;
  int32_t prefill_pp = 1;
  bool mla = false;
  page_order prefill_order = page_order::hnd;
  page_order decode_order = page_order::hnd;
  integrity_mode integrity = integrity_mode::off;
  /// Decode ranks declare their layouts; else they name only their TP size
  /// and pages, as SGLang's decode does, and hold the model the prefill
  /// group declares at that size.
  bool decode_declares = true;
  /// When set: the strided writes the prefill ranks' data planes were
  /// asked to post, counted.
  std::shared_ptr<std::atomic<uint64_t>> strided_posted;
};

/// The rank's own data plane, counting the strided writes it is asked to
/// post (alone or in a group, which it passes on as a group).
class strided_counter : public forwarding_backend {
public:
  strided_counter(backend_ptr inner, std::shared_ptr<std::atomic<uint64_t>> n)
    : forwarding_backend(std::move(inner)), n_(std::move(n)) {
  }

  post_result post(const write_batch& batch) override {
    *n_ += batch.strided.size();
    return forwarding_backend::post(batch);
  }

  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override {
    for (auto* b : batches)
      *n_ += b->strided.size();
    return inner_->post_group(batches);
  }

private:
  std::shared_ptr<std::atomic<uint64_t>> n_;
};

/// Rank `i` of a side: TP rank i % tp of PP stage i / tp (each stage holds
/// its share of the model's 4 layers).
parallel_layout layout_of(const deployment_shape& s, bool prefill, int32_t i) {
  parallel_layout x;
  x.tp_size = prefill ? s.prefill_tp : s.decode_tp;
  x.tp_rank = i % x.tp_size;
  x.pp_size = prefill ? s.prefill_pp : 1;
  x.pp_rank = i / x.tp_size;
  x.layers = 4 / x.pp_size;
  x.first_layer = x.pp_rank * x.layers;
  x.total_kv_heads = s.kv_heads;
  x.head_dim = 8;
  x.bytes_per_element = 2;
  x.tokens_per_page = 4;
  x.order = prefill ? s.prefill_order : s.decode_order;
  x.mla = s.mla;
  return x;
}

kv_shape cache_of(const parallel_layout& x) {
  kv_shape k;
  k.num_buffers = static_cast<uint32_t>(x.kv_buffers());
  k.num_pages = 16;
  k.page_size_bytes = x.page_bytes();
  k.num_aux = 1;
  k.aux_slots = 4;
  k.aux_item_bytes = 40;
  return k;
}

struct side {
  std::vector<parallel_layout> layouts;
  std::vector<std::unique_ptr<host_kv_cache>> caches;
  std::vector<std::unique_ptr<rank>> ranks;
};

side make_side(runtime& rt, const deployment_shape& s, bool prefill) {
  side out;
  auto tp = prefill ? s.prefill_tp : s.decode_tp;
  auto n = tp * (prefill ? s.prefill_pp : 1);
  for (int32_t t = 0; t < n; ++t) {
    auto x = layout_of(s, prefill, t);
    out.layouts.push_back(x);
    out.caches.push_back(std::make_unique<host_kv_cache>(cache_of(x)));
    out.caches.back()->fill(0xEE);
    rank_config c;
    c.side = prefill ? role::prefill : role::decode;
    c.tp_rank = x.tp_rank;
    c.tp_size = tp;
    c.memory = out.caches.back()->layout();
    if (prefill || s.decode_declares)
      c.parallel = x;
    c.integrity = s.integrity;
    c.timeouts = room_timeouts{10'000, 10'000, 10'000};
    if (prefill && s.strided_posted)
      c.data_plane = [n = s.strided_posted](const backend_config& bc) -> caf::expected<backend_ptr> {
        auto inner = make_backend(bc);
        if (!inner)
          return inner.error();
        return backend_ptr{std::make_unique<strided_counter>(std::move(*inner), n)};
      };
    auto r = rt.add_rank(c);
    if (!r)
      FAIL("add_rank: " << describe(r.error()));
    out.ranks.push_back(std::move(*r));
  }
  return out;
}

/// The harness's bounded wait, with these tests' limit.
bool until(std::function<bool()> pred) {
  return harness::wait_until(std::move(pred), 5000ms);
}

/// Moves `rooms` rooms (2 pages each, at other pages on the two sides) and
/// checks every decode rank byte-exact, and every prefill rank Success.
void run_rooms(const deployment_shape& s, int rooms) {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  auto p = make_side(rt, s, true);
  auto d = make_side(rt, s, false);
  for (int i = 0; i < rooms; ++i) {
    room_id room = 100 + static_cast<room_id>(i);
    std::vector<int64_t> src_pages{2 * i, 2 * i + 1};
    std::vector<int64_t> dst_pages{15 - 2 * i, 14 - 2 * i};
    int64_t src_aux = i % 4, dst_aux = 1;
    std::vector<kv_sender> senders;
    std::vector<kv_receiver> receivers;
    for (auto& r : d.ranks) {
      auto x = r->make_receiver(room);
      REQUIRE(x);
      REQUIRE_FALSE(x->init(dst_pages, dst_aux));
      receivers.push_back(std::move(*x));
    }
    for (size_t t = 0; t < p.ranks.size(); ++t) {
      p.caches[t]->write_room(room, src_pages, src_aux, p.layouts[t]);
      auto x = p.ranks[t]->make_sender(room);
      REQUIRE(x);
      REQUIRE_FALSE(x->init(src_pages.size(), src_aux));
      REQUIRE_FALSE(x->send(src_pages, true));
      senders.push_back(std::move(*x));
    }
    for (size_t t = 0; t < receivers.size(); ++t) {
      INFO("room " << room << ", decode TP rank " << t);
      REQUIRE(until([&] { return is_terminal(receivers[t].poll()); }));
      auto f = receivers[t].failure();
      INFO((f ? f->failure_reason : std::string{}));
      REQUIRE(receivers[t].poll() == kv_poll::success);
      std::string why;
      CHECK(d.caches[t]->check_room(room, dst_pages, dst_aux, d.layouts[t], &why));
      INFO(why);
    }
    for (size_t t = 0; t < senders.size(); ++t) {
      INFO("room " << room << ", prefill TP rank " << t);
      REQUIRE(until([&] { return is_terminal(senders[t].poll()); }));
      CHECK(senders[t].poll() == kv_poll::success);
    }
    for (auto& x : senders)
      (void) x.clear();
    for (auto& x : receivers)
      (void) x.clear();
  }
  // Nothing outside the rooms' pages and slots.
  std::vector<int64_t> used;
  for (int i = 0; i < rooms; ++i) {
    used.push_back(15 - 2 * i);
    used.push_back(14 - 2 * i);
  }
  for (auto& c : d.caches)
    CHECK(c->count_changed_outside(used, 1, 0xEE) == 0);
}

} // namespace

TEST_CASE("mapped rooms: decode TP above prefill TP takes head slices (2P -> 4D)") {
  deployment_shape s;
  s.prefill_tp = 2;
  s.decode_tp = 4;
  SECTION("HND") {
    run_rooms(s, 3);
  }
  SECTION("NHD") {
    // Each token's heads are a row of a strided write (one a buffer's
    // pages), not a write of their own.
    s.prefill_order = s.decode_order = page_order::nhd;
    s.strided_posted = std::make_shared<std::atomic<uint64_t>>(0);
    run_rooms(s, 3);
    CHECK(*s.strided_posted > 0);
  }
}

TEST_CASE("mapped rooms: decode TP below prefill TP gathers head slices (4P -> 2D)") {
  deployment_shape s;
  s.prefill_tp = 4;
  s.decode_tp = 2;
  SECTION("HND") {
    run_rooms(s, 3);
  }
  SECTION("NHD") {
    s.prefill_order = s.decode_order = page_order::nhd;
    run_rooms(s, 2);
  }
  SECTION("HND pages into NHD pages") {
    s.decode_order = page_order::nhd;
    run_rooms(s, 2);
  }
}

TEST_CASE("mapped rooms: decode TP beyond the KV heads replicates them (2P -> 4D, 2 heads)") {
  deployment_shape s;
  s.prefill_tp = 2;
  s.decode_tp = 4;
  s.kv_heads = 2;
  run_rooms(s, 2);
  s.prefill_tp = 1;
  s.decode_tp = 2;
  s.kv_heads = 1;
  run_rooms(s, 2);
}

TEST_CASE("mapped rooms: a decode rank that declares no layout holds the prefill's model at its "
          "TP size (SGLang's decode)") {
  deployment_shape s;
  s.decode_declares = false;
  s.prefill_order = s.decode_order = page_order::nhd; // SGLang's pools
  SECTION("2P -> 1D") {
    s.prefill_tp = 2;
    s.decode_tp = 1;
    run_rooms(s, 3);
  }
  SECTION("1P -> 2D") {
    s.prefill_tp = 1;
    s.decode_tp = 2;
    run_rooms(s, 3);
  }
  SECTION("4P -> 2D") {
    s.prefill_tp = 4;
    s.decode_tp = 2;
    run_rooms(s, 3);
  }
  SECTION("4P -> 2D over 2 KV heads: replicated prefill heads, two dummies") {
    s.prefill_tp = 4;
    s.decode_tp = 2;
    s.kv_heads = 2;
    run_rooms(s, 3);
  }
  SECTION("TP 2 x PP 2 -> 2D") {
    s.prefill_tp = 2;
    s.decode_tp = 2;
    s.prefill_pp = 2;
    run_rooms(s, 2);
  }
  SECTION("equal TP (whole pages from the rank of its slot)") {
    s.prefill_tp = 2;
    s.decode_tp = 2;
    run_rooms(s, 2);
  }
}

TEST_CASE("mapped rooms: MLA sends from one prefill rank per decode rank, the rest are dummies") {
  deployment_shape s;
  s.mla = true;
  SECTION("4P -> 2D: two dummies") {
    s.prefill_tp = 4;
    s.decode_tp = 2;
    run_rooms(s, 3);
  }
  SECTION("2P -> 4D") {
    s.prefill_tp = 2;
    s.decode_tp = 4;
    run_rooms(s, 3);
  }
}

namespace {

/// Opens room `room` on every rank of the two sides (prefill ranks have
/// their pages and sent them unless `prefill_sends` is false), aborts it on
/// `who` and checks that every rank, dummies included, concludes Failed with
/// that rank as the one origin.
void abort_on(const deployment_shape& s, bool on_prefill, size_t who, bool prefill_sends) {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  auto p = make_side(rt, s, true);
  auto d = make_side(rt, s, false);
  room_id room = 7;
  std::vector<int64_t> pages{3, 4};
  std::vector<room_handle*> all;
  std::vector<kv_sender> senders;
  std::vector<kv_receiver> receivers;
  for (auto& r : d.ranks) {
    auto x = r->make_receiver(room);
    REQUIRE(x);
    receivers.push_back(std::move(*x));
  }
  for (auto& r : p.ranks) {
    auto x = r->make_sender(room);
    REQUIRE(x);
    senders.push_back(std::move(*x));
  }
  if (prefill_sends) {
    for (auto& x : senders) {
      REQUIRE_FALSE(x.init(pages.size(), 0));
      REQUIRE_FALSE(x.send(pages, true));
    }
  }
  auto origin = on_prefill ? p.ranks[who]->ref().id : d.ranks[who]->ref().id;
  if (on_prefill)
    REQUIRE_FALSE(senders[who].abort("test abort"));
  else
    REQUIRE_FALSE(receivers[who].abort("test abort"));
  auto check = [&](room_handle& h, const char* what, size_t i) {
    INFO(what << " TP rank " << i);
    REQUIRE(until([&] { return is_terminal(h.poll()); }));
    REQUIRE(h.poll() == kv_poll::failed);
    auto f = h.failure();
    REQUIRE(f);
    CHECK(f->origin_rank == origin);
  };
  for (size_t i = 0; i < senders.size(); ++i)
    check(senders[i], "prefill", i);
  for (size_t i = 0; i < receivers.size(); ++i)
    check(receivers[i], "decode", i);
}

} // namespace

TEST_CASE("mapped rooms: a failure anywhere reaches every rank, dummies included, with one origin") {
  deployment_shape s;
  s.mla = true;
  s.prefill_tp = 4;
  s.decode_tp = 2;
  SECTION("a decode rank aborts before its pages are given") {
    abort_on(s, false, 1, true);
  }
  SECTION("a dummy prefill rank aborts") {
    abort_on(s, true, 3, false);
  }
  SECTION("a sending prefill rank aborts, head-sliced 4P -> 2D") {
    s.mla = false;
    abort_on(s, true, 2, false);
  }
}

TEST_CASE("mapped rooms: a dummy's scheduler may call init and send after the room succeeded") {
  deployment_shape s;
  s.mla = true;
  s.prefill_tp = 4;
  s.decode_tp = 2;
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  auto p = make_side(rt, s, true);
  auto d = make_side(rt, s, false);
  room_id room = 9;
  std::vector<int64_t> pages{0, 1};
  std::vector<kv_receiver> receivers;
  std::vector<kv_sender> senders;
  for (auto& r : d.ranks) {
    auto x = r->make_receiver(room);
    REQUIRE(x);
    REQUIRE_FALSE(x->init(pages, 0));
    receivers.push_back(std::move(*x));
  }
  for (size_t t = 0; t < p.ranks.size(); ++t) {
    p.caches[t]->write_room(room, pages, 0, p.layouts[t]);
    auto x = p.ranks[t]->make_sender(room);
    REQUIRE(x);
    senders.push_back(std::move(*x));
  }
  // Only the senders (TP 0 and 1) start; the dummies' schedulers lag.
  for (size_t t = 0; t < 2; ++t) {
    REQUIRE_FALSE(senders[t].init(pages.size(), 0));
    REQUIRE_FALSE(senders[t].send(pages, true));
  }
  for (auto& r : receivers)
    REQUIRE(until([&] { return r.poll() == kv_poll::success; }));
  for (size_t t = 2; t < 4; ++t) {
    REQUIRE(until([&] { return senders[t].poll() == kv_poll::success; }));
    CHECK_FALSE(senders[t].init(pages.size(), 0));
    CHECK_FALSE(senders[t].send(pages, true));
    CHECK(senders[t].poll() == kv_poll::success);
    // The room concluded: more calls do nothing either.
    CHECK_FALSE(senders[t].init(pages.size(), 0));
    CHECK_FALSE(senders[t].send(pages, true));
    CHECK(senders[t].poll() == kv_poll::success);
  }
  for (size_t t = 0; t < 2; ++t)
    CHECK(d.caches[t]->check_room(room, pages, 0, d.layouts[t]));
}

TEST_CASE("mapped rooms: each pipeline stage of prefill sends its own layers (PP 2 -> 1)") {
  deployment_shape s;
  s.prefill_pp = 2;
  SECTION("TP 1 x PP 2 -> TP 1") {
    run_rooms(s, 3);
  }
  SECTION("TP 2 x PP 2 -> TP 4, NHD") {
    s.prefill_tp = 2;
    s.decode_tp = 4;
    s.prefill_order = s.decode_order = page_order::nhd;
    run_rooms(s, 2);
  }
  SECTION("MLA TP 4 x PP 2 -> TP 2") {
    s.mla = true;
    s.prefill_tp = 4;
    s.decode_tp = 2;
    run_rooms(s, 2);
  }
  SECTION("PP 4") {
    s.prefill_pp = 4;
    s.prefill_tp = 2;
    s.decode_tp = 2;
    run_rooms(s, 2);
  }
  SECTION("a stage's rank aborts: every rank fails with it as the one origin") {
    s.prefill_tp = 2;
    s.decode_tp = 2;
    abort_on(s, true, 3, false);
  }
}

TEST_CASE("mapped rooms with the integrity check: every part hashed in the room's logical order") {
  // Head slices from several sources, unequal page orders, MLA dummies and
  // PP stages: each decode rank checks what each source wrote against the
  // source's digest, whatever the addresses on either side.
  deployment_shape s;
  s.integrity = integrity_mode::xxh3;
  s.prefill_tp = 4;
  s.decode_tp = 2;
  s.decode_order = page_order::nhd;
  run_rooms(s, 2);
  // NHD on both sides, hashed: the plain writes, which the hash walks.
  s.prefill_order = page_order::nhd;
  s.strided_posted = std::make_shared<std::atomic<uint64_t>>(0);
  run_rooms(s, 2);
  CHECK(*s.strided_posted == 0);
  s.strided_posted.reset();
  s.prefill_order = page_order::hnd;
  s.prefill_tp = 2;
  s.decode_tp = 4;
  s.decode_order = page_order::hnd;
  run_rooms(s, 2);
  s.mla = true;
  s.prefill_tp = 4;
  s.decode_tp = 2;
  run_rooms(s, 2);
  s = deployment_shape{};
  s.integrity = integrity_mode::xxh3;
  s.prefill_tp = 2;
  s.prefill_pp = 2;
  s.decode_tp = 2;
  run_rooms(s, 2);
}
