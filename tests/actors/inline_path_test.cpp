// The rank's shortcut for small batches: it posts only through backends
// whose post completes inline, only below its limit, and a closed path waits
// for posts in progress and starts none.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "kvroom/actors/inline_path.hpp"
#include "kvroom/api/errors.hpp"

using namespace kvroom;

namespace {

/// A backend whose post blocks until released, counting calls.
class gated_backend final : public backend {
public:
  std::atomic<bool> open_gate{false};
  std::atomic<int> inside{0};
  std::atomic<int> calls{0};
  bool accepts = true;

  std::string name() const override { return "gated"; }
  backend_caps caps() const override { return {}; }
  endpoint_desc endpoint() const override { return {}; }
  caf::expected<region_id> register_memory(const mem_desc&) override { return region_id{1}; }
  caf::error deregister_memory(region_id) override { return caf::none; }
  bool completes_inline(const write_batch&) const override { return accepts; }
  post_result post(const write_batch&) override {
    ++calls;
    ++inside;
    while (!open_gate.load())
      std::this_thread::yield();
    --inside;
    return post_result::done();
  }
};

write_batch bytes(uint64_t n) {
  write_batch b;
  b.ops = {{0x1000, 0x2000, n}};
  return b;
}

} // namespace

TEST_CASE("the inline path posts only small batches, through backends whose post completes inline") {
  auto be = std::make_shared<gated_backend>();
  be->open_gate = true;
  inline_path p{be, 1024};
  auto r = p.try_post(bytes(1024));
  REQUIRE(r);
  CHECK_FALSE(*r);
  CHECK_FALSE(p.try_post(bytes(1025)));  // too large: the worker's job
  be->accepts = false;
  CHECK_FALSE(p.try_post(bytes(8)));
  inline_path off{be, 0};
  be->accepts = true;
  CHECK_FALSE(off.try_post(bytes(8)));
  CHECK(be->calls == 1);
}

TEST_CASE("closing the inline path waits for the post in progress and refuses new ones") {
  auto be = std::make_shared<gated_backend>();
  inline_path p{be, 1024};
  std::thread copier{[&] { CHECK(p.try_post(bytes(8))); }};
  while (be->inside.load() == 0)
    std::this_thread::yield();
  std::atomic<bool> closed{false};
  std::thread closer{[&] {
    p.close();
    closed = true;
  }};
  // The post is still inside: close must not have returned.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(closed.load());
  be->open_gate = true;
  copier.join();
  closer.join();
  CHECK(closed.load());
  CHECK_FALSE(p.try_post(bytes(8)));
  CHECK(be->calls == 1);
}

TEST_CASE("the inline path never keeps a backend alive") {
  auto be = std::make_shared<gated_backend>();
  be->open_gate = true;
  inline_path p{be, 1024};
  std::weak_ptr<gated_backend> weak = be;
  be.reset();
  CHECK(weak.expired());
  CHECK_FALSE(p.try_post(bytes(8)));
}
