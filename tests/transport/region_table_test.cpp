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


TEST_CASE("region table: a hint is asked first and left at the region that held the range") {
  region_table t;
  REQUIRE(t.add({0x10000, 0x1000, -1}));
  REQUIRE(t.add({0x20000, 0x1000, -1}));
  REQUIRE(t.add({0x30000, 0x1000, -1}));
  auto v = t.read();
  size_t hint = 0;
  CHECK(v.covers(0x30010, 0x10, hint));
  CHECK(hint == 2);
  CHECK(v.covers(0x30020, 0x10, hint)); // the same region: asked first
  CHECK(hint == 2);
  CHECK(v.covers(0x10000, 0x10, hint)); // a miss falls back to the search
  CHECK(hint == 0);
  // A wrong hint never widens what is covered.
  hint = 1;
  CHECK_FALSE(v.covers(0x20ff0, 0x20, hint)); // runs past region 1
  CHECK_FALSE(v.covers(0x28000, 0x10, hint)); // in a gap
  hint = 99; // out of range: ignored
  CHECK(v.covers(0x20000, 0x1000, hint));
  CHECK(hint == 1);
}
