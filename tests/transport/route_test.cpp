// Which transport moves which memory: the automatic choice by memory kind
// and where a cuda write lands, without a GPU.
#include <catch2/catch.hpp>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/cuda/device_route.hpp"
#include "kvroom/transport/select.hpp"

using namespace kvroom;

namespace {

endpoint_desc ep(const std::string& transport, uint64_t domain, rank_id owner = 2) {
  endpoint_desc out;
  out.transport = transport;
  out.address = transport + "-addr";
  out.domain = domain;
  out.owner = owner;
  return out;
}

const memory_kinds host{};
const memory_kinds gpu{mem_kind::device, mem_kind::device};
const memory_kinds host_to_gpu{mem_kind::host, mem_kind::device};

} // namespace

TEST_CASE("host memory: local, then shm, then verbs, then tcp") {
  std::vector<endpoint_desc> mine{ep("local", 1), ep("shm", 7), ep("verbs", 0), ep("tcp", 0)};
  CHECK(choose_endpoint({ep("local", 1), ep("shm", 7), ep("verbs", 0), ep("tcp", 0)}, mine,
                        "auto", host)
          ->transport
        == "local");
  // Another process on this host.
  CHECK(choose_endpoint({ep("local", 2), ep("shm", 7), ep("verbs", 0), ep("tcp", 0)}, mine,
                        "auto", host)
          ->transport
        == "shm");
  // Another host: verbs when both ends have a device, else tcp.
  CHECK(choose_endpoint({ep("local", 2), ep("shm", 8), ep("verbs", 0), ep("tcp", 0)}, mine,
                        "auto", host)
          ->transport
        == "verbs");
  CHECK(choose_endpoint({ep("local", 2), ep("shm", 8), ep("tcp", 0)}, mine, "auto", host)
          ->transport
        == "tcp");
}

TEST_CASE("GPU memory: cuda on one host, verbs between hosts, never a host-only transport") {
  std::vector<endpoint_desc> mine{ep("local", 1), ep("cuda", 7), ep("verbs", 0), ep("tcp", 0)};
  CHECK(choose_endpoint({ep("local", 1), ep("cuda", 7), ep("verbs", 0), ep("tcp", 0)}, mine,
                        "auto", gpu)
          ->transport
        == "cuda");
  CHECK(choose_endpoint({ep("cuda", 8), ep("verbs", 0), ep("tcp", 0)}, mine, "auto", gpu)
          ->transport
        == "verbs");
  CHECK(choose_endpoint({ep("cuda", 7)}, mine, "auto", host_to_gpu)->transport == "cuda");
  auto none = choose_endpoint({ep("local", 1), ep("tcp", 0)}, mine, "auto", gpu);
  REQUIRE_FALSE(none);
  CHECK(describe(none.error()).find("device -> device memory") != std::string::npos);
  // Forcing a host-only transport onto GPU memory is refused with the reason.
  auto forced = choose_endpoint({ep("tcp", 0)}, mine, "tcp", gpu);
  REQUIRE_FALSE(forced);
  CHECK(describe(forced.error()).find("tcp cannot move") != std::string::npos);
  CHECK(moves("verbs", gpu));
  CHECK_FALSE(moves("shm", host_to_gpu));
  CHECK(moves("shm", host));
}

TEST_CASE("cuda writes: same process direct, other process through the IPC mapping") {
  auto peer = ep("cuda", 7);
  peer.device = {device_region{0x10000, 4096, 0, std::string(64, 'h'), 256},
                 device_region{0x90000, 512, -1, {}, 0}};
  auto direct = detail::route_device_write(peer, true, 0x10100, 64);
  REQUIRE(direct);
  CHECK_FALSE(direct->through_ipc);
  auto ipc = detail::route_device_write(peer, false, 0x10100, 64);
  REQUIRE(ipc);
  CHECK(ipc->through_ipc);
  CHECK(ipc->ipc_offset == 256 + 0x100);
  // Host memory of another process: only shm reaches it.
  auto host_mem = detail::route_device_write(peer, false, 0x90000, 64);
  REQUIRE_FALSE(host_mem);
  CHECK(describe(host_mem.error()).find("another process") != std::string::npos);
  CHECK(detail::route_device_write(peer, true, 0x90000, 64));
  // Out of range, and a range running past the region's end.
  auto out = detail::route_device_write(peer, true, 0x20000, 64);
  REQUIRE_FALSE(out);
  CHECK(describe(out.error()).find("outside rank 2's registered memory") != std::string::npos);
  CHECK_FALSE(detail::route_device_write(peer, true, 0x10000 + 4000, 200));
  CHECK_FALSE(detail::route_device_write(peer, true, 0x10000, UINT64_MAX));
  // GPU memory advertised without a handle: same process only.
  peer.device[0].ipc_handle.clear();
  CHECK_FALSE(detail::route_device_write(peer, false, 0x10100, 64));
  CHECK(detail::route_device_write(peer, true, 0x10100, 64));
}
