// End-to-end tests of room actors, managers and the scheduler API, in one
// process over real registered buffers. Waits are bounded; no test sleeps to
// let something happen, it polls until a condition holds or a limit passes.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/api/backend.hpp"
#include "kvroom/kit/testkit.hpp"
#include "engine_kit.hpp"
#include "kvroom/actors/control/control_door.hpp"
#include "kvroom/actors/local_messages.hpp"
#include "kvroom/api/errors.hpp"

using namespace kvroom;
using namespace std::chrono_literals;

using namespace kvroom::engine_kit;

TEST_CASE("rooms transfer byte-exact from a 2-rank prefill group to a 2-rank decode group") {
  group g;
  for (room_id room : {room_id{1001}, room_id{1002}}) {
    std::vector<int64_t> src{3, 4, 5, 9, 10, 20};
    std::vector<int64_t> dst{30, 31, 2, 7, 8, 0};
    auto h = open_room(g, room);
    drive_room(g, h, room, src, dst, 1, 6);
    for (int t = 0; t < 2; ++t) {
      REQUIRE(reaches(h.senders[t], kv_poll::success));
      REQUIRE(reaches(h.receivers[t], kv_poll::success));
      std::string why;
      CHECK(g.decode_cache(t).check_room(key(room, t), dst, 6, &why));
      INFO(why);
      CHECK_FALSE(h.receivers[t].failure());
    }
    for (auto& s : h.senders)
      CHECK_FALSE(s.clear());
    for (auto& r : h.receivers)
      CHECK_FALSE(r.clear());
  }
  CHECK(all_quiet(g));
}

namespace {

/// A data plane that, like verbs, moves nothing to a peer before a
/// connection handshake with that peer's backend: a "hello" answered by an
/// "ack", both carried by kvroom's actors. Bytes then move through the
/// local backend it wraps.
class handshake_backend final : public backend {
public:
  handshake_backend(backend_ptr inner, rank_id owner, std::shared_ptr<std::atomic<int>> seen)
    : inner_(std::move(inner)), owner_(owner), seen_(std::move(seen)) {
  }
  std::string name() const override { return inner_->name(); }
  backend_caps caps() const override { return inner_->caps(); }
  endpoint_desc endpoint() const override { return inner_->endpoint(); }
  caf::expected<region_id> register_memory(const mem_desc& m) override {
    return inner_->register_memory(m);
  }
  caf::error deregister_memory(region_id id) override { return inner_->deregister_memory(id); }
  post_result post(const write_batch& b) override {
    if (connected_.count(b.peer.owner) != 0)
      return inner_->post(b);
    auto id = next_++;
    if (requested_.insert(b.peer.owner).second)
      out_.push_back({name(), owner_, b.peer.owner, "hello"});
    waiting_.emplace(id, b);
    return post_result::in_progress(id);
  }
  xfer_status poll(xfer_id id, std::string& reason) override {
    if (waiting_.count(id) != 0)
      return xfer_status::in_progress;
    auto i = done_.find(id);
    if (i == done_.end()) {
      reason = "no batch " + std::to_string(id);
      return xfer_status::failed;
    }
    reason = i->second.second;
    return i->second.first;
  }
  void release(xfer_id id) override {
    waiting_.erase(id);
    done_.erase(id);
  }
  std::vector<transport_control> take_control() override {
    return std::move(out_);
  }
  caf::error on_control(const transport_control& msg) override {
    if (msg.to != owner_)
      return make_error(errc::invalid_argument, "not for this rank");
    ++*seen_;
    connected_.insert(msg.from);
    if (msg.payload == "hello")
      out_.push_back({name(), owner_, msg.from, "ack"});
    for (auto i = waiting_.begin(); i != waiting_.end();) {
      if (i->second.peer.owner != msg.from) {
        ++i;
        continue;
      }
      // The inner backend (local) completes inside the call.
      auto inner = inner_->post(i->second);
      REQUIRE(inner.status != xfer_status::in_progress);
      done_[i->first] = {inner.status, describe(inner.error)};
      i = waiting_.erase(i);
    }
    return caf::none;
  }

private:
  backend_ptr inner_;
  rank_id owner_;
  std::shared_ptr<std::atomic<int>> seen_;
  std::set<rank_id> connected_;
  std::set<rank_id> requested_;
  std::vector<transport_control> out_;
  std::map<xfer_id, write_batch> waiting_;
  /// Batches that waited for the handshake, once posted: their outcome.
  std::map<xfer_id, std::pair<xfer_status, std::string>> done_;
  xfer_id next_ = 1;
};

} // namespace

TEST_CASE("a backend's connection handshake travels between ranks as actor messages") {
  auto seen = std::make_shared<std::atomic<int>>(0);
  group::options opt;
  opt.data_plane = [seen](const backend_config& bc) -> caf::expected<backend_ptr> {
    auto inner = make_backend(bc);
    if (!inner)
      return inner.error();
    return backend_ptr{std::make_unique<handshake_backend>(std::move(*inner), bc.owner, seen)};
  };
  group g{opt};
  for (room_id room : {room_id{2001}, room_id{2002}}) {
    std::vector<int64_t> src{1, 2, 3};
    std::vector<int64_t> dst{7, 8, 9};
    auto h = open_room(g, room);
    drive_room(g, h, room, src, dst, 0, 1);
    for (int t = 0; t < 2; ++t) {
      REQUIRE(reaches(h.receivers[t], kv_poll::success));
      REQUIRE(reaches(h.senders[t], kv_poll::success));
      std::string why;
      CHECK(g.decode_cache(t).check_room(key(room, t), dst, 1, &why));
      INFO(why);
    }
    for (auto& x : h.senders)
      CHECK_FALSE(x.clear());
    for (auto& x : h.receivers)
      CHECK_FALSE(x.clear());
  }
  // Each prefill rank said hello to its decode peer once; each got an ack.
  CHECK(seen->load() == 4);
  CHECK(all_quiet(g));
}

namespace {

/// What a batch looked like when posted.
struct posted {
  std::string transport;
  int32_t src_device = -1;
  int32_t dst_device = -1;
  size_t ops = 0;
  uint32_t aux_ops = 0;
};

/// The local backend for host memory, beside a pretend "cuda" path for
/// memory labelled GPU 0 (host memory in fact, copied with memcpy): what
/// SGLang on GPUs gives kvroom is a GPU KV cache beside host aux buffers.
class pretend_gpu_backend : public backend {
public:
  pretend_gpu_backend(backend_ptr inner, rank_id owner,
                      std::shared_ptr<std::vector<posted>> log, std::shared_ptr<std::mutex> mx)
    : inner_(std::move(inner)), owner_(owner), log_(std::move(log)), mx_(std::move(mx)) {
  }
  std::string name() const override { return inner_->name(); }
  backend_caps caps() const override { return inner_->caps(); }
  endpoint_desc endpoint() const override { return inner_->endpoint(); }
  std::vector<endpoint_desc> endpoints() const override {
    auto out = inner_->endpoints();
    auto gpu = inner_->endpoint();
    gpu.transport = "cuda";
    out.push_back(gpu);
    return out;
  }
  caf::expected<region_id> register_memory(const mem_desc& mem) override {
    if (mem.device_id < 0)
      return inner_->register_memory(mem);
    return device_base + ++devices_; // the "GPU" copies trust their peer
  }
  caf::error deregister_memory(region_id id) override {
    return id > device_base ? caf::none : inner_->deregister_memory(id);
  }
  bool completes_inline(const write_batch& b) const override {
    return b.peer.transport != "cuda" && inner_->completes_inline(b);
  }
  post_result post(const write_batch& b) override {
    {
      std::lock_guard<std::mutex> guard{*mx_};
      log_->push_back(posted{b.peer.transport, b.src_device_id, b.dst_device_id, b.ops.size(),
                             b.aux_ops});
    }
    if (b.peer.transport != "cuda")
      return inner_->post(b);
    for (auto& op : b.ops)
      std::memcpy(reinterpret_cast<void*>(op.dst_addr),
                  reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
    return post_result::done();
  }

private:
  static constexpr region_id device_base = region_id{1} << 40;
  backend_ptr inner_;
  rank_id owner_;
  std::shared_ptr<std::vector<posted>> log_;
  std::shared_ptr<std::mutex> mx_;
  region_id devices_ = 0;
};

} // namespace

TEST_CASE("GPU KV beside host aux: the pages go on a GPU path, the aux slot in a host batch of its own") {
  auto log = std::make_shared<std::vector<posted>>();
  auto mx = std::make_shared<std::mutex>();
  group::options opt;
  opt.tp = 1;
  opt.kv_on_pretend_gpu = true;
  opt.data_plane = [log, mx](const backend_config& bc) -> caf::expected<backend_ptr> {
    auto c = bc;
    c.name = "local";
    auto inner = make_backend(c);
    if (!inner)
      return inner.error();
    return backend_ptr{std::make_unique<pretend_gpu_backend>(std::move(*inner), bc.owner, log, mx)};
  };
  group g{opt};
  std::vector<int64_t> src{1, 2, 3, 4};
  std::vector<int64_t> dst{9, 7, 5, 3};
  auto h = open_room(g, 4001);
  drive_room(g, h, 4001, src, dst, 2, 5, 2);
  REQUIRE(reaches(h.receivers[0], kv_poll::success));
  REQUIRE(reaches(h.senders[0], kv_poll::success));
  std::string why;
  CHECK(g.decode_cache(0).check_room(key(4001, 0), dst, 5, &why));
  INFO(why);
  std::lock_guard<std::mutex> guard{*mx};
  size_t gpu_batches = 0, aux_batches = 0;
  for (auto& p : *log) {
    if (p.transport == "cuda") {
      ++gpu_batches;
      CHECK(p.src_device == 0);
      CHECK(p.dst_device == 0);
      CHECK(p.aux_ops == 0); // no aux write rides with the pages
    } else {
      ++aux_batches;
      CHECK(p.src_device == -1);
      CHECK(p.dst_device == -1);
      CHECK(p.ops == p.aux_ops); // the aux slot alone
      CHECK(p.aux_ops > 0);
    }
  }
  CHECK(gpu_batches == 2); // two chunks
  CHECK(aux_batches == 1); // with the last one
  for (auto& x : h.senders)
    CHECK_FALSE(x.clear());
  for (auto& x : h.receivers)
    CHECK_FALSE(x.clear());
}

TEST_CASE("a state buffer off the KV's device, or aux on a third one, is refused with both places named") {
  runtime rt{runtime_options{"central", 0, "off"}};
  host_kv_cache cache{small_shape()};
  rank_config cfg;
  cfg.memory = cache.layout();
  for (auto& b : cfg.memory.kv)
    b.mem.device_id = 0;
  cfg.memory.state.push_back(cfg.memory.aux.front()); // on the host
  auto r = rt.add_rank(cfg);
  REQUIRE_FALSE(r);
  CHECK(describe(r.error()).find("a state buffer on the host beside KV buffers on GPU 0")
        != std::string::npos);
  cfg.memory.state.clear();
  cfg.memory.aux.front().mem.device_id = 1;
  r = rt.add_rank(cfg);
  REQUIRE_FALSE(r);
  CHECK(describe(r.error()).find("an aux buffer on GPU 1 beside KV buffers on GPU 0")
        != std::string::npos);
}

TEST_CASE("chunked sends land byte-exact and write nothing outside the room's pages") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  g.decode_cache(0).fill(0xAB);
  std::vector<int64_t> src, dst;
  for (int64_t i = 0; i < 12; ++i) {
    src.push_back(i);
    dst.push_back(31 - 2 * i);
  }
  auto h = open_room(g, 77);
  drive_room(g, h, 77, src, dst, 0, 3, 4);
  REQUIRE(reaches(h.receivers[0], kv_poll::success));
  REQUIRE(reaches(h.senders[0], kv_poll::success));
  std::string why;
  CHECK(g.decode_cache(0).check_room(key(77, 0), dst, 3, &why));
  INFO(why);
  CHECK(g.decode_cache(0).count_changed_outside(dst, 3, 0xAB) == 0);
}

TEST_CASE("a failure injected on one rank of a 2P x 2D room has one origin and reaches every rank") {
  group::options opt;
  opt.prefill0_faults.rooms = {555};
  opt.prefill0_faults.point = fault_point::after_post;
  group g{opt};
  auto h = open_room(g, 555);
  drive_room(g, h, 555, {0, 1, 2}, {5, 6, 7}, 0, 0);
  std::vector<kv_transfer_error> errors;
  for (auto& s : h.senders) {
    REQUIRE(reaches(s, kv_poll::failed));
    auto err = s.failure();
    REQUIRE(err);
    errors.push_back(*err);
  }
  for (auto& r : h.receivers) {
    REQUIRE(reaches(r, kv_poll::failed));
    auto err = r.failure();
    REQUIRE(err);
    errors.push_back(*err);
  }
  auto origin_id = g.prefill[0]->ref().id;
  int origins = 0;
  for (auto& e : errors) {
    CHECK(e.bootstrap_room == 555);
    CHECK(e.origin_rank == origin_id);
    CHECK(e.failure_reason.find("injected fault after post (room 555)") != std::string::npos);
    origins += e.is_from_another_rank ? 0 : 1;
  }
  CHECK(origins == 1);
  CHECK_FALSE(errors[0].is_from_another_rank);
  // The root cause came with the Failed state; a second call returns the
  // same value, and the manager's records go with the rooms.
  CHECK(h.receivers[1].failure()->failure_reason == errors[3].failure_reason);
  CHECK(stats_of(*g.prefill[0]).origin_failures == 1);
  CHECK(stats_of(*g.decode[1]).propagated_failures == 1);
  // Success is never reported over the failed part: the decode side of the
  // healthy prefill rank failed too.
  CHECK(h.receivers[1].poll() == kv_poll::failed);
  for (auto& x : h.senders)
    REQUIRE_FALSE(x.clear());
  for (auto& x : h.receivers)
    REQUIRE_FALSE(x.clear());
  for (auto* r : g.all())
    CHECK(eventually([&] { return stats_of(*r).failure_records == 0; }));
}

TEST_CASE("a rank told Failed by its group's all-reduce answers a failure from another rank") {
  // SGLang's scheduler polls with a MIN all-reduce over its TP group: one
  // rank's Failed is every rank's, possibly before kvroom's fan-out reached
  // them. A scripted all-reduce over the prefill group, polled until the
  // group reads Failed, then each rank asked as SGLang asks.
  group::options opt;
  opt.prefill0_faults.rooms = {556};
  opt.prefill0_faults.point = fault_point::after_post;
  group g{opt};
  auto h = open_room(g, 556);
  drive_room(g, h, 556, {0, 1, 2}, {5, 6, 7}, 0, 0);
  auto all_reduce_min = [&] {
    auto out = kv_poll::success;
    for (auto& s : h.senders)
      out = std::min(out, s.poll());
    return out;
  };
  REQUIRE(eventually([&] { return all_reduce_min() == kv_poll::failed; }));
  auto origin_id = g.prefill[0]->ref().id;
  // Asked as soon as the group reads Failed: a rank whose own Failed has
  // not arrived (the origin too, by a few microseconds) says another rank,
  // and never names itself or a wrong rank as the origin.
  int origins = 0;
  for (auto& s : h.senders) {
    auto err = s.group_failure();
    CHECK(err.bootstrap_room == 556);
    if (!err.is_from_another_rank) {
      ++origins;
      CHECK(err.origin_rank == origin_id);
      CHECK(err.failure_reason.find("injected fault after post (room 556)") != std::string::npos);
    } else {
      CHECK((err.origin_rank == -1 || err.origin_rank == origin_id));
    }
  }
  CHECK(origins <= 1);
  // Once the fan-out arrived everywhere, the same call gives every rank the
  // root cause and origin, and exactly one rank is the origin.
  origins = 0;
  for (auto& s : h.senders) {
    REQUIRE(reaches(s, kv_poll::failed));
    auto later = s.group_failure();
    CHECK(later.origin_rank == origin_id);
    CHECK(later.failure_reason.find("injected fault after post (room 556)") != std::string::npos);
    origins += later.is_from_another_rank ? 0 : 1;
  }
  CHECK(origins == 1);
  CHECK_FALSE(h.senders[0].group_failure().is_from_another_rank);
  for (auto& x : h.senders)
    REQUIRE_FALSE(x.clear());
  for (auto& x : h.receivers)
    REQUIRE_FALSE(x.clear());
}

TEST_CASE("a rank told Failed before any failure reached it says another rank, origin unknown, "
          "and its room goes on") {
  group g{group::options{}};
  auto h = open_room(g, 557);
  REQUIRE(reaches(h.receivers[1], kv_poll::waiting_for_input));
  // Nothing failed anywhere: the group's word alone.
  auto err = h.receivers[1].group_failure();
  CHECK(err.bootstrap_room == 557);
  CHECK(err.is_from_another_rank);
  CHECK(err.origin_rank == -1);
  CHECK(err.failure_reason.find("failed on another rank") != std::string::npos);
  CHECK_FALSE(h.receivers[1].failure());
  // Asking changed nothing: the room concludes as it would have.
  drive_room(g, h, 557, {0, 1, 2}, {5, 6, 7}, 0, 0);
  for (auto& r : h.receivers)
    CHECK(reaches(r, kv_poll::success));
  for (auto& x : h.senders)
    REQUIRE_FALSE(x.clear());
  for (auto& x : h.receivers)
    REQUIRE_FALSE(x.clear());
}

TEST_CASE("a failure of the aux data fails the room even though every KV page landed") {
  group::options opt;
  opt.tp = 1;
  opt.prefill0_faults.point = fault_point::on_aux;
  opt.prefill0_faults.rooms = {88};
  group g{opt};
  auto h = open_room(g, 88);
  drive_room(g, h, 88, {1, 2, 3, 4}, {1, 2, 3, 4}, 0, 0, 2);
  REQUIRE(reaches(h.receivers[0], kv_poll::failed));
  REQUIRE(reaches(h.senders[0], kv_poll::failed));
  auto err = h.receivers[0].failure();
  REQUIRE(err);
  CHECK(err->failure_reason.find("aux") != std::string::npos);
  CHECK(err->is_from_another_rank);
}

TEST_CASE("late messages after conclusion or clear change nothing") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto h = open_room(g, 9);
  drive_room(g, h, 9, {0}, {0}, 0, 0);
  REQUIRE(reaches(h.receivers[0], kv_poll::success));
  REQUIRE(reaches(h.senders[0], kv_poll::success));
  auto& mgr = g.decode[0]->manager();
  // A peer in this process (managers drop anonymous messages: a remote
  // stranger's arrive without a sender too).
  caf::scoped_actor peer{g.rt.system()};
  kv_transfer_error late{9, "late failure", false, 12345};
  SECTION("a late failure after Success is ignored") {
    peer->send(mgr, room_failed{9, late, true});
    peer->send(h.receivers[0].room() == 9 ? g.prefill[0]->manager() : mgr,
                   room_failed{9, late, true});
    CHECK_FALSE(h.senders[0].abort("too late"));
    // Let both managers and rooms process everything sent so far.
    stats_of(*g.decode[0]);
    stats_of(*g.prefill[0]);
    CHECK_FALSE(eventually([&] { return h.receivers[0].poll() != kv_poll::success; }, 200ms));
    CHECK(h.senders[0].poll() == kv_poll::success);
    CHECK_FALSE(h.receivers[0].failure());
    CHECK(stats_of(*g.decode[0]).failure_records == 0);
  }
  SECTION("a late failure or destination after clear resurrects nothing") {
    REQUIRE_FALSE(h.receivers[0].clear());
    REQUIRE_FALSE(h.senders[0].clear());
    REQUIRE(all_quiet(g));
    peer->send(mgr, room_failed{9, late, true});
    dst_info info;
    info.room = 9;
    info.decode_rank = g.decode[0]->ref();
    peer->send(g.prefill[0]->manager(), info);
    auto st = stats_of(*g.decode[0]);
    CHECK(st.live_rooms == 0);
    CHECK(st.failure_records == 0);
    CHECK(st.early_failures == 0);
    CHECK(st.tombstones == 1);
    CHECK(stats_of(*g.prefill[0]).parked == 0);
    CHECK(g.decode[0]->open_rooms() == 0);
    CHECK(h.receivers[0].clear() == make_error(errc::room_cleared));
  }
}

TEST_CASE("a room that succeeded leaves its manager without its scheduler's clear; a failed one stays until cleared") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto& actors = g.rt.system().registry();
  auto before = actors.running();
  auto h = open_room(g, 21);
  drive_room(g, h, 21, {0}, {0}, 0, 0);
  REQUIRE(reaches(h.receivers[0], kv_poll::success));
  REQUIRE(reaches(h.senders[0], kv_poll::success));
  // Neither handle was cleared: the room actors ended with their Success
  // and told their managers, which closed them (tombstones, no records).
  CHECK(eventually([&] { return actors.running() <= before; }));
  CHECK(all_quiet(g));
  for (auto* r : g.all()) {
    auto st = stats_of(*r);
    CHECK(st.live_rooms == 0);
    CHECK(st.tombstones == 1);
  }
  // The handles still answer, and clearing them is what it always was.
  CHECK(h.receivers[0].poll() == kv_poll::success);
  CHECK_FALSE(h.receivers[0].failure());
  CHECK_FALSE(h.receivers[0].clear());
  CHECK_FALSE(h.senders[0].clear());
  CHECK(h.senders[0].clear() == make_error(errc::room_cleared));

  auto f = open_room(g, 22);
  REQUIRE(reaches(f.receivers[0], kv_poll::waiting_for_input));
  REQUIRE_FALSE(f.receivers[0].abort("test"));
  REQUIRE(reaches(f.receivers[0], kv_poll::failed));
  REQUIRE(reaches(f.senders[0], kv_poll::failed));
  // A Failed room keeps its record (and its actor) until it is cleared.
  CHECK_FALSE(eventually([&] { return stats_of(*g.decode[0]).live_rooms == 0; }, 200ms));
  CHECK(stats_of(*g.decode[0]).failure_records == 1);
  REQUIRE_FALSE(f.receivers[0].clear());
  REQUIRE_FALSE(f.senders[0].clear());
  CHECK(all_quiet(g));
}

TEST_CASE("anonymous messages and exits or downs not sent by the actor they name change nothing") {
  // CAF 0.17 delivers a remote node's anonymous message without a sender,
  // and an exit or down message with any source address; in-process, an
  // anonymous message is what a stranger's looks like.
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto h = open_room(g, 11);
  REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
  auto& dmgr = g.decode[0]->manager();
  auto& pmgr = g.prefill[0]->manager();
  auto before = stats_of(*g.decode[0]).stranger_messages;
  kv_transfer_error forged{11, "forged", true, 0};
  caf::anon_send(dmgr, room_failed{11, forged, true});
  caf::anon_send(pmgr, room_failed{11, forged, false, g.decode[0]->ref().id});
  caf::anon_send(dmgr, room_committed{11});
  // A kill that names the manager itself, and the peer "lost".
  caf::anon_send_exit(dmgr, caf::exit_reason::kill);
  caf::anon_send_exit(pmgr, caf::exit_reason::kill);
  caf::anon_send(dmgr, caf::down_msg{pmgr.address(), caf::exit_reason::kill});
  caf::scoped_actor stranger{g.rt.system()};
  stranger->send(dmgr, caf::down_msg{pmgr.address(), caf::exit_reason::kill});
  drive_room(g, h, 11, {0, 1}, {2, 3}, 0, 1);
  REQUIRE(reaches(h.receivers[0], kv_poll::success));
  REQUIRE(reaches(h.senders[0], kv_poll::success));
  std::string why;
  CHECK(g.decode_cache(0).check_room(key(11, 0), {2, 3}, 1, &why));
  INFO(why);
  CHECK(stats_of(*g.decode[0]).stranger_messages >= before + 2);
  CHECK(stats_of(*g.prefill[0]).origin_failures == 0);
}

TEST_CASE("each timeout fires in its own state") {
  room_timeouts fast{150, 150, 150};
  SECTION("prefill bootstrapping: no decode destination ever registers") {
    group::options opt;
    opt.tp = 1;
    opt.prefill_timeouts = fast;
    group g{opt};
    auto s = g.prefill[0]->make_sender(1);
    REQUIRE(s);
    REQUIRE(reaches(*s, kv_poll::failed, 3000ms));
    CHECK(s->failure()->failure_reason.find("timed out in bootstrapping") != std::string::npos);
    CHECK_FALSE(s->failure()->is_from_another_rank);
  }
  SECTION("decode bootstrapping: the prefill group never registers") {
    group::options opt;
    opt.tp = 1;
    opt.decode_timeouts = fast;
    group g{opt};
    auto r = g.decode[0]->make_receiver(2, /*prefill_dp_rank=*/5);
    REQUIRE(r);
    REQUIRE(reaches(*r, kv_poll::failed, 3000ms));
    CHECK(r->failure()->failure_reason.find("timed out in bootstrapping") != std::string::npos);
    CHECK(r->failure()->failure_reason.find("prefill ranks not resolved") != std::string::npos);
  }
  SECTION("prefill waiting_for_input: init never comes; decode learns it") {
    group::options opt;
    opt.tp = 1;
    opt.prefill_timeouts = fast;
    group g{opt};
    auto h = open_room(g, 3);
    REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[0].init({1, 2}, 0));
    REQUIRE(reaches(h.senders[0], kv_poll::failed, 3000ms));
    CHECK(h.senders[0].failure()->failure_reason.find("timed out in waiting_for_input") != std::string::npos);
    REQUIRE(reaches(h.receivers[0], kv_poll::failed));
    CHECK(h.receivers[0].failure()->is_from_another_rank);
  }
  SECTION("decode waiting_for_input: data never arrives") {
    group::options opt;
    opt.tp = 1;
    opt.decode_timeouts = room_timeouts{5000, 150, 5000};
    group g{opt};
    auto h = open_room(g, 4);
    REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[0].init({1, 2}, 0));
    REQUIRE(reaches(h.receivers[0], kv_poll::failed, 3000ms));
    auto err = h.receivers[0].failure();
    CHECK(err->failure_reason.find("timed out in waiting_for_input") != std::string::npos);
    CHECK(err->failure_reason.find("no data arrived") != std::string::npos);
    CHECK_FALSE(err->is_from_another_rank);
    REQUIRE(reaches(h.senders[0], kv_poll::failed));
    CHECK(h.senders[0].failure()->origin_rank == g.decode[0]->ref().id);
  }
  SECTION("transferring: a stalled transfer times out instead of hanging") {
    group::options opt;
    opt.tp = 1;
    opt.prefill_timeouts = room_timeouts{5000, 5000, 150};
    opt.prefill0_faults.rooms = {5};
    opt.prefill0_faults.point = fault_point::stall;
    group g{opt};
    auto h = open_room(g, 5);
    drive_room(g, h, 5, {0, 1}, {0, 1}, 0, 0);
    REQUIRE(reaches(h.receivers[0], kv_poll::failed, 3000ms));
    REQUIRE(reaches(h.senders[0], kv_poll::failed));
    auto err = h.senders[0].failure();
    CHECK((err->failure_reason.find("timed out in transferring") != std::string::npos
           || err->failure_reason.find("did not complete within") != std::string::npos));
    CHECK(h.receivers[0].failure()->origin_rank == g.prefill[0]->ref().id);
  }
}

TEST_CASE("abort from either side reaches the other at once") {
  group::options opt;
  opt.tp = 2;
  group g{opt};
  SECTION("prefill aborts") {
    auto h = open_room(g, 31);
    REQUIRE(reaches(h.senders[1], kv_poll::bootstrapping));
    REQUIRE_FALSE(h.senders[1].abort("request cancelled"));
    for (auto& r : h.receivers) {
      REQUIRE(reaches(r, kv_poll::failed, 1000ms));
      auto err = r.failure();
      CHECK(err->failure_reason == "aborted by prefill scheduler: request cancelled");
      CHECK(err->origin_rank == g.prefill[1]->ref().id);
      CHECK(err->is_from_another_rank);
    }
    REQUIRE(reaches(h.senders[0], kv_poll::failed, 1000ms));
    CHECK_FALSE(h.senders[1].failure()->is_from_another_rank);
  }
  SECTION("decode aborts") {
    auto h = open_room(g, 32);
    REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[0].abort("client disconnected"));
    for (auto& s : h.senders) {
      REQUIRE(reaches(s, kv_poll::failed, 1000ms));
      CHECK(s.failure()->failure_reason == "aborted by decode scheduler: client disconnected");
    }
    REQUIRE(reaches(h.receivers[1], kv_poll::failed, 1000ms));
  }
}

TEST_CASE("a decode abort before any prefill opened the room concludes at once, fenced") {
  // The prefill ranks hold destinations parked for a room they have not
  // opened; the decider decides the abort for the unopened room within its
  // grace and refuses those destinations, fence included, so the decode
  // publishes Failed long before the prefill's bootstrap deadline (60 s
  // here; the wait below is bounded well under it), and a sender opened
  // afterwards finds the decision and writes nothing.
  group::options opt;
  opt.tp = 2;
  opt.prefill_timeouts = room_timeouts{60'000, 60'000, 60'000};
  opt.decode_timeouts = room_timeouts{60'000, 60'000, 60'000};
  group g{opt};
  std::vector<kv_receiver> rs;
  for (auto& r : g.decode) {
    auto h = r->make_receiver(41);
    REQUIRE(h);
    rs.push_back(*h);
  }
  for (auto& r : rs) {
    REQUIRE(reaches(r, kv_poll::waiting_for_input));
    REQUIRE_FALSE(r.init({1, 2, 3}, 0));
  }
  REQUIRE_FALSE(rs[0].abort("client disconnected"));
  for (auto& r : rs) {
    REQUIRE(reaches(r, kv_poll::failed, 20'000ms));
    CHECK(r.failure()->failure_reason == "aborted by decode scheduler: client disconnected");
  }
  auto s = g.prefill[0]->make_sender(41);
  REQUIRE(s);
  REQUIRE(reaches(*s, kv_poll::failed));
  for (auto& r : rs)
    r.clear();
  s->clear();
}

TEST_CASE("out-of-range destination indices fail the room with a clear reason and write nothing") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  g.decode_cache(0).fill(0x5A);
  SECTION("caught by the decode rank's own check") {
    auto h = open_room(g, 41);
    REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
    REQUIRE_FALSE(h.receivers[0].init({0, 32}, 0));
    REQUIRE(reaches(h.receivers[0], kv_poll::failed));
    CHECK(h.receivers[0].failure()->failure_reason.find("destination page index 32 out of range [0, 32)") != std::string::npos);
    REQUIRE(reaches(h.senders[0], kv_poll::failed));
  }
  SECTION("a destination crafted past the decode check is refused by the prefill planner") {
    auto s = g.prefill[0]->make_sender(42);
    REQUIRE(s);
    // A peer that skips validation: indices far outside the decode buffers.
    auto catcher = g.rt.system().spawn([](caf::event_based_actor*) -> caf::behavior {
      return {[](const transfer_started&) {}, [](const transfer_done&) {}, [](const room_failed&) {}};
    });
    dst_info info;
    info.room = 42;
    info.decode_rank = g.decode[0]->ref();
    info.decode_room = catcher;
    info.kv_indices = {1, 1'000'000};
    info.aux_index = 0;
    caf::scoped_actor peer{g.rt.system()};
    peer->send(g.prefill[0]->manager(), info);
    REQUIRE(reaches(*s, kv_poll::waiting_for_input));
    g.prefill_cache(0).write_room(42, {0, 1}, 0);
    REQUIRE_FALSE(s->init(2, 0));
    REQUIRE_FALSE(s->send({0, 1}, true));
    REQUIRE(reaches(*s, kv_poll::failed));
    auto err = s->failure();
    CHECK(err->failure_reason.find("destination page index 1000000 out of range") != std::string::npos);
    CHECK(g.decode_cache(0).count_changed_outside({}, -1, 0x5A) == 0);
    caf::anon_send_exit(catcher, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE("API misuse returns a clear error or fails only that room") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto bystander = open_room(g, 100);
  auto h = open_room(g, 101);
  auto& s = h.senders[0];
  // Prefill leaves Bootstrapping once decode's init delivered the destination.
  REQUIRE(reaches(h.receivers[0], kv_poll::waiting_for_input));
  REQUIRE_FALSE(h.receivers[0].init({1, 2}, 0));
  REQUIRE(reaches(s, kv_poll::waiting_for_input));
  CHECK(s.send({0}, false) == make_error(errc::not_initialized));
  REQUIRE_FALSE(s.init(2, 0));
  CHECK(s.init(2, 0) == make_error(errc::already_initialized));
  CHECK(g.prefill[0]->make_sender(101).error() == make_error(errc::duplicate_room));
  CHECK(g.decode[0]->make_sender(102).error() == make_error(errc::invalid_argument));
  CHECK(g.prefill[0]->make_receiver(102).error() == make_error(errc::invalid_argument));
  CHECK(g.prefill[0]->sender(999).error() == make_error(errc::unknown_room));
  CHECK(g.decode[0]->receiver(101));
  // More indices than declared: refused and the room fails with the reason.
  CHECK(s.send({0, 1, 2}, true) == make_error(errc::too_many_indices));
  REQUIRE(reaches(s, kv_poll::failed));
  CHECK(s.failure()->failure_reason.find("too many KV indices: 3 sent, 2 declared") != std::string::npos);
  // On a concluded room a call does nothing and is counted: the outcome
  // is poll()'s and failure()'s to tell (SGLang's scheduler catches nothing).
  auto late = g.prefill[0]->calls_after_conclusion();
  CHECK_FALSE(s.send({0}, true));
  CHECK_FALSE(s.abort());
  CHECK(g.prefill[0]->calls_after_conclusion() == late + 2);
  CHECK(s.failure()->failure_reason.find("too many KV indices") != std::string::npos);
  REQUIRE(reaches(h.receivers[0], kv_poll::failed));
  REQUIRE_FALSE(s.clear());
  // After clear the scheduler holds a dead handle: that is its own mistake.
  CHECK(s.send({0}, true) == make_error(errc::room_cleared));
  CHECK(s.init(1, 0) == make_error(errc::room_cleared));
  CHECK(s.abort() == make_error(errc::room_cleared));
  // The other room is untouched and still completes.
  drive_room(g, bystander, 100, {4, 5}, {6, 7}, 1, 1);
  CHECK(reaches(bystander.receivers[0], kv_poll::success));
  CHECK(reaches(bystander.senders[0], kv_poll::success));
  // A rank refuses rooms beyond its limit.
  group::options small;
  small.tp = 1;
  small.max_rooms = 2;
  group g2{small};
  REQUIRE(g2.prefill[0]->make_sender(1));
  REQUIRE(g2.prefill[0]->make_sender(2));
  CHECK(g2.prefill[0]->make_sender(3).error() == make_error(errc::limit_reached));
}

TEST_CASE("bad rank configurations are refused with the field named") {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  rank_config cfg;
  auto r = rt.add_rank(cfg);
  REQUIRE_FALSE(r);
  CHECK(describe(r.error()).find("no KV buffers") != std::string::npos);
  host_kv_cache cache{small_shape()};
  cfg.memory = cache.layout();
  cfg.tp_rank = 2;
  cfg.tp_size = 2;
  CHECK(describe(rt.add_rank(cfg).error()).find("tp_rank 2") != std::string::npos);
  cfg.tp_rank = 0;
  cfg.dp_rank = 2;
  cfg.dp_size = 2;
  CHECK(describe(rt.add_rank(cfg).error()).find("dp_rank 2 outside [0, dp_size 2)") != std::string::npos);
  cfg.dp_rank = 0;
  cfg.dp_size = 0;
  cfg.memory.kv[0].page_size_bytes = 100;
  CHECK(describe(rt.add_rank(cfg).error()).find("not a multiple") != std::string::npos);
  cfg.memory = cache.layout();
  cfg.transport = "smoke-signals";
  CHECK(describe(rt.add_rank(cfg).error()).find("smoke-signals") != std::string::npos);
  cfg.transport = "local";
  // A parallel layout must describe the registered buffers: 4 buffers are
  // K and V of 2 layers, 256 B pages are 2 tokens x 1 head x 64 x 2 B.
  parallel_layout x;
  x.tp_size = 2;
  x.layers = 2;
  x.total_kv_heads = 2;
  x.head_dim = 64;
  x.bytes_per_element = 2;
  x.tokens_per_page = 2;
  cfg.parallel = x;
  CHECK(rt.add_rank(cfg));
  cfg.parallel->tokens_per_page = 4;
  CHECK(describe(rt.add_rank(cfg).error()).find("pages of 512 B") != std::string::npos);
  cfg.parallel->tokens_per_page = 2;
  cfg.parallel->layers = 3;
  CHECK(describe(rt.add_rank(cfg).error()).find("3 layers need 6 KV buffers") != std::string::npos);
  cfg.parallel->layers = 2;
  cfg.parallel->tp_rank = 1;
  CHECK(describe(rt.add_rank(cfg).error()).find("TP rank 1 of 2") != std::string::npos);
  cfg.parallel->tp_rank = 0;
  cfg.parallel->total_kv_heads = 3;
  CHECK(describe(rt.add_rank(cfg).error()).find("do not split evenly") != std::string::npos);
}

TEST_CASE("declared parallel layouts: fitting ranks move rooms byte-exact, a misfit is refused at registration") {
  runtime rt{runtime_options{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"}};
  host_kv_cache src{small_shape()}, dst{small_shape()}, odd{small_shape()};
  // 4 buffers of 256 B pages: K and V of 2 layers, 2 tokens x 1 head x 64 x 2 B.
  parallel_layout x;
  x.layers = 2;
  x.total_kv_heads = 1;
  x.head_dim = 64;
  x.bytes_per_element = 2;
  x.tokens_per_page = 2;
  rank_config pc, dc;
  pc.side = role::prefill;
  pc.memory = src.layout();
  pc.parallel = x;
  dc.side = role::decode;
  dc.memory = dst.layout();
  dc.parallel = x;
  auto p = rt.add_rank(pc);
  auto d = rt.add_rank(dc);
  REQUIRE(p);
  REQUIRE(d);
  // Another head_dim (4 tokens x 32 x 2 B: the same page size) does not fit.
  rank_config bad = dc;
  bad.dp_rank = 1;
  bad.memory = odd.layout();
  bad.parallel->head_dim = 32;
  bad.parallel->tokens_per_page = 4;
  auto refused = rt.add_rank(bad);
  REQUIRE_FALSE(refused);
  CHECK(describe(refused.error()).find("KV shape differs") != std::string::npos);
  // Token-major pages against head-major ones on one side: one side's ranks
  // share one page order (across the sides, any two map).
  bad = dc;
  bad.dp_rank = 1;
  bad.memory = odd.layout();
  bad.parallel->order = page_order::nhd;
  refused = rt.add_rank(bad);
  REQUIRE_FALSE(refused);
  CHECK(describe(refused.error()).find("on one side") != std::string::npos);
  auto s = (*p)->make_sender(3);
  auto r = (*d)->make_receiver(3);
  REQUIRE(s);
  REQUIRE(r);
  src.write_room(3, {1, 2}, 0);
  REQUIRE(reaches(*r, kv_poll::waiting_for_input));
  REQUIRE_FALSE(r->init({5, 6}, 1));
  REQUIRE(reaches(*s, kv_poll::waiting_for_input));
  REQUIRE_FALSE(s->init(2, 0));
  REQUIRE_FALSE(s->send({1, 2}, true));
  REQUIRE(reaches(*r, kv_poll::success));
  std::string why;
  CHECK(dst.check_room(3, {5, 6}, 1, &why));
  INFO(why);
  (void) s->clear();
  (void) r->clear();
}

TEST_CASE("the control door ends with its runtime even while someone holds its handle") {
  // CAF 0.17's middleman actor ignores every exit but kill: a door told to
  // shut down lived on while a handle to it remained, and the actor system's
  // destructor waited for its thread forever.
  runtime_options opts;
  opts.network = true;
  opts.log_level = "off";
  caf::actor_system_config cfg;
  prepare_config(cfg, opts);
  caf::actor_system sys{cfg};
  caf::io::middleman_actor held;
  {
    runtime rt{sys, 16, deployment_secret{"a secret of a test deployment"}};
    held = detail::find_control_door(sys);
    REQUIRE(held);
  }
  caf::scoped_actor self{sys};
  self->monitor(held);
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds(5)) >> [] {});
  CHECK(down);
}

TEST_CASE("a networked rank publishes its control endpoint and closes it when it goes") {
  runtime_options opts{"central", 0, std::getenv("KVROOM_TEST_LOG") ? std::getenv("KVROOM_TEST_LOG") : "off"};
  opts.network = true;
  opts.secret = deployment_secret{"a secret of a test deployment"};
  runtime rt{opts};
  host_kv_cache cache{small_shape()};
  rank_config cfg;
  cfg.memory = cache.layout();
  cfg.network = true;
  std::string addr;
  {
    auto r = rt.add_rank(cfg);
    REQUIRE(r);
    addr = (*r)->control_address();
    REQUIRE(addr.rfind("127.0.0.1:", 0) == 0);
    auto stats = (*r)->stats();
    REQUIRE(stats);
    CHECK(stats->stranger_messages == 0);
  }
  // The port is free again: a plain socket can bind it.
  auto port = static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  bool bound = false;
  for (int i = 0; i < 100 && !bound; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (!bound)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(bound);
}

TEST_CASE("an actor-based scheduler can subscribe to room events") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  caf::scoped_actor listener{g.rt.system()};
  auto s = g.prefill[0]->make_sender(61, caf::actor_cast<caf::actor>(listener));
  REQUIRE(s);
  auto r = g.decode[0]->make_receiver(61);
  REQUIRE(r);
  REQUIRE(reaches(*r, kv_poll::waiting_for_input));
  REQUIRE_FALSE(r->init({0}, 0));
  REQUIRE_FALSE(s->init(1, 0));
  REQUIRE_FALSE(s->send({0}, true));
  std::vector<kv_poll> seen;
  for (int i = 0; i < 10 && (seen.empty() || !is_terminal(seen.back())); ++i)
    listener->receive([&](const room_event& ev) { seen.push_back(ev.state); },
                      caf::after(2s) >> [] {});
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back() == kv_poll::success);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
}

TEST_CASE("a room actor killed mid-room fails the room on every rank") {
  group::options opt;
  opt.tp = 2;
  group g{opt};
  auto h = open_room(g, 71);
  for (auto& r : h.receivers) {
    REQUIRE(reaches(r, kv_poll::waiting_for_input));
    REQUIRE_FALSE(r.init({1}, 0));
  }
  REQUIRE(reaches(h.senders[0], kv_poll::waiting_for_input));
  auto victim = g.prefill[0]->room_actor(71);
  REQUIRE(victim);
  caf::scoped_actor killer{g.rt.system()};
  killer->send_exit(victim, caf::exit_reason::kill);
  REQUIRE(reaches(h.senders[0], kv_poll::failed));
  auto origin = h.senders[0].failure();
  REQUIRE(origin);
  CHECK_FALSE(origin->is_from_another_rank);
  CHECK(origin->failure_reason.find("room actor on prefill[dp0,tp0]#0 exited") != std::string::npos);
  for (auto* hs : {&h.receivers[0], &h.receivers[1]}) {
    REQUIRE(reaches(*hs, kv_poll::failed));
    CHECK(hs->failure()->origin_rank == g.prefill[0]->ref().id);
  }
  REQUIRE(reaches(h.senders[1], kv_poll::failed));
  CHECK(h.senders[1].failure()->is_from_another_rank);
}

TEST_CASE("10,000 rooms through one engine conclude with no leaked room actor or failure record") {
  group::options opt;
  opt.tp = 1;
  group g{opt};
  auto& sys = g.rt.system();
  auto actors_before = sys.registry().running();
  constexpr room_id rooms = 10'000;
  constexpr size_t window = 256;
  std::deque<std::pair<room_id, room_handles>> in_flight;
  size_t succeeded = 0, failed = 0;
  room_id next = 1;
  auto step = [&](room_id room, room_handles& h) {
    // Drive each room without blocking: one step per call.
    auto& r = h.receivers[0];
    auto& s = h.senders[0];
    std::vector<int64_t> page{static_cast<int64_t>(room % 32)};
    // init() refuses a second call, so each step happens once.
    if (r.poll() == kv_poll::waiting_for_input)
      (void) r.init(page, static_cast<int64_t>(room % 8));
    if (s.poll() == kv_poll::waiting_for_input && s.init(1, 0) == caf::none)
      (void) s.send(page, true);
    return is_terminal(r.poll()) && is_terminal(s.poll());
  };
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while ((next <= rooms || !in_flight.empty())
         && std::chrono::steady_clock::now() < deadline) {
    while (next <= rooms && in_flight.size() < window) {
      in_flight.emplace_back(next, open_room(g, next));
      ++next;
    }
    for (auto i = in_flight.begin(); i != in_flight.end();) {
      if (step(i->first, i->second)) {
        auto ok = i->second.receivers[0].poll() == kv_poll::success;
        (ok ? succeeded : failed) += 1;
        if (!ok) {
          (void) i->second.receivers[0].failure();
          (void) i->second.senders[0].failure();
        }
        REQUIRE_FALSE(i->second.receivers[0].clear());
        REQUIRE_FALSE(i->second.senders[0].clear());
        i = in_flight.erase(i);
      } else {
        ++i;
      }
    }
    std::this_thread::yield();
  }
  CHECK(succeeded == rooms);
  CHECK(failed == 0);
  CHECK(g.prefill[0]->open_rooms() == 0);
  CHECK(g.decode[0]->open_rooms() == 0);
  CHECK(all_quiet(g));
  CHECK(eventually([&] { return sys.registry().running() <= actors_before; }));
  INFO("running actors before " << actors_before << ", after " << sys.registry().running());
}

TEST_CASE("a page reused after Failed never changes again, on every transport") {
  for (auto transport : {"local", "shm", "tcp"}) {
    INFO("transport " << transport);
    CHECK(reused_pages_stay_intact(transport, true));
  }
  // The check can fail: without the fence room 7's late bytes overwrite the
  // reused pages.
  CHECK_FALSE(reused_pages_stay_intact("local", false));
}

namespace {

/// Runs `rooms` one-TP rooms from prefill to decode over tcp on two
/// loopback addresses; returns each room's decode state and checks the
/// bytes of those that succeeded.
std::vector<kv_poll> over_two_paths(group& g, room_id first, int rooms) {
  std::vector<kv_poll> out;
  for (room_id room = first; room < first + static_cast<room_id>(rooms); ++room) {
    auto h = open_room(g, room);
    std::vector<int64_t> src{0, 1, 2, 3}, dst{7, 5, 6, 4};
    drive_room(g, h, room, src, dst, 1, 2);
    REQUIRE(concludes(h.receivers[0]));
    REQUIRE(concludes(h.senders[0]));
    auto st = h.receivers[0].poll();
    if (st == kv_poll::success) {
      std::string why;
      CHECK(g.decode_cache(0).check_room(key(room, 0), dst, 2, &why));
      INFO(why);
    }
    out.push_back(st);
    REQUIRE_FALSE(h.receivers[0].clear());
    REQUIRE_FALSE(h.senders[0].clear());
  }
  return out;
}

group::options two_paths() {
  group::options opt;
  opt.tp = 1;
  opt.transport = "tcp";
  opt.tcp_host = "127.0.0.1,127.0.0.2";
  // Small slices, so a room's batch spreads over both paths.
  opt.paths.slice_bytes = 512;
  return opt;
}

} // namespace

TEST_CASE("a rank on two tcp addresses offers both, and a room's batch spreads over them") {
  group g{two_paths()};
  auto eps = g.decode[0]->data_plane_address("tcp");
  CHECK(eps.rfind("127.0.0.1:", 0) == 0);
  for (auto st : over_two_paths(g, 1, 5))
    CHECK(st == kv_poll::success);
  auto paths = g.prefill[0]->paths();
  REQUIRE(paths.size() == 2);
  CHECK(paths[0].address.rfind("127.0.0.1:", 0) == 0);
  CHECK(paths[1].address.rfind("127.0.0.2:", 0) == 0);
  CHECK(g.prefill[0]->metrics().paths.sliced > 0);
}

TEST_CASE("a broken path costs no room: its batches move to the other path, byte-exact") {
  auto opt = two_paths();
  // Every batch on 127.0.0.2 lands, then reports failure (the worst case
  // for a retry: the copy on the other path must not matter).
  opt.prefill0_faults.paths = {"127.0.0.2:"};
  opt.prefill0_faults.path_point = fault_point::after_post;
  group g{opt};
  for (auto st : over_two_paths(g, 1, 12))
    CHECK(st == kv_poll::success);
  auto m = g.prefill[0]->metrics();
  uint64_t retries = 0;
  for (auto x : m.paths.retries)
    retries += x;
  CHECK(retries > 0);
  CHECK(m.paths.rests >= 1);
  bool broken_rests = false;
  for (auto& p : g.prefill[0]->paths())
    if (p.address.rfind("127.0.0.2:", 0) == 0)
      broken_rests = p.state != path_state::healthy && p.errors >= 3
                     && p.last_error.find("injected") != std::string::npos;
  CHECK(broken_rests);
  CHECK(all_quiet(g));
}

TEST_CASE("with every path broken a room fails once, naming both paths, with one origin") {
  auto opt = two_paths();
  opt.prefill0_faults.paths = {"tcp"};
  group g{opt};
  auto h = open_room(g, 2);
  drive_room(g, h, 2, {0, 1}, {3, 4}, 1, 2);
  REQUIRE(concludes(h.receivers[0]));
  REQUIRE(concludes(h.senders[0]));
  CHECK(h.receivers[0].poll() == kv_poll::failed);
  auto s = h.senders[0].failure();
  auto r = h.receivers[0].failure();
  REQUIRE(s);
  REQUIRE(r);
  CHECK(s->origin_rank == g.prefill[0]->ref().id);
  CHECK(r->origin_rank == g.prefill[0]->ref().id);
  CHECK_FALSE(s->is_from_another_rank);
  CHECK(r->is_from_another_rank);
  CHECK(s->failure_reason.find("no path left") != std::string::npos);
  CHECK(s->failure_reason.find("127.0.0.1:") != std::string::npos);
  CHECK(s->failure_reason.find("127.0.0.2:") != std::string::npos);
  CHECK(r->failure_reason == s->failure_reason);
  REQUIRE_FALSE(h.receivers[0].clear());
  REQUIRE_FALSE(h.senders[0].clear());
  CHECK(all_quiet(g));
}

TEST_CASE("with the integrity check on, every part is hashed on both sides and rooms succeed") {
  for (auto transport : {"local", "tcp"}) {
    INFO(transport);
    group::options opt;
    opt.transport = transport;
    opt.integrity = integrity_mode::xxh3;
    group g{opt};
    for (room_id room = 1; room <= 6; ++room) {
      auto h = open_room(g, room);
      drive_room(g, h, room, {0, 1, 2}, {5, 3, 4}, 1, 2, room % 2 + 1);
      for (auto& r : h.receivers)
        REQUIRE(concludes(r));
      for (auto& s : h.senders)
        REQUIRE(concludes(s));
      for (int t = 0; t < 2; ++t) {
        CHECK(h.receivers[static_cast<size_t>(t)].poll() == kv_poll::success);
        std::string why;
        CHECK(g.decode_cache(t).check_room(key(room, t), {5, 3, 4}, 2, &why));
        INFO(why);
      }
      for (auto& r : h.receivers)
        REQUIRE_FALSE(r.clear());
      for (auto& s : h.senders)
        REQUIRE_FALSE(s.clear());
    }
    CHECK(all_quiet(g));
  }
}

namespace {

/// Room 7 of a 1P x 1D group gets one byte flipped on its way (tcp);
/// returns the decode rank's outcome and checks the bytes of room 8.
struct flip_outcome {
  kv_poll decode = kv_poll::bootstrapping;
  kv_poll prefill = kv_poll::bootstrapping;
  std::optional<kv_transfer_error> decode_error, prefill_error;
  bool landed_intact = false;
  rank_id decode_id = -1;
};

flip_outcome flip_room_7(integrity_mode integrity) {
  group::options opt;
  opt.tp = 1;
  opt.transport = "tcp";
  opt.integrity = integrity;
  opt.prefill0_faults.targeted = {room_fault{7, fault_point::flip}};
  group g{opt};
  flip_outcome out;
  out.decode_id = g.decode[0]->ref().id;
  auto h = open_room(g, 7);
  drive_room(g, h, 7, {0, 1}, {3, 4}, 1, 2);
  REQUIRE(concludes(h.receivers[0]));
  REQUIRE(concludes(h.senders[0]));
  out.decode = h.receivers[0].poll();
  out.prefill = h.senders[0].poll();
  if (out.decode == kv_poll::failed)
    out.decode_error = *h.receivers[0].failure();
  if (out.prefill == kv_poll::failed)
    out.prefill_error = *h.senders[0].failure();
  std::string why;
  out.landed_intact = g.decode_cache(0).check_room(key(7, 0), {3, 4}, 2, &why);
  REQUIRE_FALSE(h.receivers[0].clear());
  REQUIRE_FALSE(h.senders[0].clear());
  // The next room is untouched.
  auto h8 = open_room(g, 8);
  drive_room(g, h8, 8, {5, 6}, {1, 2}, 3, 4);
  REQUIRE(concludes(h8.receivers[0]));
  CHECK(h8.receivers[0].poll() == kv_poll::success);
  CHECK(g.decode_cache(0).check_room(key(8, 0), {1, 2}, 4, &why));
  REQUIRE_FALSE(h8.receivers[0].clear());
  REQUIRE(concludes(h8.senders[0]));
  REQUIRE_FALSE(h8.senders[0].clear());
  CHECK(all_quiet(g));
  return out;
}

} // namespace

TEST_CASE("a byte flipped on its way fails the room with cause integrity, decode its one origin") {
  auto x = flip_room_7(integrity_mode::xxh3);
  CHECK(x.decode == kv_poll::failed);
  CHECK(x.prefill == kv_poll::failed);
  REQUIRE(x.decode_error);
  REQUIRE(x.prefill_error);
  CHECK(x.decode_error->origin_rank == x.decode_id);
  CHECK(x.prefill_error->origin_rank == x.decode_id);
  CHECK_FALSE(x.decode_error->is_from_another_rank);
  CHECK(x.prefill_error->is_from_another_rank);
  CHECK(x.decode_error->cause == failure_cause::integrity);
  CHECK(x.prefill_error->cause == failure_cause::integrity);
  CHECK(x.decode_error->failure_reason.find("does not match") != std::string::npos);
  CHECK(x.prefill_error->failure_reason == x.decode_error->failure_reason);
}

TEST_CASE("without the integrity check the same flip lands silently (the injection is real)") {
  auto x = flip_room_7(integrity_mode::off);
  CHECK(x.decode == kv_poll::success);
  CHECK(x.prefill == kv_poll::success);
  CHECK_FALSE(x.landed_intact);
}

TEST_CASE("a rank whose integrity check differs from its deployment's is refused at registration") {
  runtime rt{runtime_options{"central", 0, "off"}};
  host_kv_cache a{small_shape()}, b{small_shape()};
  rank_config pc;
  pc.side = role::prefill;
  pc.memory = a.layout();
  pc.integrity = integrity_mode::xxh3;
  auto p = rt.add_rank(pc);
  REQUIRE(p);
  rank_config dc;
  dc.side = role::decode;
  dc.memory = b.layout();
  auto d = rt.add_rank(dc);
  REQUIRE_FALSE(d);
  CHECK(describe(d.error()).find("integrity") != std::string::npos);
}
