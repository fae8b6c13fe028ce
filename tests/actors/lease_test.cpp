// The etcd lease's rules without etcd: its windows, when it counts as lost
// (only on etcd's word), and how a member's answer is read.
#include <catch2/catch.hpp>

#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/actors/control/directory/lease_timing.hpp"

using namespace kvroom;

TEST_CASE("lease windows: renew every third of the TTL, a member answers within a sixth") {
  lease_timing t3{3000, 3000};
  CHECK(t3.ttl_s() == 3);
  CHECK(t3.renew_every_ms() == 1000);
  CHECK(t3.call_timeout_ms() == 500);
  // A round over three members that do not answer fits in half the TTL.
  CHECK(3 * t3.call_timeout_ms() <= t3.ttl_s() * 1000 / 2);
  lease_timing t5{5000, 3000};
  CHECK(t5.call_timeout_ms() == 833);
  // etcd's floor of 2 s; whole seconds, rounded up.
  CHECK(lease_timing{500, 3000}.ttl_s() == 2);
  CHECK(lease_timing{2001, 3000}.ttl_s() == 3);
  // A long TTL keeps the ordinary call timeout; a short request timeout wins.
  CHECK(lease_timing{60000, 3000}.call_timeout_ms() == 3000);
  CHECK(lease_timing{60000, 1000}.call_timeout_ms() == 1000);
  CHECK(lease_timing{2000, 100}.call_timeout_ms() == 200);
}

TEST_CASE("a lease is lost only when etcd answers that it is gone, never because calls fail") {
  lease_timing t{3000, 3000};
  lease_renewal r{t, 1000};
  CHECK(r.due_ms() == 2000);
  CHECK(r.answered(3, 2000) == lease_renewal::outcome::renewed);
  CHECK(r.due_ms() == 3000);
  CHECK(r.confirmed_ms() == 2000);
  // Every member fails for far longer than the TTL: still not lost, tried
  // again after a short pause each time, warned of once per TTL.
  int warnings = 0;
  for (uint64_t now = 3000; now < 13000; now += 100) {
    warnings += r.failed(now) ? 1 : 0;
    CHECK(r.due_ms() == now + t.retry_ms());
  }
  CHECK(r.failures() == 100);
  CHECK(warnings == 4); // at 3 s, 6 s, 9 s, 12 s
  CHECK(r.confirmed_ms() == 2000);
  // etcd answers again, with time left: renewed, the count starts over.
  CHECK(r.answered(2, 13100) == lease_renewal::outcome::renewed);
  CHECK(r.failures() == 0);
  // etcd says it has no such lease (TTL 0): lost, and tried again soon
  // until a new lease replaces it.
  CHECK(r.answered(0, 14100) == lease_renewal::outcome::lost);
  CHECK(r.due_ms() == 14100 + t.retry_ms());
  CHECK(r.confirmed_ms() == 13100);
  r.replaced(14300);
  CHECK(r.due_ms() == 15300);
  CHECK(r.confirmed_ms() == 14300);
}

TEST_CASE("a member's answer: success, try the next member, authenticate, or refused") {
  auto ok = R"({"result":{"header":{"revision":"3"},"ID":"7","TTL":"3"}})";
  CHECK(classify_etcd_answer(200, ok) == etcd_answer::ok);
  // A stream's failure comes with HTTP 200 and an error object.
  auto no_leader = R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})";
  CHECK(classify_etcd_answer(200, no_leader) == etcd_answer::elsewhere);
  CHECK(etcd_error_text(no_leader) == "etcdserver: no leader");
  CHECK(classify_etcd_answer(503, R"({"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14})")
        == etcd_answer::elsewhere);
  CHECK(classify_etcd_answer(500, R"({"error":"etcdserver: leader changed","message":"etcdserver: leader changed","code":2})")
        == etcd_answer::elsewhere);
  // Something that is not the gateway's JSON (a proxy's page, a cut body).
  CHECK(classify_etcd_answer(200, "<html>") == etcd_answer::elsewhere);
  CHECK(classify_etcd_answer(502, "bad gateway") == etcd_answer::elsewhere);
  CHECK(classify_etcd_answer(401, R"({"error":"etcdserver: invalid auth token","code":16})")
        == etcd_answer::auth);
  CHECK(classify_etcd_answer(400, R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})")
        == etcd_answer::refused);
}
