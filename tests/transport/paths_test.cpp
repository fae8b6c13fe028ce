// The path layer without sockets: path health (rest, probe, doubling),
// slicing, and the multipath backend over a scripted inner backend whose
// paths fail as a test says.

#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/paths/multipath_backend.hpp"
#include "kvroom/transport/router/router_backend.hpp"
#include "kvroom/transport/select.hpp"

using namespace kvroom;

namespace {

path_rules rules() {
  path_rules r;
  r.errors_to_rest = 3;
  r.error_window_ms = 1000;
  r.first_rest_ms = 100;
  r.max_rest_ms = 400;
  return r;
}

} // namespace

TEST_CASE("a path rests after repeated errors, then carries one probe before more") {
  path_health h;
  auto r = rules();
  CHECK(h.state(0) == path_state::healthy);
  CHECK_FALSE(h.failed(10, r, "reset"));
  CHECK_FALSE(h.failed(20, r, "reset"));
  CHECK(h.available(20));
  CHECK(h.failed(30, r, "reset")); // the third within the window
  CHECK(h.state(31) == path_state::resting);
  CHECK_FALSE(h.available(129));
  CHECK(h.last_error() == "reset");
  // The rest ends: one probe at a time.
  CHECK(h.state(130) == path_state::probing);
  CHECK(h.available(130));
  h.take(130);
  CHECK_FALSE(h.available(131));
  h.succeeded(140);
  CHECK(h.state(140) == path_state::healthy);
  CHECK(h.available(141));
}

TEST_CASE("errors spread wider than the window never rest a path") {
  path_health h;
  auto r = rules();
  for (uint64_t t = 0; t < 10'000; t += 600)
    CHECK_FALSE(h.failed(t, r, "flaky"));
  // On probation after each, until a batch lands.
  CHECK(h.state(10'000) == path_state::probing);
  h.take(10'000);
  CHECK_FALSE(h.available(10'000));
  h.succeeded(10'001);
  CHECK(h.state(10'001) == path_state::healthy);
}

TEST_CASE("a failed probe rests the path twice as long, up to the longest rest") {
  path_health h;
  auto r = rules();
  for (uint64_t t = 0; t < 3; ++t)
    h.failed(t, r, "down");
  CHECK(h.rest_ms() == 100);
  h.take(h.rest_until());
  CHECK(h.failed(h.rest_until(), r, "still down"));
  CHECK(h.rest_ms() == 200);
  h.take(h.rest_until());
  CHECK(h.failed(h.rest_until(), r, "still down"));
  CHECK(h.rest_ms() == 400);
  h.take(h.rest_until());
  CHECK(h.failed(h.rest_until(), r, "still down"));
  CHECK(h.rest_ms() == 400); // bounded
  // Proven, and healthy for longer than the longest rest: the next rest is
  // the first again.
  auto back = h.rest_until();
  h.take(back);
  h.succeeded(back);
  auto later = back + 1000;
  for (uint64_t t = 0; t < 3; ++t)
    h.failed(later + t, r, "down again");
  CHECK(h.rest_ms() == 100);
}

TEST_CASE("a batch sent to a resting path as the last resort does not extend its rest") {
  path_health h;
  auto r = rules();
  for (uint64_t t = 0; t < 3; ++t)
    h.failed(t, r, "down");
  auto until = h.rest_until();
  CHECK_FALSE(h.failed(50, r, "down"));
  CHECK(h.rest_until() == until);
}

TEST_CASE("slice_batch cuts a batch into equal byte shares, aux writes last in each") {
  write_batch b;
  b.room = 7;
  b.ops = {{0x1000, 0x9000, 300}, {0x2000, 0xa000, 300}, {0x3000, 0xb000, 100}};
  b.aux_ops = 1;
  auto xs = slice_batch(b, 2, 40);
  REQUIRE(xs.size() == 2);
  CHECK(xs[0].total_bytes() == 350);
  CHECK(xs[1].total_bytes() == 350);
  CHECK(xs[0].key == 40);
  CHECK(xs[1].key == 41);
  // The second op is split at its 50th byte.
  REQUIRE(xs[0].ops.size() == 2);
  CHECK(xs[0].ops[1].src_addr == 0x2000);
  CHECK(xs[0].ops[1].size_bytes == 50);
  REQUIRE(xs[1].ops.size() == 2);
  CHECK(xs[1].ops[0].src_addr == 0x2000 + 50);
  CHECK(xs[1].ops[0].dst_addr == 0xa000 + 50);
  CHECK(xs[1].ops[0].size_bytes == 250);
  CHECK(xs[0].aux_ops == 0);
  CHECK(xs[1].aux_ops == 1);
  CHECK(xs[1].ops.back().src_addr == 0x3000);
  // Every byte once, in order.
  uint64_t next = 0;
  for (auto& x : xs)
    for (auto& op : x.ops) {
      CHECK(x.room == 7);
      next += op.size_bytes;
    }
  CHECK(next == 700);
  // Never more slices than bytes.
  write_batch tiny;
  tiny.ops = {{1, 2, 2}};
  CHECK(slice_batch(tiny, 5, 1).size() == 2);
}

namespace {

/// An inner backend whose paths (endpoint addresses) do as the test says:
/// "up" completes batches (at once or on the next poll), "down" fails them
/// on poll, "dead" refuses the post, "refuse" has the receiver refuse.
class scripted_backend final : public backend {
public:
  std::map<std::string, std::string> mode;  // address -> up, down, dead, refuse
  bool async = true;
  std::vector<std::pair<std::string, write_batch>> posted;
  std::set<xfer_id> released;

  std::string name() const override {
    return "tcp";
  }
  backend_caps caps() const override {
    return {};
  }
  endpoint_desc endpoint() const override {
    return {"tcp", "me", 0, 1};
  }
  caf::expected<region_id> register_memory(const mem_desc&) override {
    return region_id{1};
  }
  caf::error deregister_memory(region_id) override {
    return caf::none;
  }
  post_result post(const write_batch& batch) override {
    auto& m = mode[batch.peer.address];
    posted.emplace_back(batch.peer.address, batch);
    if (m == "dead")
      return post_result::failed(make_error(errc::transport_error, "connect refused"));
    if (m == "bad")
      return post_result::failed(make_error(errc::not_registered, "outside memory"));
    if (m == "full")
      return post_result::would_block();
    if (!async && (m.empty() || m == "up"))
      return post_result::done();
    auto id = next_++;
    flight_[id] = batch.peer.address;
    return post_result::in_progress(id);
  }
  xfer_status poll(xfer_id id, std::string& reason) override {
    auto& m = mode[flight_[id]];
    if (m == "stall")
      return xfer_status::in_progress;
    if (m == "down" || m == "refuse") {
      reason = m == "down" ? "connection reset" : "refused by rank 2: not granted";
      return xfer_status::failed;
    }
    return xfer_status::done;
  }
  /// Groups that reached this backend whole (post_group forwarded).
  size_t groups = 0;
  /// Whether posts complete inside the call (a memcpy backend's answer).
  bool inline_posts = false;
  bool completes_inline(const write_batch&) const override {
    return inline_posts;
  }
  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override {
    ++groups;
    return backend::post_group(batches);
  }
  bool refused(xfer_id id) const override {
    auto i = flight_.find(id);
    return i != flight_.end() && mode.count(i->second) && mode.at(i->second) == "refuse";
  }
  void release(xfer_id id) override {
    released.insert(id);
  }

private:
  xfer_id next_ = 1;
  std::map<xfer_id, std::string> flight_;
};

struct rig {
  scripted_backend* inner;
  multipath_backend paths;

  explicit rig(path_options opts = {})
    : inner(new scripted_backend), paths(backend_ptr{inner}, opts) {
    // nop
  }

  static write_batch batch(uint64_t bytes, std::vector<std::string> addresses) {
    write_batch b;
    b.room = 9;
    b.peer = endpoint_desc{"tcp", addresses.front(), 0, 2};
    for (size_t i = 1; i < addresses.size(); ++i)
      b.alternates.push_back(endpoint_desc{"tcp", addresses[i], 0, 2});
    b.ops = {{0x10000, 0x20000, bytes}};
    return b;
  }

  /// Posts and polls until done or failed.
  xfer_status run(const write_batch& b, std::string& reason) {
    auto res = paths.post(b);
    if (res.status != xfer_status::in_progress) {
      reason = res.error ? describe(res.error) : "";
      return res.status;
    }
    for (int i = 0; i < 100; ++i) {
      auto st = paths.poll(res.id, reason);
      if (st != xfer_status::in_progress) {
        paths.release(res.id);
        return st;
      }
    }
    paths.release(res.id);
    return xfer_status::in_progress;
  }
};

} // namespace

TEST_CASE("a batch whose path fails moves to another path and succeeds") {
  rig r;
  r.inner->mode["a:1"] = "down";
  std::string why;
  CHECK(r.run(rig::batch(4096, {"a:1", "b:1"}), why) == xfer_status::done);
  REQUIRE(r.inner->posted.size() == 2);
  CHECK(r.inner->posted[0].first == "a:1");
  CHECK(r.inner->posted[1].first == "b:1");
  // The retry carries the same key: the receiver applies it at most once.
  CHECK(r.inner->posted[0].second.key != 0);
  CHECK(r.inner->posted[0].second.key == r.inner->posted[1].second.key);
  uint64_t retries = 0;
  for (auto x : r.paths.counters().retries)
    retries += x;
  CHECK(retries == 1);
}

TEST_CASE("a post refused by a dead path is retried at once on the next") {
  rig r;
  r.inner->mode["a:1"] = "dead";
  r.inner->async = false;
  std::string why;
  CHECK(r.run(rig::batch(4096, {"a:1", "b:1"}), why) == xfer_status::done);
  CHECK(r.inner->posted.size() == 2);
}

TEST_CASE("with every path failing, the batch fails naming each path and its reason") {
  rig r;
  r.inner->mode["a:1"] = "down";
  r.inner->mode["b:1"] = "dead";
  std::string why;
  CHECK(r.run(rig::batch(4096, {"a:1", "b:1"}), why) == xfer_status::failed);
  CHECK(why.find("no path left to rank 2") != std::string::npos);
  CHECK(why.find("tcp a:1: connection reset") != std::string::npos);
  CHECK(why.find("tcp b:1:") != std::string::npos);
  CHECK(why.find("connect refused") != std::string::npos);
  CHECK(r.paths.counters().exhausted == 1);
}

TEST_CASE("a batch the receiver refuses fails at once: no other path would take it") {
  rig r;
  r.inner->mode["a:1"] = "refuse";
  std::string why;
  CHECK(r.run(rig::batch(4096, {"a:1", "b:1"}), why) == xfer_status::failed);
  CHECK(r.inner->posted.size() == 1);
  CHECK(why.find("not granted") != std::string::npos);
  // The path is not blamed.
  for (auto& p : r.paths.paths())
    CHECK(p.errors == 0);
}

TEST_CASE("a batch outside registered memory fails at once on its first path") {
  rig r;
  r.inner->mode["a:1"] = "bad";
  std::string why;
  CHECK(r.run(rig::batch(4096, {"a:1", "b:1"}), why) == xfer_status::failed);
  CHECK(r.inner->posted.size() == 1);
}

TEST_CASE("a large batch is sliced over the healthy paths, each slice keyed") {
  path_options opts;
  opts.slice_bytes = 1024;
  rig r{opts};
  std::string why;
  CHECK(r.run(rig::batch(8192, {"a:1", "b:1"}), why) == xfer_status::done);
  REQUIRE(r.inner->posted.size() == 2);
  std::set<std::string> used;
  std::set<uint64_t> keys;
  for (auto& [addr, b] : r.inner->posted) {
    used.insert(addr);
    keys.insert(b.key);
    CHECK(b.total_bytes() == 4096);
    CHECK(b.alternates.empty());
  }
  CHECK(used.size() == 2);
  CHECK(keys.size() == 2);
  CHECK(r.paths.counters().sliced == 1);
}

TEST_CASE("a failed batch reports only once none of its slices moves (the fence holds)") {
  path_options opts;
  opts.slice_bytes = 1024;
  rig r{opts};
  r.inner->mode["a:1"] = "refuse";
  r.inner->mode["b:1"] = "stall";
  auto res = r.paths.post(rig::batch(8192, {"a:1", "b:1"}));
  REQUIRE(res.status == xfer_status::in_progress);
  std::string why;
  // a's slice was refused: the batch has failed, but b's slice still moves.
  for (int i = 0; i < 3; ++i)
    CHECK(r.paths.poll(res.id, why) == xfer_status::in_progress);
  r.inner->mode["b:1"] = "up";
  CHECK(r.paths.poll(res.id, why) == xfer_status::failed);
  CHECK(why.find("not granted") != std::string::npos);
  CHECK(r.paths.refused(res.id));
  r.paths.release(res.id);
  // Nothing was sent again after the refusal.
  CHECK(r.inner->posted.size() == 2);
}

TEST_CASE("a resting path is skipped while another is healthy, and probed when its rest ends") {
  path_options opts;
  opts.rules = rules();
  opts.rules.first_rest_ms = 60'000; // rests for the whole test
  rig r{opts};
  r.inner->mode["a:1"] = "down";
  std::string why;
  // Batches take turns starting on a and on b: six give a three errors.
  for (int i = 0; i < 6; ++i)
    CHECK(r.run(rig::batch(64, {"a:1", "b:1"}), why) == xfer_status::done);
  // Three errors: a rests, and the next batches go to b only.
  bool resting = false;
  for (auto& p : r.paths.paths())
    resting = resting || (p.address == "a:1" && p.state == path_state::resting);
  CHECK(resting);
  r.inner->posted.clear();
  for (int i = 0; i < 4; ++i)
    CHECK(r.run(rig::batch(64, {"a:1", "b:1"}), why) == xfer_status::done);
  REQUIRE(r.inner->posted.size() == 4);
  for (auto& [addr, b] : r.inner->posted)
    CHECK(addr == "b:1");
  CHECK(r.paths.counters().rests == 1);
}

TEST_CASE("the last path carries batches even while it rests") {
  path_options opts;
  opts.rules = rules();
  opts.rules.first_rest_ms = 60'000;
  rig r{opts};
  r.inner->mode["a:1"] = "down";
  std::string why;
  for (int i = 0; i < 3; ++i)
    CHECK(r.run(rig::batch(64, {"a:1"}), why) == xfer_status::failed);
  r.inner->mode["a:1"] = "up";
  CHECK(r.run(rig::batch(64, {"a:1"}), why) == xfer_status::done);
}

TEST_CASE("a farther transport carries the batch when every nearer path failed it") {
  rig r;
  r.inner->mode["v:1"] = "down";
  auto b = rig::batch(64, {"v:1"});
  b.peer.transport = "verbs";
  b.alternates.push_back(endpoint_desc{"tcp", "t:1", 0, 2});
  std::string why;
  CHECK(r.run(b, why) == xfer_status::done);
  uint64_t fallbacks = 0;
  for (auto x : r.paths.counters().fallbacks)
    fallbacks += x;
  CHECK(fallbacks == 1);
}

TEST_CASE("releasing a transfer early releases what still moves") {
  rig r;
  r.inner->mode["a:1"] = "stall";
  auto res = r.paths.post(rig::batch(64, {"a:1", "b:1"}));
  REQUIRE(res.status == xfer_status::in_progress);
  r.paths.release(res.id);
  CHECK(r.inner->released.size() == 1);
}

TEST_CASE("choose_paths lists the peer's other addresses, then farther network transports") {
  std::vector<endpoint_desc> mine{{"local", "1", 7, 1}, {"tcp", "10.0.0.1:1", 0, 1},
                                  {"tcp", "10.0.1.1:1", 0, 1}};
  std::vector<endpoint_desc> peer{{"local", "2", 8, 2}, {"tcp", "10.0.0.2:5", 0, 2},
                                  {"tcp", "10.0.1.2:5", 0, 2}};
  auto ps = choose_paths(peer, mine, "auto");
  REQUIRE(ps);
  REQUIRE(ps->size() == 2);
  CHECK((*ps)[0].address == "10.0.0.2:5");
  CHECK((*ps)[1].address == "10.0.1.2:5");
  // A same-process peer: local, with no fallback (its batches stay inline).
  std::vector<endpoint_desc> near{{"local", "2", 7, 2}, {"tcp", "10.0.0.2:5", 0, 2}};
  auto local = choose_paths(near, mine, "auto");
  REQUIRE(local);
  CHECK(local->size() == 1);
  CHECK(local->front().transport == "local");
  // verbs first, tcp behind it.
  std::vector<endpoint_desc> mine_v{{"verbs", "mlx5_0", 0, 1}, {"tcp", "10.0.0.1:1", 0, 1}};
  std::vector<endpoint_desc> peer_v{{"verbs", "mlx5_0", 0, 2}, {"verbs", "mlx5_1", 0, 2},
                                    {"tcp", "10.0.0.2:5", 0, 2}};
  auto v = choose_paths(peer_v, mine_v, "auto");
  REQUIRE(v);
  REQUIRE(v->size() == 3);
  CHECK((*v)[0].transport == "verbs");
  CHECK((*v)[1].address == "mlx5_1");
  CHECK((*v)[2].transport == "tcp");
  // Forced: that transport's paths only.
  auto forced = choose_paths(peer_v, mine_v, "tcp");
  REQUIRE(forced);
  CHECK(forced->size() == 1);
}

TEST_CASE("small batches take turns over the healthy paths") {
  rig r;
  std::string why;
  for (int i = 0; i < 4; ++i)
    CHECK(r.run(rig::batch(64, {"a:1", "b:1"}), why) == xfer_status::done);
  std::map<std::string, int> used;
  for (auto& [addr, b] : r.inner->posted)
    ++used[addr];
  CHECK(used["a:1"] == 2);
  CHECK(used["b:1"] == 2);
}

TEST_CASE("a path that pushes back hands the batch to another; all pushing back, it waits") {
  rig r;
  r.inner->mode["a:1"] = "full";
  std::string why;
  for (int i = 0; i < 3; ++i)
    CHECK(r.run(rig::batch(64, {"a:1", "b:1"}), why) == xfer_status::done);
  r.inner->mode["b:1"] = "full";
  CHECK(r.paths.post(rig::batch(64, {"a:1", "b:1"})).status == xfer_status::would_block);
  // Pushing back is no error: neither path is blamed.
  for (auto& p : r.paths.paths())
    CHECK(p.errors == 0);
}

TEST_CASE("a path with an error carries one batch at a time until one lands") {
  rig r;
  r.inner->mode["a:1"] = "down";
  std::string why;
  CHECK(r.run(rig::batch(64, {"a:1", "b:1"}), why) == xfer_status::done);
  r.inner->mode["a:1"] = "stall";
  r.inner->posted.clear();
  // a is on probation: of two batches in flight at once, at most one is on it.
  auto x = r.paths.post(rig::batch(64, {"a:1", "b:1"}));
  auto y = r.paths.post(rig::batch(64, {"a:1", "b:1"}));
  int on_a = 0;
  for (auto& [addr, b] : r.inner->posted)
    on_a += addr == "a:1" ? 1 : 0;
  CHECK(on_a <= 1);
  r.paths.release(x.id);
  r.paths.release(y.id);
}

namespace {

/// A part of one transport on one port: records what it was given.
class port_backend final : public backend {
public:
  explicit port_backend(std::string address) : address_(std::move(address)) {
  }
  std::vector<std::string> posted_to;
  std::vector<std::string> control_from;
  std::string name() const override {
    return "verbs";
  }
  backend_caps caps() const override {
    return {};
  }
  endpoint_desc endpoint() const override {
    return {"verbs", address_, 0, 1};
  }
  caf::expected<region_id> register_memory(const mem_desc&) override {
    return region_id{1};
  }
  caf::error deregister_memory(region_id) override {
    return caf::none;
  }
  post_result post(const write_batch& batch) override {
    posted_to.push_back(batch.peer.address);
    return post_result::done();
  }
  caf::error on_control(const transport_control& msg) override {
    control_from.push_back(msg.from_address);
    return caf::none;
  }

private:
  std::string address_;
};

} // namespace

TEST_CASE("several ports of one transport: one path each, a peer's port always on the same one") {
  auto* p0 = new port_backend("mlx5_0:1");
  auto* p1 = new port_backend("mlx5_1:1");
  std::vector<backend_ptr> parts;
  parts.emplace_back(p0);
  parts.emplace_back(p1);
  detail::router_backend ports{std::move(parts), {false, false}};
  CHECK(ports.name() == "verbs");
  REQUIRE(ports.endpoints().size() == 2);
  write_batch b;
  b.ops = {{1, 2, 3}};
  std::map<std::string, std::set<int>> used_by;
  for (int round = 0; round < 3; ++round)
    for (int peer_port = 0; peer_port < 8; ++peer_port) {
      b.peer = endpoint_desc{"verbs", "mlx5_" + std::to_string(peer_port) + ":1", 0, 2};
      auto before0 = p0->posted_to.size();
      CHECK(ports.post(b).status == xfer_status::done);
      used_by[b.peer.address].insert(p0->posted_to.size() > before0 ? 0 : 1);
    }
  bool both = false;
  std::set<int> any;
  for (auto& [addr, parts_used] : used_by) {
    CHECK(parts_used.size() == 1); // the same part every time
    any.insert(*parts_used.begin());
  }
  both = any.size() == 2;
  CHECK(both); // the peer's ports spread over ours
  // A connection message goes to the port it names.
  transport_control msg{"verbs", 2, 1, "hello", "mlx5_1:1", "mlx5_7:1"};
  CHECK_FALSE(ports.on_control(msg));
  CHECK(p1->control_from == std::vector<std::string>{"mlx5_7:1"});
  CHECK(p0->control_from.empty());
}

TEST_CASE("a group of one-path batches that complete inline reaches the backend whole") {
  rig r;
  r.inner->async = false;
  r.inner->inline_posts = true;
  r.inner->mode["b"] = "dead";
  auto one = rig::batch(4096, {"a"});
  auto two = rig::batch(4096, {"b"});
  auto three = rig::batch(4096, {"a"});
  auto res = r.paths.post_group({&one, &two, &three});
  CHECK(r.inner->groups == 1);
  REQUIRE(res.size() == 3);
  CHECK(res[0].status == xfer_status::done);
  CHECK(res[1].status == xfer_status::failed);
  CHECK(res[2].status == xfer_status::done);
  // The dead path's failure counts against it as a post's would: three
  // more and it rests, so a batch that could take it (up again, and first
  // in its list) takes the other.
  for (int i = 0; i < 3; ++i)
    (void) r.paths.post_group({&two});
  r.inner->mode["b"] = "up";
  auto around = rig::batch(4096, {"b", "a"});
  std::string reason;
  CHECK(r.run(around, reason) == xfer_status::done);
  CHECK(r.inner->posted.back().first == "a");
}

TEST_CASE("a group with a batch of several paths, or posts that do not complete inline, goes "
          "batch by batch") {
  rig r;
  r.inner->async = false;
  r.inner->inline_posts = true;
  auto one = rig::batch(4096, {"a"});
  auto spread = rig::batch(4096, {"a", "b"});
  auto res = r.paths.post_group({&one, &spread});
  CHECK(r.inner->groups == 0);
  CHECK(res.size() == 2);
  CHECK(r.inner->posted.size() == 2);
  r.inner->inline_posts = false;
  res = r.paths.post_group({&one, &one});
  CHECK(r.inner->groups == 0);
  CHECK(r.inner->posted.size() == 4);
  // Batch by batch, a batch that would block keeps those after it unposted.
  r.inner->mode["full"] = "full";
  auto full = rig::batch(4096, {"full"});
  res = r.paths.post_group({&one, &full, &one});
  REQUIRE(res.size() == 3);
  CHECK(res[0].status == xfer_status::done);
  CHECK(res[1].status == xfer_status::would_block);
  CHECK(res[2].status == xfer_status::would_block);
  CHECK(r.inner->posted.size() == 6);
}
