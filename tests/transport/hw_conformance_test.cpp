// The conformance suite of the hardware backends, run by hw_main only where
// the device exists: byte-exact transfers, refusal of writes outside
// registered memory, and the cases particular to each backend.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kvroom/messages/error.hpp"
#include "kvroom/transport/device_memory.hpp"
#include "kvroom/transport/factory.hpp"

using namespace kvroom;

namespace {

/// Two ranks' backends in this process, their connection messages carried
/// by hand (the actors do this in kvroom).
struct pair_of_ranks {
  backend_ptr sender;
  backend_ptr receiver;

  explicit pair_of_ranks(const std::string& name) {
    auto s = make_backend(backend_config{name, 1, {}});
    auto r = make_backend(backend_config{name, 2, {}});
    REQUIRE(s);
    REQUIRE(r);
    sender = std::move(*s);
    receiver = std::move(*r);
  }

  void pump() {
    for (auto& m : sender->take_control())
      REQUIRE_FALSE(receiver->on_control(m));
    for (auto& m : receiver->take_control())
      REQUIRE_FALSE(sender->on_control(m));
  }

  /// Posts and drives a batch to its end (10 s at most): ok, or why not.
  std::pair<bool, std::string> run(write_batch batch) {
    batch.peer = receiver->endpoint();
    return drive(*sender, sender->post(batch));
  }

  /// A pull: the receiver reads `batch` from the sender's memory.
  std::pair<bool, std::string> pull(read_batch batch) {
    batch.peer = sender->endpoint();
    return drive(*receiver, receiver->post_read(batch));
  }

  std::pair<bool, std::string> drive(backend& be, post_result res) {
    if (res.status == xfer_status::failed)
      return {false, describe(res.error)};
    if (res.status != xfer_status::in_progress)
      return {res.status == xfer_status::done, to_string(res.status)};
    auto id = res.id;
    std::string reason;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto st = xfer_status::in_progress;
    while (st == xfer_status::in_progress && std::chrono::steady_clock::now() < until) {
      pump();
      st = be.poll(id, reason);
      if (st == xfer_status::in_progress)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    be.release(id);
    return {st == xfer_status::done, st == xfer_status::in_progress ? "timed out" : reason};
  }
};

uint64_t addr(std::vector<uint8_t>& xs) {
  return reinterpret_cast<uint64_t>(xs.data());
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng{seed};
  for (auto& b : out)
    b = static_cast<uint8_t>(rng());
  return out;
}

} // namespace

// -- verbs -------------------------------------------------------------------

TEST_CASE("verbs moves a seeded pattern byte-exact across sizes and batch sizes", "[verbs]") {
  for (size_t block : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    for (size_t count : {size_t{1}, size_t{16}}) {
      INFO("block " << block << " x " << count);
      pair_of_ranks p{"verbs"};
      auto src = pattern(block * count * 2, 7);
      std::vector<uint8_t> dst(src.size(), 0);
      REQUIRE(p.sender->register_memory({addr(src), src.size(), -1}));
      REQUIRE(p.receiver->register_memory({addr(dst), dst.size(), -1}));
      write_batch b;
      for (size_t i = 0; i < count; ++i)
        b.ops.push_back({addr(src) + 2 * i * block, addr(dst) + 2 * (count - 1 - i) * block, block});
      auto res = p.run(b);
      REQUIRE(res.first);
      for (size_t i = 0; i < count; ++i)
        REQUIRE(std::memcmp(src.data() + 2 * i * block,
                            dst.data() + 2 * (count - 1 - i) * block, block) == 0);
    }
  }
}

TEST_CASE("verbs: thousands of scattered pages overrun max_sge and the send window, byte-exact",
          "[verbs]") {
  pair_of_ranks p{"verbs"};
  constexpr size_t page = 256;
  constexpr size_t pages = 8192;
  auto src = pattern(page * pages, 3);
  std::vector<uint8_t> dst(src.size(), 0);
  REQUIRE(p.sender->register_memory({addr(src), src.size(), -1}));
  REQUIRE(p.receiver->register_memory({addr(dst), dst.size(), -1}));
  write_batch b;
  // Odd source pages into the first half, even ones into the second.
  for (size_t i = 0; i < pages / 2; ++i)
    b.ops.push_back({addr(src) + (2 * i + 1) * page, addr(dst) + i * page, page});
  for (size_t i = 0; i < pages / 2; ++i)
    b.ops.push_back({addr(src) + 2 * i * page, addr(dst) + (pages / 2 + i) * page, page});
  REQUIRE(p.run(b).first);
  for (size_t i = 0; i < pages / 2; ++i) {
    REQUIRE(std::memcmp(src.data() + (2 * i + 1) * page, dst.data() + i * page, page) == 0);
    REQUIRE(std::memcmp(src.data() + 2 * i * page, dst.data() + (pages / 2 + i) * page, page) == 0);
  }
}

TEST_CASE("verbs pulls scattered pages with RDMA READ byte-exact and refuses what lies outside",
          "[verbs]") {
  pair_of_ranks p{"verbs"};
  constexpr size_t page = 4096;
  constexpr size_t pages = 512;
  auto src = pattern(page * pages, 9);
  std::vector<uint8_t> dst(src.size(), 0);
  REQUIRE(p.sender->register_memory({addr(src), src.size(), -1}));
  REQUIRE(p.receiver->register_memory({addr(dst), dst.size(), -1}));
  read_batch b;
  // Contiguous source pages scattered in reverse: many entries per READ.
  for (size_t i = 0; i < pages; ++i)
    b.ops.push_back({addr(src) + i * page, addr(dst) + (pages - 1 - i) * page, page});
  REQUIRE(p.pull(b).first);
  for (size_t i = 0; i < pages; ++i)
    REQUIRE(std::memcmp(src.data() + i * page, dst.data() + (pages - 1 - i) * page, page) == 0);
  read_batch bad;
  bad.ops = {{addr(src) + src.size() - 10, addr(dst), 100}};
  auto res = p.pull(bad);
  CHECK_FALSE(res.first);
  CHECK(res.second.find("outside rank 1's registered memory") != std::string::npos);
}

TEST_CASE("verbs refuses writes outside registered memory, moves nothing, keeps working",
          "[verbs]") {
  pair_of_ranks p{"verbs"};
  auto src = pattern(8192, 5);
  std::vector<uint8_t> dst(8192, 0);
  std::vector<uint8_t> stray(64, 1);
  REQUIRE(p.sender->register_memory({addr(src), src.size(), -1}));
  auto dst_region = p.receiver->register_memory({addr(dst), dst.size(), -1});
  REQUIRE(dst_region);
  write_batch b;
  b.ops = {{addr(src), addr(dst), 100}, {addr(src), addr(dst) + 8092, 101}};
  auto res = p.run(b);
  CHECK_FALSE(res.first);
  CHECK(res.second.find("outside rank 2's registered memory") != std::string::npos);
  CHECK(std::all_of(dst.begin(), dst.end(), [](uint8_t x) { return x == 0; }));
  b.ops = {{addr(stray), addr(dst), 64}};
  res = p.run(b);
  CHECK_FALSE(res.first);
  CHECK(res.second.find("outside the sender's registered memory") != std::string::npos);
  b.ops = {{addr(src), addr(dst), 64}};
  CHECK(p.run(b).first);
  CHECK(std::memcmp(src.data(), dst.data(), 64) == 0);
  // Deregistered on the receiver: the sender learns it and refuses.
  REQUIRE_FALSE(p.receiver->deregister_memory(*dst_region));
  p.pump();
  b.ops = {{addr(src) + 64, addr(dst) + 64, 64}};
  CHECK_FALSE(p.run(b).first);
  CHECK(dst[64] == 0);
}

// -- cuda --------------------------------------------------------------------

namespace {

/// A buffer on GPU 0, freed with the scope.
struct gpu_buffer {
  uint64_t ptr = 0;
  size_t size = 0;
  explicit gpu_buffer(size_t n) : size(n) {
    auto p = device_alloc(0, n);
    REQUIRE(p);
    ptr = *p;
    REQUIRE_FALSE(device_fill(0, ptr, 0, n));
  }
  ~gpu_buffer() {
    device_free(0, ptr);
  }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size);
    REQUIRE_FALSE(device_download(0, out.data(), ptr, size));
    return out;
  }
};

} // namespace

TEST_CASE("cuda moves GPU to GPU memory byte-exact across sizes and batch sizes", "[cuda]") {
  for (size_t block : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    for (size_t count : {size_t{1}, size_t{16}}) {
      INFO("block " << block << " x " << count);
      pair_of_ranks p{"cuda"};
      auto host = pattern(block * count * 2, 11);
      gpu_buffer src{host.size()}, dst{host.size()};
      REQUIRE_FALSE(device_upload(0, src.ptr, host.data(), host.size()));
      REQUIRE(p.sender->register_memory({src.ptr, src.size, 0}));
      REQUIRE(p.receiver->register_memory({dst.ptr, dst.size, 0}));
      write_batch b;
      b.src_device_id = 0;
      b.dst_device_id = 0;
      for (size_t i = 0; i < count; ++i)
        b.ops.push_back({src.ptr + 2 * i * block, dst.ptr + 2 * (count - 1 - i) * block, block});
      REQUIRE(p.run(b).first);
      auto got = dst.read();
      for (size_t i = 0; i < count; ++i)
        REQUIRE(std::memcmp(host.data() + 2 * i * block,
                            got.data() + 2 * (count - 1 - i) * block, block) == 0);
    }
  }
}

TEST_CASE("cuda moves host memory into GPU memory", "[cuda]") {
  pair_of_ranks p{"cuda"};
  auto host = pattern(1 << 20, 13);
  gpu_buffer dst{host.size()};
  REQUIRE(p.sender->register_memory({addr(host), host.size(), -1}));
  REQUIRE(p.receiver->register_memory({dst.ptr, dst.size, 0}));
  write_batch b;
  b.dst_device_id = 0;
  b.ops = {{addr(host), dst.ptr, host.size()}};
  REQUIRE(p.run(b).first);
  CHECK(dst.read() == host);
}

TEST_CASE("cuda refuses writes outside registered memory and registrations of the wrong kind",
          "[cuda]") {
  pair_of_ranks p{"cuda"};
  gpu_buffer src{8192}, dst{8192};
  REQUIRE(p.sender->register_memory({src.ptr, src.size, 0}));
  REQUIRE(p.receiver->register_memory({dst.ptr, dst.size, 0}));
  write_batch b;
  b.src_device_id = b.dst_device_id = 0;
  b.ops = {{src.ptr, dst.ptr, 100}, {src.ptr, dst.ptr + 8092, 101}};
  auto res = p.run(b);
  CHECK_FALSE(res.first);
  CHECK(res.second.find("outside rank 2's registered memory") != std::string::npos);
  auto got = dst.read();
  CHECK(std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0; }));
  std::vector<uint8_t> not_gpu(4096);
  auto wrong = p.sender->register_memory({addr(not_gpu), not_gpu.size(), 0});
  REQUIRE_FALSE(wrong);
  CHECK(describe(wrong.error()).find("GPU 0") != std::string::npos);
}
