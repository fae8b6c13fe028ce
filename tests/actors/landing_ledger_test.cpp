// Decode's ledger of what landed in each KV buffer of a room (vLLM's
// wait_for_layer_load asks it, through the receiver's `landed`), and the
// count of a chunk's bytes per destination buffer both sides make.
#include <catch2/catch.hpp>

#include "kvroom/actors/room/landing_ledger.hpp"

using namespace kvroom;

namespace {

/// Four buffers of 8 pages of 64 bytes, K and V of two layers, laid out
/// back to back (as vLLM's (2, blocks, ...) tensors are: a layer's K ends
/// where its V starts), the last one out of address order.
std::vector<paged_buffer> four_buffers() {
  std::vector<paged_buffer> kv(4);
  uint64_t addrs[] = {0x1000, 0x1200, 0x1400, 0x0800};
  for (size_t b = 0; b < 4; ++b)
    kv[b] = paged_buffer{mem_desc{addrs[b], 8 * 64, -1}, 64};
  return kv;
}

} // namespace

TEST_CASE("bytes per buffer: by destination, split where an op spans two buffers") {
  auto kv = four_buffers();
  std::vector<write_op> ops{
    {0, 0x1000, 64},          // buffer 0, page 0
    {0, 0x11c0, 128},         // buffer 0's last page and buffer 1's first
    {0, 0x0800 + 64, 64},     // buffer 3
    {0, 0x9000, 64},          // outside every buffer (aux)
    {0, 0x1600 - 32, 64},     // buffer 2's tail, then past it: half counted
  };
  auto got = bytes_per_buffer(kv, ops);
  CHECK(got.buffers == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(got.bytes == std::vector<uint64_t>{128, 64, 32, 64});
  CHECK(bytes_per_buffer(kv, {}).empty());
  CHECK(bytes_per_buffer(kv, {{0, ~uint64_t{0} - 8, 64}}).empty()); // wraps
}

TEST_CASE("landing: a buffer is reported once, when every byte it expects landed") {
  landing_ledger l{{128, 128, 128, 128}};
  REQUIRE(l.active());
  std::vector<int32_t> newly;
  l.add(buffer_bytes{{0, 1}, {64, 128}}, newly);
  CHECK(newly == std::vector<int32_t>{1});
  CHECK_FALSE(l.landed(0));
  CHECK(l.landed(1));
  newly.clear();
  l.add(buffer_bytes{{0, 1}, {64, 64}}, newly); // 1 again: not reported twice
  CHECK(newly == std::vector<int32_t>{0});
  newly.clear();
  l.add(buffer_bytes{{7, -1}, {999, 999}}, newly); // not this rank's buffers
  CHECK(newly.empty());
  l.all(newly);
  CHECK(newly == std::vector<int32_t>{2, 3});
  CHECK(l.landed(3));
  CHECK_FALSE(l.landed(4));
}

TEST_CASE("landing: a room without a ledger counts nothing") {
  landing_ledger l;
  CHECK_FALSE(l.active());
  std::vector<int32_t> newly;
  l.add(buffer_bytes{{0}, {64}}, newly);
  l.all(newly);
  CHECK(newly.empty());
  CHECK_FALSE(l.landed(0));
}
