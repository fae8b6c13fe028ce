#include <catch2/catch.hpp>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/transfer_plan.hpp"

using namespace kvroom;

namespace {

/// Two KV buffers of 8 pages x 100 bytes and one aux buffer of 4 x 16 bytes,
/// based at `base` (addresses only; nothing is dereferenced).
memory_layout layout(uint64_t base) {
  memory_layout m;
  m.kv.push_back({mem_desc{base, 800, -1}, 100});
  m.kv.push_back({mem_desc{base + 10000, 800, -1}, 100});
  m.aux.push_back({mem_desc{base + 20000, 64, -1}, 16});
  return m;
}

const memory_layout src = layout(100000);
const memory_layout dst = layout(500000);

} // namespace

TEST_CASE("pages contiguous on both sides coalesce into one write per buffer") {
  auto ops = plan_writes(src, dst, {2, 3, 4}, {5, 6, 7});
  REQUIRE(ops);
  REQUIRE(ops->size() == 2);
  CHECK((*ops)[0].src_addr == 100000 + 200);
  CHECK((*ops)[0].dst_addr == 500000 + 500);
  CHECK((*ops)[0].size_bytes == 300);
  CHECK((*ops)[1].src_addr == 110000 + 200);
  CHECK((*ops)[1].dst_addr == 510000 + 500);
  CHECK((*ops)[1].size_bytes == 300);
}

TEST_CASE("a run breaks where either side is not contiguous") {
  // src 0,1,2,5 -> dst 3,4,7,0: runs (0-1 -> 3-4), (2 -> 7), (5 -> 0)
  auto ops = plan_writes(src, dst, {0, 1, 2, 5}, {3, 4, 7, 0});
  REQUIRE(ops);
  REQUIRE(ops->size() == 6);
  CHECK((*ops)[0].size_bytes == 200);
  CHECK((*ops)[1].src_addr == 100000 + 200);
  CHECK((*ops)[1].dst_addr == 500000 + 700);
  CHECK((*ops)[1].size_bytes == 100);
  CHECK((*ops)[2].dst_addr == 500000);
  uint64_t total = 0;
  for (auto& op : *ops)
    total += op.size_bytes;
  CHECK(total == 2 * 4 * 100);
}

TEST_CASE("an empty chunk plans nothing") {
  auto ops = plan_writes(src, dst, {}, {});
  REQUIRE(ops);
  CHECK(ops->empty());
}

TEST_CASE("an out-of-range destination index is refused with a clear reason and plans nothing") {
  auto ops = plan_writes(src, dst, {0, 1}, {7, 8});
  REQUIRE_FALSE(ops);
  auto text = describe(ops.error());
  CHECK(text.find("out_of_range") == 0);
  CHECK(text.find("destination page index 8 out of range [0, 8)") != std::string::npos);
}

TEST_CASE("negative and out-of-range source indices are refused") {
  CHECK_FALSE(plan_writes(src, dst, {-1}, {0}));
  auto ops = plan_writes(src, dst, {8}, {0});
  REQUIRE_FALSE(ops);
  CHECK(describe(ops.error()).find("source page index 8") != std::string::npos);
}

TEST_CASE("layouts that do not match are refused") {
  auto other = dst;
  other.kv.pop_back();
  auto ops = plan_writes(src, other, {0}, {0});
  REQUIRE_FALSE(ops);
  CHECK(describe(ops.error()).find("layout mismatch") != std::string::npos);
  other = dst;
  other.kv[1].page_size_bytes = 50;
  ops = plan_writes(src, other, {0}, {0});
  REQUIRE_FALSE(ops);
  CHECK(describe(ops.error()).find("page size mismatch") != std::string::npos);
  CHECK_FALSE(plan_writes(src, dst, {0, 1}, {0}));
}

TEST_CASE("aux slots map one item per aux buffer and are range-checked") {
  auto ops = plan_aux_writes(src, dst, 1, 3);
  REQUIRE(ops);
  REQUIRE(ops->size() == 1);
  CHECK((*ops)[0].src_addr == 120000 + 16);
  CHECK((*ops)[0].dst_addr == 520000 + 48);
  CHECK((*ops)[0].size_bytes == 16);
  CHECK_FALSE(plan_aux_writes(src, dst, 4, 0));
  auto bad = plan_aux_writes(src, dst, 0, -2);
  REQUIRE_FALSE(bad);
  CHECK(describe(bad.error()).find("destination aux index -2") != std::string::npos);
}
