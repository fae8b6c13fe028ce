// The transfer worker with a chunk's batches for several decode ranks in one
// message (`transfer_jobs`): it posts them together, answers each job on its
// own, refuses those past its queue's bound, keeps the order of those the
// backend pushes back on, and a fence drops those still waiting.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caf/all.hpp"

#include "kvroom/actors/local_messages.hpp"
#include "kvroom/actors/manager/transfer_worker.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/runtime.hpp"

using namespace kvroom;

namespace {

/// A backend whose posts complete inside the call as each batch's key
/// says: 1 fails, 2 pushes back while `blocked`; every other key lands.
/// Records what it was asked, on the worker's thread.
class scripted_backend final : public backend {
public:
  std::mutex mtx;
  bool blocked = true;
  std::vector<std::vector<uint64_t>> groups; // keys of each post_group
  std::vector<uint64_t> posts;               // keys of each post

  std::string name() const override { return "scripted"; }
  backend_caps caps() const override { return {}; }
  endpoint_desc endpoint() const override { return {}; }
  caf::expected<region_id> register_memory(const mem_desc&) override { return region_id{1}; }
  caf::error deregister_memory(region_id) override { return caf::none; }

  post_result post(const write_batch& batch) override {
    std::lock_guard<std::mutex> guard{mtx};
    posts.push_back(batch.key);
    return outcome(batch);
  }

  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override {
    std::lock_guard<std::mutex> guard{mtx};
    std::vector<uint64_t> keys;
    std::vector<post_result> out;
    for (auto* b : batches) {
      keys.push_back(b->key);
      out.push_back(!out.empty() && out.back().status == xfer_status::would_block
                      ? post_result::would_block()
                      : outcome(*b));
    }
    groups.push_back(std::move(keys));
    return out;
  }

private:
  post_result outcome(const write_batch& batch) const {
    if (batch.key == 1)
      return post_result::failed(make_error(errc::out_of_range, "outside rank 2's memory"));
    if (batch.key == 2 && blocked)
      return post_result::would_block();
    return post_result::done();
  }
};

transfer_job job(room_id room, uint64_t id, uint64_t key) {
  transfer_job out;
  out.room = room;
  out.job_id = id;
  out.batch.room = room;
  out.batch.key = key;
  out.batch.ops = {{0x1000, 0x2000, 100}};
  return out;
}

struct rig {
  runtime rt{runtime_options{"central", 0, "off"}};
  std::shared_ptr<scripted_backend> be = std::make_shared<scripted_backend>();
  caf::scoped_actor room{rt.system()};
  caf::actor worker;

  explicit rig(uint32_t max_jobs) {
    worker = rt.system().spawn<caf::detached>(transfer_worker, std::static_pointer_cast<backend>(be),
                                              max_jobs, uint32_t{60'000});
  }

  ~rig() {
    caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  }

  /// The next `n` results, by job id.
  std::map<uint64_t, transfer_result> results(size_t n) {
    std::map<uint64_t, transfer_result> out;
    for (size_t i = 0; i < n; ++i)
      room->receive([&](transfer_result& r) { out.emplace(r.job_id, std::move(r)); },
                    caf::after(std::chrono::seconds(10)) >> [] { FAIL("no transfer_result"); });
    return out;
  }

  std::vector<std::vector<uint64_t>> groups() {
    std::lock_guard<std::mutex> guard{be->mtx};
    return be->groups;
  }

  std::vector<uint64_t> posts() {
    std::lock_guard<std::mutex> guard{be->mtx};
    return be->posts;
  }
};

} // namespace

TEST_CASE("a chunk's jobs are posted together and each is answered on its own") {
  rig r{16};
  r.room->send(r.worker, transfer_jobs{7, {job(7, 10, 5), job(7, 11, 1), job(7, 12, 6)}});
  auto res = r.results(3);
  CHECK(res.at(10).ok);
  CHECK(res.at(10).bytes == 100);
  CHECK_FALSE(res.at(11).ok);
  CHECK(res.at(11).reason.find("outside rank 2's memory") != std::string::npos);
  CHECK(res.at(12).ok);
  CHECK(r.groups() == std::vector<std::vector<uint64_t>>{{5, 1, 6}});
  CHECK(r.posts().empty());
}

TEST_CASE("jobs of a group past the worker's bound are refused, the others posted") {
  rig r{2};
  r.room->send(r.worker, transfer_jobs{7, {job(7, 10, 5), job(7, 11, 6), job(7, 12, 8)}});
  auto res = r.results(3);
  CHECK(res.at(10).ok);
  CHECK(res.at(11).ok);
  CHECK_FALSE(res.at(12).ok);
  CHECK(res.at(12).reason.find("transfer queue full (2 jobs)") != std::string::npos);
  CHECK(r.groups() == std::vector<std::vector<uint64_t>>{{5, 6}});
}

TEST_CASE("jobs the backend pushes back on wait, and go out in their order") {
  rig r{16};
  r.room->send(r.worker, transfer_jobs{7, {job(7, 10, 5), job(7, 11, 2), job(7, 12, 6)}});
  auto first = r.results(1);
  CHECK(first.at(10).ok);
  // A job sent alone meanwhile queues behind the ones waiting.
  r.room->send(r.worker, job(7, 13, 9));
  {
    std::lock_guard<std::mutex> guard{r.be->mtx};
    r.be->blocked = false;
  }
  auto rest = r.results(3);
  CHECK(rest.at(11).ok);
  CHECK(rest.at(12).ok);
  CHECK(rest.at(13).ok);
  CHECK(r.groups() == std::vector<std::vector<uint64_t>>{{5, 2, 6}});
  // Pushed back on (several times, as the worker polls), then in order.
  auto posts = r.posts();
  REQUIRE(posts.size() >= 3);
  CHECK(std::vector<uint64_t>(posts.end() - 3, posts.end()) == std::vector<uint64_t>{2, 6, 9});
}

TEST_CASE("a fence drops a group's jobs still waiting, and is answered") {
  rig r{16};
  caf::anon_send(r.worker, attach_atom::value, caf::actor_cast<caf::actor>(r.room));
  r.room->send(r.worker, transfer_jobs{7, {job(7, 10, 2), job(7, 11, 6)}});
  r.room->send(r.worker, fence_room{7});
  bool fenced = false;
  r.room->receive([&](room_fenced& f) { fenced = f.room == 7; },
                  caf::after(std::chrono::seconds(10)) >> [] { FAIL("no room_fenced"); });
  CHECK(fenced);
  {
    std::lock_guard<std::mutex> guard{r.be->mtx};
    r.be->blocked = false;
  }
  // Nothing of the room is posted after its fence, nor answered.
  bool answered = false;
  r.room->receive([&](transfer_result&) { answered = true; },
                  caf::after(std::chrono::milliseconds(300)) >> [] {});
  CHECK_FALSE(answered);
  // Only the pushed-back job was tried (again, as the worker polled)
  // before the fence came; the one behind it never.
  for (auto key : r.posts())
    CHECK(key == 2);
}
