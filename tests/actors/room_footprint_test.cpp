// What one in-flight room costs a rank is mostly its actor: CAF allocates
// it with its control block in one `actor_storage`, and jemalloc rounds
// that up to a size class (1,536, 1,792, 2,048 bytes...). The room states
// keep their rarely used parts apart (a pulling room's reads) and their
// flags together so that both room actors fit 1,792 bytes: at 2,048 the
// memory bench's bytes per in-flight room per rank read 4,051-4,078 against
// 3,514-3,646 (`kvroom-bench memory`, alternated). A member added to either
// state that crosses the class fails here, not silently in the bench.
#include <catch2/catch.hpp>

#include "caf/actor_storage.hpp"

#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/room/decode_room.hpp"
#include "kvroom/actors/room/prefill_room.hpp"

using namespace kvroom;

TEST_CASE("room footprint: both room actors fit a 1,792-byte allocation") {
  constexpr size_t size_class = 1792;
  CHECK(sizeof(caf::actor_storage<counted_actor<decode_room_state>>) <= size_class);
  CHECK(sizeof(caf::actor_storage<counted_actor<prefill_room_state>>) <= size_class);
}

TEST_CASE("room footprint: a pushing decode room holds no pull state") {
  decode_room_state st;
  CHECK(st.pull == nullptr);
  st.pulling().next_read = 7;
  REQUIRE(st.pull != nullptr);
  CHECK(st.pulling().next_read == 7); // made once, then kept
}

TEST_CASE("room footprint: the chunk queue is first in, first out, and empties") {
  prefill_room_state::chunk_queue q;
  CHECK(q.empty());
  for (uint64_t i = 0; i < 3; ++i)
    q.push_back(prefill_room_state::queued_chunk{{}, i});
  CHECK(q.size() == 3);
  CHECK(q.front().offset == 0);
  q.pop_front();
  CHECK(q.front().offset == 1);
  q.push_back(prefill_room_state::queued_chunk{{}, 3});
  q.pop_front();
  q.pop_front();
  CHECK(q.front().offset == 3);
  q.pop_front();
  CHECK(q.empty());
  CHECK(q.size() == 0);
  q.push_back(prefill_room_state::queued_chunk{{}, 4});
  CHECK(q.front().offset == 4);
  q.clear();
  CHECK(q.empty());
}
