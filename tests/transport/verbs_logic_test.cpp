// The verbs backend's pure logic, without a device: work-request planning,
// the send window, the connection state machine and its wire format.
#include <catch2/catch.hpp>

#include <deque>
#include <map>

#include "kvroom/transport/verbs/link_fsm.hpp"
#include "kvroom/transport/verbs/wr_plan.hpp"

using namespace kvroom;
using namespace kvroom::verbs;

namespace {

uint64_t total(const std::vector<wr_plan>& wrs) {
  uint64_t n = 0;
  for (auto& wr : wrs) {
    uint64_t sum = 0;
    for (auto& s : wr.sges)
      sum += s.length;
    CHECK(sum == wr.bytes);
    n += wr.bytes;
  }
  return n;
}

} // namespace

TEST_CASE("writes contiguous on both sides become one entry of one work request") {
  device_limits lim{4, 1u << 20, 64};
  auto wrs = plan_work_requests({{0x1000, 0x9000, 100}, {0x1064, 0x9064, 28}}, lim);
  REQUIRE(wrs);
  REQUIRE(wrs->size() == 1);
  CHECK((*wrs)[0].remote_addr == 0x9000);
  REQUIRE((*wrs)[0].sges.size() == 1);
  CHECK((*wrs)[0].sges[0].length == 128);
}

TEST_CASE("a pull's reads plan as READs: one contiguous remote source scattered into local entries") {
  // Four reads of one contiguous remote range into scattered local pages;
  // max_sge (the device's max_sge_rd) 2: two READs of two entries each.
  device_limits lim{2, 1u << 20, 64};
  std::vector<read_op> reads{{0x9000, 0x1000, 64}, {0x9040, 0x3000, 64},
                             {0x9080, 0x5000, 64}, {0x90c0, 0x7000, 64}};
  auto shape = as_write_shape(reads);
  REQUIRE(shape.size() == 4);
  CHECK(shape[1].src_addr == 0x3000);  // local destination
  CHECK(shape[1].dst_addr == 0x9040);  // remote source
  auto wrs = plan_read_requests(reads, lim);
  REQUIRE(wrs);
  REQUIRE(wrs->size() == 2);
  CHECK((*wrs)[0].remote_addr == 0x9000);
  CHECK((*wrs)[1].remote_addr == 0x9080);
  REQUIRE((*wrs)[1].sges.size() == 2);
  CHECK((*wrs)[1].sges[0].addr == 0x5000);
  CHECK((*wrs)[1].sges[1].addr == 0x7000);
  CHECK(total(*wrs) == 256);
  // A read never spans two remote registrations (each has its own rkey).
  auto split = plan_read_requests(reads, device_limits{4, 1u << 20, 64}, nullptr,
                                  [](uint64_t addr) { return addr < 0x9080 ? 0 : 1; });
  REQUIRE(split);
  CHECK(split->size() == 2);
  CHECK_FALSE(plan_read_requests(reads, device_limits{0, 1u << 20, 64}));
}

TEST_CASE("scattered sources into a contiguous destination gather up to max_sge entries") {
  device_limits lim{3, 1u << 20, 64};
  std::vector<write_op> ops;
  // Seven 64-byte pages from every other source page into consecutive
  // destination pages: 3 + 3 + 1 entries.
  for (uint64_t i = 0; i < 7; ++i)
    ops.push_back({0x10000 + 128 * i, 0x80000 + 64 * i, 64});
  auto wrs = plan_work_requests(ops, lim);
  REQUIRE(wrs);
  REQUIRE(wrs->size() == 3);
  CHECK((*wrs)[0].sges.size() == 3);
  CHECK((*wrs)[1].sges.size() == 3);
  CHECK((*wrs)[2].sges.size() == 1);
  CHECK((*wrs)[1].remote_addr == 0x80000 + 3 * 64);
  CHECK(total(*wrs) == 7 * 64);
}

TEST_CASE("a write larger than the port's max message is cut, and no request exceeds it") {
  device_limits lim{8, 4096, 64};
  auto wrs = plan_work_requests({{0x1000, 0x100000, 10000}, {0x9000, 0x102710, 100}}, lim);
  REQUIRE(wrs);
  for (auto& wr : *wrs)
    CHECK(wr.bytes <= 4096);
  CHECK(total(*wrs) == 10100);
  // 4096 + 4096 + (1808 + 100 gathered: the second op's destination follows).
  REQUIRE(wrs->size() == 3);
  CHECK((*wrs)[2].sges.size() == 2);
}

TEST_CASE("destinations that are not contiguous start a new work request") {
  device_limits lim{16, 1u << 20, 64};
  auto wrs = plan_work_requests({{0x1000, 0x9000, 64}, {0x1040, 0x9080, 64}}, lim);
  REQUIRE(wrs);
  CHECK(wrs->size() == 2);
}

TEST_CASE("entries and requests never span two registrations, even adjacent ones") {
  device_limits lim{16, 1u << 20, 64};
  // Local regions split at 0x2000, remote regions at 0xa000.
  region_of src = [](uint64_t a) -> int64_t { return a < 0x2000 ? 0 : 1; };
  region_of dst = [](uint64_t a) -> int64_t { return a < 0xa000 ? 0 : 1; };
  auto wrs = plan_work_requests({{0x1f00, 0x8000, 0x100}, {0x2000, 0x8100, 0x100}}, lim, src, dst);
  REQUIRE(wrs);
  REQUIRE(wrs->size() == 1);
  CHECK((*wrs)[0].sges.size() == 2);  // same request, two lkeys
  wrs = plan_work_requests({{0x1000, 0x9f00, 0x100}, {0x1100, 0xa000, 0x100}}, lim, src, dst);
  REQUIRE(wrs);
  CHECK(wrs->size() == 2);  // two rkeys
}

TEST_CASE("zero limits are refused and empty writes skipped") {
  CHECK_FALSE(plan_work_requests({{1, 2, 3}}, device_limits{0, 1, 1}));
  CHECK_FALSE(plan_work_requests({{1, 2, 3}}, device_limits{1, 0, 1}));
  auto wrs = plan_work_requests({{0x1000, 0x2000, 0}}, device_limits{1, 64, 1});
  REQUIRE(wrs);
  CHECK(wrs->empty());
}

TEST_CASE("the send window never overfills and signals what frees it") {
  send_window w{8, 4};
  uint64_t seq = 0;
  std::vector<bool> sig;
  while (w.room() > 0)
    sig.push_back(w.take(false, seq));
  CHECK(seq == 8);
  CHECK(w.outstanding() == 8);
  // Every 4th, and the one that filled the queue.
  CHECK(sig == std::vector<bool>{false, false, false, true, false, false, false, true});
  w.completed(4);
  CHECK(w.room() == 4);
  CHECK(w.take(true, seq));  // last of a batch: always signalled
  w.completed(3);            // older than known: changes nothing
  CHECK(w.room() == 3);
  w.completed(100);          // never posted: ignored
  CHECK(w.room() == 3);
  w.reset();
  CHECK(w.room() == 8);
}

TEST_CASE("a small window with sparse signalling still signals the slot that fills it") {
  send_window w{3, 1000};
  uint64_t seq = 0;
  CHECK_FALSE(w.take(false, seq));
  CHECK_FALSE(w.take(false, seq));
  CHECK(w.take(false, seq));
}

TEST_CASE("hello round-trips and malformed payloads are refused with a reason") {
  hello h;
  h.what = hello::kind::reply;
  h.epoch = 42;
  h.qp = {0x1234, 0xabcde, 7, {}, 5};
  h.qp.gid[15] = 9;
  h.regions = {{0x1000, 4096, 77}, {0x9000, 64, 78}};
  auto bytes = encode(h);
  auto back = decode(bytes);
  REQUIRE(back);
  CHECK(back->what == hello::kind::reply);
  CHECK(back->epoch == 42);
  CHECK(back->qp.qpn == 0x1234);
  CHECK(back->qp.psn == 0xabcde);
  CHECK(back->qp.gid[15] == 9);
  REQUIRE(back->regions.size() == 2);
  CHECK(back->regions[1].rkey == 78);

  CHECK_FALSE(decode(bytes.substr(0, 10)));
  CHECK_FALSE(decode(bytes + "x"));
  auto bad = bytes;
  bad[0] = 'X';
  CHECK_FALSE(decode(bad));
  bad = bytes;
  bad[4] = 9;  // version
  auto err = decode(bad);
  REQUIRE_FALSE(err);
  bad = bytes;
  bad[5] = 3;  // kind
  CHECK_FALSE(decode(bad));
  hello zero = h;
  zero.qp.qpn = 0;
  CHECK_FALSE(decode(encode(zero)));
  hello wrap = h;
  wrap.regions = {{UINT64_MAX - 10, 100, 1}};
  CHECK_FALSE(decode(encode(wrap)));
  hello mtu = h;
  mtu.qp.mtu = 9;
  CHECK_FALSE(decode(encode(mtu)));
}

namespace {

/// Two link state machines joined by a message queue, with queue pairs
/// played by numbers: what the verbs backend does, without a device.
struct fake_end {
  rank_id rank;
  link_fsm fsm;
  uint32_t qpn = 0;          ///< 0: no queue pair
  uint32_t connected_to = 0; ///< remote qpn the pair is connected to
  int created = 0;
  int destroyed = 0;
};

struct fake_fabric {
  fake_end a{1, link_fsm{1, 2, 1000}};
  fake_end b{2, link_fsm{2, 1, 1000}};
  uint32_t next_qpn = 100;
  struct wire {
    rank_id to;
    hello msg;
  };
  std::deque<wire> in_flight;

  fake_end& other(const fake_end& x) {
    return x.rank == 1 ? b : a;
  }

  void apply(fake_end& e, const link_fsm::result& r) {
    for (auto& s : r.steps) {
      switch (s.what) {
        case link_step::kind::create_qp:
          e.qpn = next_qpn++;
          e.connected_to = 0;
          ++e.created;
          break;
        case link_step::kind::destroy_qp:
          e.qpn = 0;
          e.connected_to = 0;
          ++e.destroyed;
          break;
        case link_step::kind::connect_qp:
          REQUIRE(e.qpn != 0);
          e.connected_to = s.remote.qpn;
          break;
        case link_step::kind::send_request:
        case link_step::kind::send_reply: {
          hello h;
          h.what = s.what == link_step::kind::send_request ? hello::kind::request
                                                           : hello::kind::reply;
          h.epoch = s.epoch;
          h.qp = {e.qpn, 1, 1, {}, 5};
          in_flight.push_back({other(e).rank, h});
          break;
        }
      }
    }
  }

  void deliver_all(uint64_t now = 0) {
    while (!in_flight.empty()) {
      auto w = in_flight.front();
      in_flight.pop_front();
      auto& e = w.to == 1 ? a : b;
      apply(e, e.fsm.on_hello(w.msg, now));
    }
  }

  bool joined() const {
    return a.fsm.state() == link_state::ready && b.fsm.state() == link_state::ready
           && a.connected_to == b.qpn && b.connected_to == a.qpn && a.qpn != 0 && b.qpn != 0;
  }
};

} // namespace

TEST_CASE("one end needs the link: request, reply, both connected to each other") {
  fake_fabric f;
  auto r = f.a.fsm.need(0);
  CHECK(r.verdict == link_verdict::wait);
  f.apply(f.a, r);
  CHECK(f.a.fsm.state() == link_state::connecting);
  f.deliver_all();
  CHECK(f.joined());
  CHECK(f.a.fsm.need(1).verdict == link_verdict::go);
  CHECK(f.b.fsm.need(1).verdict == link_verdict::go);  // usable both ways
  CHECK(f.a.created == 1);
  CHECK(f.b.created == 1);
}

TEST_CASE("both ends ask at once: the lower rank's request wins, one pair each") {
  fake_fabric f;
  f.apply(f.a, f.a.fsm.need(0));
  f.apply(f.b, f.b.fsm.need(0));
  f.deliver_all();
  CHECK(f.joined());
  CHECK(f.a.created == 1);
  CHECK(f.b.created == 1);
  CHECK(f.a.destroyed + f.b.destroyed == 0);
}

TEST_CASE("glare in the other delivery order converges too") {
  fake_fabric f;
  f.apply(f.a, f.a.fsm.need(0));
  f.apply(f.b, f.b.fsm.need(0));
  // b's request reaches a first, then a's request reaches b.
  std::swap(f.in_flight[0], f.in_flight[1]);
  f.deliver_all();
  CHECK(f.joined());
}

TEST_CASE("no answer within the timeout fails the need and tears the pair down") {
  fake_fabric f;
  f.apply(f.a, f.a.fsm.need(0));
  f.in_flight.clear();  // the request is lost
  CHECK(f.a.fsm.need(999).verdict == link_verdict::wait);
  auto r = f.a.fsm.need(1000);
  CHECK(r.verdict == link_verdict::fail);
  CHECK(r.reason.find("rank 2") != std::string::npos);
  f.apply(f.a, r);
  CHECK(f.a.qpn == 0);
  CHECK(f.a.fsm.state() == link_state::idle);
  // A late reply to the dead attempt connects nothing.
  hello late;
  late.what = hello::kind::reply;
  late.epoch = 1;
  late.qp = {555, 1, 1, {}, 5};
  CHECK(f.a.fsm.on_hello(late, 1001).steps.empty());
  // The next need starts over and succeeds.
  f.apply(f.a, f.a.fsm.need(2000));
  f.deliver_all();
  CHECK(f.joined());
}

TEST_CASE("a queue pair error tears down; the next need re-establishes and the peer follows") {
  fake_fabric f;
  f.apply(f.a, f.a.fsm.need(0));
  f.deliver_all();
  REQUIRE(f.joined());
  auto old_b = f.b.qpn;
  auto r = f.a.fsm.on_qp_error("remote access error on QP 0x64");
  CHECK(r.verdict == link_verdict::fail);
  f.apply(f.a, r);
  CHECK(f.a.fsm.last_error().find("remote access error") != std::string::npos);
  CHECK(f.a.fsm.state() == link_state::idle);
  f.apply(f.a, f.a.fsm.need(10));
  f.deliver_all();
  CHECK(f.joined());
  // b saw a new queue pair from a: it replaced its own.
  CHECK(f.b.qpn != old_b);
  CHECK(f.b.destroyed == 1);
}

TEST_CASE("a repeated request to a ready end is answered again, nothing rebuilt") {
  fake_fabric f;
  f.apply(f.a, f.a.fsm.need(0));
  auto request = f.in_flight.front();
  f.deliver_all();
  REQUIRE(f.joined());
  auto r = f.b.fsm.on_hello(request.msg, 5);
  REQUIRE(r.steps.size() == 1);
  CHECK(r.steps[0].what == link_step::kind::send_reply);
}
