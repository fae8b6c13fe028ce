#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvroom/kit/harness.hpp"

using namespace kvroom;

TEST_CASE("a serve report survives any failure reason: newlines, quotes, backslashes, control characters") {
  std::string nasty = "line one\nline \"two\"\t\\ end \x01\x1f and UTF-8: \xc3\xa9";
  harness::report_line failed;
  failed.state = kv_poll::failed;
  failed.error = kv_transfer_error{7, nasty, true, 42};
  failed.opened_ms = 100;
  failed.at_ms = 250;
  failed.latency_us = 150000;
  harness::report_line ok;
  ok.state = kv_poll::success;
  ok.data_error = "page 3 byte 9: \"0x5a\"\n";
  auto text = harness::report_json("decode[dp0,tp1]#\"x\"", 65537, {{7, failed}, {8, ok}});
  // One room per line, as the scripts read it.
  CHECK(text.find("\n  {\"room\": 7, \"state\": \"failed\"") != std::string::npos);
  auto path = std::string{"/tmp/kvroom-report-test-"} + std::to_string(::getpid()) + ".json";
  {
    std::ofstream out{path};
    out << text;
  }
  auto back = harness::read_report(path);
  std::remove(path.c_str());
  REQUIRE(back.size() == 2);
  REQUIRE(back[7].error);
  CHECK(back[7].state == kv_poll::failed);
  CHECK(back[7].error->failure_reason == nasty);
  CHECK(back[7].error->is_from_another_rank);
  CHECK(back[7].error->origin_rank == 42);
  CHECK(back[7].at_ms == 250);
  CHECK(back[7].latency_us == 150000);
  CHECK(back[8].state == kv_poll::success);
  CHECK(back[8].data_error == ok.data_error);
  // Not JSON: nothing, not garbage.
  CHECK(harness::read_report("/nonexistent/report.json").empty());
}

TEST_CASE("harness: free_port passes over a port a listener holds, below the ephemeral range") {
  // A listener on a port the seed points at (free_port starts at 20000 +
  // seed % 12000).
  int held = -1, fd = -1;
  for (int p = 31000; p < 32000 && held < 0; ++p) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(p));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd, 1) == 0)
      held = p;
    else
      ::close(fd);
  }
  REQUIRE(held > 0);
  auto port = harness::free_port(static_cast<uint64_t>(held - 20000));
  CHECK(port != held);
  CHECK(port >= 20000);
  CHECK(port < 32768);
  ::close(fd);
  CHECK(harness::free_port(static_cast<uint64_t>(held - 20000)) == held);
}
