#include <catch2/catch.hpp>

#include "caf/all.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/messages/registration.hpp"
#include "kvroom/messages/room_messages.hpp"

using namespace kvroom;

namespace {

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  fixture() {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

/// Serializes `x` with CAF's binary serializer, reads it back into a
/// default-constructed T and returns it.
template <class T>
T roundtrip(caf::actor_system& sys, T x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE(!sink(x));
  T y;
  caf::binary_deserializer source{sys, buf};
  REQUIRE(!source(y));
  return y;
}

template <class T>
void check_roundtrip(caf::actor_system& sys, const T& x) {
  auto y = roundtrip(sys, x);
  CHECK(caf::deep_to_string(x) == caf::deep_to_string(y));
}

rank_ref some_rank() {
  rank_ref r;
  r.side = role::decode;
  r.dp_rank = 3;
  r.tp_rank = 1;
  r.tp_size = 4;
  r.id = 65549;
  return r;
}

memory_layout some_layout() {
  memory_layout m;
  m.kv.push_back({mem_desc{0x1000, 8192, -1}, 4096});
  m.kv.push_back({mem_desc{0x9000, 8192, 2}, 4096});
  m.aux.push_back({mem_desc{0x20000, 640, -1}, 64});
  return m;
}

} // namespace

TEST_CASE("kv_poll keeps SGLang's numbers so a MIN over ranks lets Failed win") {
  CHECK(static_cast<int>(kv_poll::failed) == 0);
  CHECK(static_cast<int>(kv_poll::bootstrapping) == 1);
  CHECK(static_cast<int>(kv_poll::waiting_for_input) == 2);
  CHECK(static_cast<int>(kv_poll::transferring) == 3);
  CHECK(static_cast<int>(kv_poll::success) == 4);
  CHECK(is_terminal(kv_poll::failed));
  CHECK(is_terminal(kv_poll::success));
  CHECK_FALSE(is_terminal(kv_poll::transferring));
  for (int i = 0; i < 5; ++i) {
    kv_poll x;
    REQUIRE(from_string(to_string(static_cast<kv_poll>(i)), x));
    CHECK(static_cast<int>(x) == i);
  }
  kv_poll x;
  CHECK_FALSE(from_string("done", x));
}

TEST_CASE("kv_transfer_error prints SGLang's text form") {
  kv_transfer_error err{42, "transfer to decode failed", true, 7};
  CHECK(to_string(err) == "KVTransferError(bootstrap_room=42): transfer to decode failed");
}

TEST_CASE("mem_desc covers and overlaps ranges without overflow") {
  mem_desc m{1000, 100, -1};
  CHECK(m.covers(1000, 100, -1));
  CHECK(m.covers(1050, 50, -1));
  CHECK_FALSE(m.covers(1050, 51, -1));
  CHECK_FALSE(m.covers(999, 10, -1));
  CHECK_FALSE(m.covers(1000, 10, 0));  // other device
  CHECK_FALSE(m.covers(1001, UINT64_MAX, -1));
  CHECK_FALSE(m.covers(UINT64_MAX, 2, -1));
  CHECK(m.overlaps(mem_desc{1099, 10, -1}));
  CHECK_FALSE(m.overlaps(mem_desc{1100, 10, -1}));
  CHECK_FALSE(m.overlaps(mem_desc{900, 100, -1}));
  CHECK_FALSE(m.overlaps(mem_desc{1000, 100, 1}));
}

TEST_CASE("rank ids are unique per side, dp and tp slot") {
  CHECK(default_rank_id(role::prefill, 0, 1, 2) == 1);
  CHECK(default_rank_id(role::prefill, 1, 0, 2) == 2);
  CHECK(default_rank_id(role::decode, 0, 0, 2) == 65536);
  CHECK(to_string(some_rank()) == "decode[dp3,tp1]#65549");
}

TEST_CASE("kvroom errors render with their context through the actor system") {
  fixture f;
  auto err = make_error(errc::out_of_range, "page 9 out of range [0, 4)");
  CHECK(describe(err) == "out_of_range: page 9 out of range [0, 4)");
  auto text = f.sys->render(err);
  CHECK(text.find("out_of_range") != std::string::npos);
  CHECK(text.find("page 9") != std::string::npos);
}

TEST_CASE("is() tells an error code apart from others, from other categories and from none") {
  auto err = make_error(errc::room_concluded, "send after room 3 concluded as success");
  CHECK(is(err, errc::room_concluded));
  CHECK_FALSE(is(err, errc::room_cleared));
  CHECK_FALSE(is(caf::error{}, errc::room_concluded));
  CHECK_FALSE(is(caf::make_error(caf::sec::request_timeout), errc::room_concluded));
}

TEST_CASE("every message type round-trips through CAF's binary serializer") {
  fixture f;
  auto& sys = f.sys;
  auto actor = sys->spawn([] { return caf::behavior{[](int) {}}; });
  kv_transfer_error err{77, "injected fault before post (room 77)", true, 3};
  write_batch batch;
  batch.room = 77;
  batch.peer = endpoint_desc{"shm", "12", 99, 65536, {shm_region{0x1000, 4096, "/kvroom-1-0", 64}}, {device_region{0x2000, 512, 1, std::string(64, 'h'), 128}}};
  batch.ops = {{0x1000, 0x2000, 4096}, {0x3000, 0x4000, 64}};
  batch.aux_ops = 1;
  batch.src_device_id = 1;
  check_roundtrip(*sys, some_rank());
  check_roundtrip(*sys, err);
  check_roundtrip(*sys, mem_desc{0xdead000, 4096, 3});
  check_roundtrip(*sys, some_layout());
  check_roundtrip(*sys, batch.peer);
  check_roundtrip(*sys, batch);
  check_roundtrip(*sys, sender_init{77, 12, 5});
  check_roundtrip(*sys, sender_chunk{77, {1, 2, 3, 9}, true});
  check_roundtrip(*sys, receiver_init{77, {4, 5, 6}, 2});
  check_roundtrip(*sys, room_abort{77, "client went away"});
  check_roundtrip(*sys, room_clear{77});
  check_roundtrip(*sys, room_event{77, kv_poll::transferring, {}});
  check_roundtrip(*sys, room_event{77, kv_poll::failed, err});
  check_roundtrip(*sys, dst_info{77, some_rank(), actor, {8, 9}, 1});
  check_roundtrip(*sys, transfer_started{77, 1});
  check_roundtrip(*sys, transfer_done{77, 1, 1 << 20, 16});
  check_roundtrip(*sys, room_failed{77, err, true, 4});
  check_roundtrip(*sys, room_fenced{77, 1, 65536});
  check_roundtrip(*sys, room_concluded{77, kv_poll::failed, err, {some_rank()}, true, true});
  check_roundtrip(*sys, room_opened{77, actor, 3});
  check_roundtrip(*sys, take_failure{77});
  check_roundtrip(*sys, failure_reply{true, err});
  check_roundtrip(*sys, get_stats{});
  check_roundtrip(*sys, manager_stats{1, 2, 3, 4, 5, 6, 7, 8});
  rank_entry entry{some_rank(), actor, some_layout(), {batch.peer, endpoint_desc{"tcp", "127.0.0.1:9", 0, 3, {}, {}}}};
  check_roundtrip(*sys, entry);
  check_roundtrip(*sys, register_rank{entry});
  check_roundtrip(*sys, directory_update{{entry, entry}});
  check_roundtrip(*sys, transfer_job{77, 3, batch});
  check_roundtrip(*sys, transfer_jobs{77, {transfer_job{77, 3, batch}, transfer_job{77, 4, batch}}});
  check_roundtrip(*sys, transfer_result{77, 3, false, "peer gone", 0});
  check_roundtrip(*sys, part_done{77, 1, 2, 65537, actor, 1, actor});
  check_roundtrip(*sys, room_committed{77});
  SECTION("an actor handle survives the trip as the same actor") {
    auto back = roundtrip(*sys, room_opened{77, actor});
    CHECK(back.room_actor == actor);
  }
  caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
}
