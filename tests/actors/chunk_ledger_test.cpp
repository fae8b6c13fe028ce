// The prefill room's ledger of what its scheduler sent: whole pages, or
// pages of some KV buffers (a layer's), with every refusal named.
#include <catch2/catch.hpp>

#include "kvroom/actors/room/chunk_ledger.hpp"

using namespace kvroom;

TEST_CASE("whole chunks: declared pages in order, the last leaves none unsent") {
  chunk_ledger l{4, 6};
  auto a = l.admit(2, {}, false);
  CHECK(a.error.empty());
  CHECK(a.offset == 0);
  CHECK(l.complete_pages() == 2);
  auto b = l.admit(4, {}, true);
  CHECK(b.error.empty());
  CHECK(b.offset == 2);
  CHECK(l.complete_pages() == 6);
}

TEST_CASE("whole chunks: too many pages, or a last chunk short of them, are refused unchanged") {
  chunk_ledger l{4, 6};
  CHECK(l.admit(7, {}, false).error == "too many KV indices: 7 sent, 6 declared by init");
  CHECK(l.admit(5, {}, true).error == "last chunk leaves 1 of 6 declared pages unsent");
  CHECK(l.complete_pages() == 0);
  CHECK(l.admit(6, {}, true).error.empty());
}

TEST_CASE("layer by layer: each buffer gets every page, a chunk's buffers move together") {
  // Two layers, K and V each: buffers {0,1} are layer 0, {2,3} layer 1.
  chunk_ledger l{4, 3};
  auto a = l.admit(3, {0, 1}, false);
  CHECK(a.error.empty());
  CHECK(a.offset == 0);
  CHECK(l.complete_pages() == 0); // layer 1 has nothing yet
  auto b = l.admit(3, {2, 3}, true);
  CHECK(b.error.empty());
  CHECK(b.offset == 0);
  CHECK(l.complete_pages() == 3);
}

TEST_CASE("layer by layer: a buffer's pages in several chunks, at their offsets") {
  chunk_ledger l{2, 4};
  CHECK(l.admit(2, {0}, false).offset == 0);
  CHECK(l.admit(2, {1}, false).offset == 0);
  CHECK(l.admit(2, {0}, false).offset == 2);
  auto last = l.admit(2, {1}, true);
  CHECK(last.error.empty());
  CHECK(last.offset == 2);
}

TEST_CASE("layer by layer: every misuse is refused with its reason, changing nothing") {
  chunk_ledger l{4, 3};
  CHECK(l.admit(1, {4}, false).error == "KV buffer 4 out of range [0, 4)");
  CHECK(l.admit(1, {-1}, false).error == "KV buffer -1 out of range [0, 4)");
  CHECK(l.admit(1, {1, 1}, false).error == "KV buffer 1 named twice in one chunk");
  CHECK(l.admit(4, {0, 1}, false).error
        == "too many KV indices of KV buffer 0: 4 sent, 3 declared by init");
  CHECK(l.admit(3, {0, 1}, true).error
        == "last chunk leaves 3 of 3 declared pages of KV buffer 2 unsent");
  REQUIRE(l.admit(2, {0}, false).error.empty());
  CHECK(l.admit(1, {0, 1}, false).error
        == "a chunk's KV buffers stand at different pages (buffer 0 at 2, buffer 1 at 0)");
  // Whole pages after a layer's: the buffers stand apart.
  CHECK_FALSE(l.admit(1, {}, false).error.empty());
  CHECK(l.complete_pages() == 0);
}
