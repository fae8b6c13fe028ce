// The table every host backend validates writes with: a range is covered
// only inside one registered region, whatever the order regions came in.
#include <catch2/catch.hpp>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/region_table.hpp"

using namespace kvroom;
using kvroom::detail::region_table;

TEST_CASE("region table: a range inside one region, registered in any order") {
  region_table t;
  auto c = t.add({0x30000, 0x1000, -1});
  auto a = t.add({0x10000, 0x1000, -1});
  auto b = t.add({0x11000, 0x1000, -1}); // adjacent to a
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  {
    auto v = t.read();
    CHECK(v.covers(0x10000, 0x1000));
    CHECK(v.covers(0x10fff, 1));
    CHECK(v.covers(0x11000, 0x800));
    CHECK(v.covers(0x30800, 0x800));
    // Two adjacent regions are two: a write across them is refused.
    CHECK_FALSE(v.covers(0x10800, 0x1000));
    CHECK_FALSE(v.covers(0x0f000, 0x10));   // below every region
    CHECK_FALSE(v.covers(0x20000, 0x10));   // in a gap
    CHECK_FALSE(v.covers(0x30800, 0x801));  // past the end
    CHECK_FALSE(v.covers(0x40000, 1));      // above every region
  }
  CHECK_FALSE(t.add({0x30400, 0x10, -1})); // overlaps c
  REQUIRE_FALSE(t.remove(*a));
  auto v = t.read();
  CHECK_FALSE(v.covers(0x10000, 0x10));
  CHECK(v.covers(0x11000, 0x10));
}

