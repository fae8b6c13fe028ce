// A rank restarted on its id, across processes (one runtime each: its own
// actor system and node, talking through CAF's middleman over loopback).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>

#include "kvroom/kit/testkit.hpp"
#include "engine_kit.hpp"

using namespace kvroom;
using namespace kvroom::engine_kit;

namespace {

runtime_options networked() {
  runtime_options o;
  o.log_level = std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off";
  o.network = true;
  o.secret = deployment_secret{"a secret of a test deployment"};
  return o;
}

rank_config rank_on(role side, rank_id id, host_kv_cache& cache) {
  rank_config cfg;
  cfg.side = side;
  cfg.id = id;
  cfg.memory = cache.layout();
  cfg.timeouts = generous();
  cfg.network = true;
  cfg.transport = "tcp";
  cfg.tcp_host = "127.0.0.1";
  return cfg;
}

} // namespace

// The registry pushes first registrations to other processes in batches,
// 20 ms later. A survivor remembers a lost prefill rank for a while and
// fails rooms that name it at once; had a replacement's first rooms opened
// there before the batch came, they failed on the loss of the rank it
// replaced (`kvroom stress --processes --seed=10`: 17-20 rooms). The
// registry now answers a replacement only after every other rank applied
// the directory that lists it: this test opens the survivor's room the
// moment the replacement is added, with nothing in between to wait on.
TEST_CASE("a replacement is listed on every survivor once it is added: its first room succeeds") {
  runtime home{networked()};
  auto port = home.publish_registry(0, "127.0.0.1");
  REQUIRE(port);
  runtime survivors{networked()};
  REQUIRE_FALSE(survivors.connect_registry("127.0.0.1", *port));
  host_kv_cache decode_cache{small_shape()}, first_cache{small_shape()},
    second_cache{small_shape()};
  auto d = survivors.add_rank(rank_on(role::decode, 100, decode_cache));
  REQUIRE(d);
  {
    runtime first{networked()};
    REQUIRE_FALSE(first.connect_registry("127.0.0.1", *port));
    auto p = first.add_rank(rank_on(role::prefill, 0, first_cache));
    REQUIRE(p);
    REQUIRE(eventually([&] { return (*d)->metrics().peers_listed == 1; }));
    // The first incarnation's process goes.
  }
  REQUIRE(eventually([&] { return (*d)->metrics().peers_lost == 1; }));
  runtime second{networked()};
  REQUIRE_FALSE(second.connect_registry("127.0.0.1", *port));
  auto p = second.add_rank(rank_on(role::prefill, 0, second_cache));
  REQUIRE(p);
  room_id room = 77;
  auto receiver = (*d)->make_receiver(room);
  REQUIRE(receiver);
  auto sender = (*p)->make_sender(room);
  REQUIRE(sender);
  std::vector<int64_t> src{3, 4, 5}, dst{9, 1, 30};
  REQUIRE(reaches(*receiver, kv_poll::waiting_for_input));
  REQUIRE_FALSE(receiver->init(dst, 2));
  second_cache.write_room(key(room, 0), src, 1);
  REQUIRE(reaches(*sender, kv_poll::waiting_for_input));
  REQUIRE_FALSE(sender->init(src.size(), 1));
  REQUIRE_FALSE(sender->send(src, true));
  REQUIRE(reaches(*receiver, kv_poll::success));
  CHECK_FALSE(receiver->failure());
  std::string why;
  CHECK(decode_cache.check_room(key(room, 0), dst, 2, &why));
  INFO(why);
  CHECK(reaches(*sender, kv_poll::success));
}

// The registry answers a replacement once the others acknowledged it; with
// no other rank listed there is no one to wait for, and the answer is the
// directory at once (it once made a promise for nobody, and the rank's
// registration timed out: every benchmark point after the first).
TEST_CASE("a replacement alone in the directory registers at once") {
  runtime rt{networked()};
  host_kv_cache cache{small_shape()};
  auto cfg = rank_on(role::prefill, 0, cache);
  cfg.network = false;
  cfg.transport = "auto";
  {
    auto first = rt.add_rank(cfg);
    REQUIRE(first);
  }
  // The registry may not have seen the first go yet: then the id is held,
  // said at once; never a timeout.
  caf::expected<std::unique_ptr<rank>> again = make_error(errc::unavailable, "not tried");
  REQUIRE(eventually([&] {
    again = rt.add_rank(cfg);
    if (!again)
      CHECK(describe(again.error()).find("is held by the live") != std::string::npos);
    return static_cast<bool>(again);
  }));
}
