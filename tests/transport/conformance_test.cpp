// One conformance body for every row of the transport table: byte-exact
// writes and reads across sizes and batch sizes, refusal of anything
// outside registered memory (nothing moves), deregistration, read grants,
// and a transport that does not read saying so. conformance_main runs it
// against the transport it is given, with memory of the kind that row
// moves; the cases particular to one transport follow, tagged with its name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/device_memory.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/transport_table.hpp"

#include "conformance_selected.hpp"

using namespace kvroom;

namespace {

const transport_row& row() {
  for (auto* r : transport_table())
    if (test::selected_transport == r->name)
      return *r;
  FAIL("no transport row " << test::selected_transport);
  throw std::logic_error("unreachable");
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  std::mt19937_64 rng{seed};
  for (auto& b : out)
    b = static_cast<uint8_t>(rng());
  return out;
}

/// Memory of the kind the selected transport moves, zeroed: a buffer on
/// GPU 0 where it moves device memory only (cuda), a 0600 shared segment
/// where it registers only those (shm), heap memory otherwise.
class test_memory {
public:
  explicit test_memory(size_t n) : size_(n) {
    auto& r = row();
    if (!r.moves_host) {
      auto p = device_alloc(0, n);
      REQUIRE(p);
      addr_ = *p;
      device_ = 0;
      REQUIRE_FALSE(device_fill(0, addr_, 0, n));
    } else if (!r.registers_any_host) {
      static int counter = 0;
      name_ = "/kvroom-conf-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
      int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
      auto* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      REQUIRE(p != MAP_FAILED);
      std::memset(p, 0, n);
      addr_ = reinterpret_cast<uint64_t>(p);
    } else {
      heap_.assign(n, 0);
      addr_ = reinterpret_cast<uint64_t>(heap_.data());
    }
  }

  ~test_memory() {
    if (device_ >= 0) {
      device_free(0, addr_);
    } else if (!name_.empty()) {
      ::munmap(reinterpret_cast<void*>(addr_), size_);
      ::shm_unlink(name_.c_str());
    }
  }

  test_memory(const test_memory&) = delete;
  test_memory& operator=(const test_memory&) = delete;

  uint64_t addr() const noexcept {
    return addr_;
  }

  size_t size() const noexcept {
    return size_;
  }

  int32_t device() const noexcept {
    return device_;
  }

  mem_desc desc() const {
    return mem_desc{addr_, size_, device_};
  }

  /// A copy of its bytes.
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(size_);
    if (device_ >= 0)
      REQUIRE_FALSE(device_download(0, out.data(), addr_, size_));
    else
      std::memcpy(out.data(), reinterpret_cast<const void*>(addr_), size_);
    return out;
  }

  void write(const std::vector<uint8_t>& bytes) {
    REQUIRE(bytes.size() <= size_);
    if (device_ >= 0)
      REQUIRE_FALSE(device_upload(0, addr_, bytes.data(), bytes.size()));
    else
      std::memcpy(reinterpret_cast<void*>(addr_), bytes.data(), bytes.size());
  }

private:
  size_t size_ = 0;
  uint64_t addr_ = 0;
  int32_t device_ = -1;
  std::string name_;
  std::vector<uint8_t> heap_;
};

/// Two ranks' backends of the selected transport in this process (rank 1
/// sends and serves reads, rank 2 receives and reads), their connection
/// messages carried by hand as the actors carry them in kvroom. `src` holds
/// a seeded pattern; rooms 0..15 may write all of `dst` and read all of
/// `src`.
struct pair_of_ranks {
  backend_ptr sender;
  backend_ptr receiver;
  test_memory src;
  test_memory dst;
  std::vector<uint8_t> bytes;
  std::optional<region_id> dst_region;

  /// `streaming_copy_bytes`: from how many bytes a copying backend copies
  /// around the cache (backend_config).
  explicit pair_of_ranks(size_t n, uint64_t streaming_copy_bytes = uint64_t{16} << 20)
    : src(n), dst(n), bytes(pattern(n, 1234)) {
    backend_config sc{row().name, 1, {}}, rc{row().name, 2, {}};
    sc.streaming_copy_bytes = rc.streaming_copy_bytes = streaming_copy_bytes;
    auto s = make_backend(sc);
    auto r = make_backend(rc);
    REQUIRE(s);
    REQUIRE(r);
    sender = std::move(*s);
    receiver = std::move(*r);
    src.write(bytes);
    REQUIRE(sender->register_memory(src.desc()));
    auto region = receiver->register_memory(dst.desc());
    REQUIRE(region);
    dst_region = *region;
    for (room_id room = 0; room < 16; ++room) {
      REQUIRE(receiver->grant(room, 1, {byte_range{dst.addr(), n}}));
      REQUIRE(sender->grant_read(room, 2, {byte_range{src.addr(), n}}));
    }
  }

  void pump() {
    for (auto& m : sender->take_control())
      REQUIRE_FALSE(receiver->on_control(m));
    for (auto& m : receiver->take_control())
      REQUIRE_FALSE(sender->on_control(m));
  }

  /// Posts a write of `ops` and drives it to its end: ok, or why not.
  std::pair<bool, std::string> run(std::vector<write_op> ops, room_id room = 1,
                                   int32_t src_device = -2) {
    write_batch b;
    b.room = room;
    b.peer = receiver->endpoint();
    b.ops = std::move(ops);
    b.src_device_id = src_device == -2 ? src.device() : src_device;
    b.dst_device_id = dst.device();
    pump();
    return drive(*sender, sender->post(b));
  }

  /// A write batch of `ops` to rank 2.
  write_batch batch(std::vector<write_op> ops, room_id room = 1) {
    write_batch b;
    b.room = room;
    b.peer = receiver->endpoint();
    b.ops = std::move(ops);
    b.src_device_id = src.device();
    b.dst_device_id = dst.device();
    return b;
  }

  /// Posts `batches` together (`post_group`) and drives each to its end.
  std::vector<std::pair<bool, std::string>> run_group(const std::vector<write_batch>& batches) {
    std::vector<const write_batch*> group;
    for (auto& b : batches)
      group.push_back(&b);
    pump();
    auto posted = sender->post_group(group);
    REQUIRE(posted.size() == batches.size());
    std::vector<std::pair<bool, std::string>> out;
    for (auto& res : posted)
      out.push_back(drive(*sender, std::move(res)));
    return out;
  }

  /// A pull: rank 2 reads `ops` from rank 1's memory.
  std::pair<bool, std::string> pull(std::vector<read_op> ops, room_id room = 1) {
    read_batch b;
    b.room = room;
    b.peer = sender->endpoint();
    b.ops = std::move(ops);
    pump();
    return drive(*receiver, receiver->post_read(b));
  }

  /// Bounded by time, not by a count of polls: a slow machine's ack takes
  /// more of them.
  std::pair<bool, std::string> drive(backend& be, post_result res) {
    if (res.status == xfer_status::failed)
      return {false, describe(res.error)};
    if (res.status != xfer_status::in_progress)
      return {res.status == xfer_status::done, to_string(res.status)};
    std::string reason;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto st = xfer_status::in_progress;
    while (st == xfer_status::in_progress && std::chrono::steady_clock::now() < until) {
      pump();
      st = be.poll(res.id, reason);
      if (st == xfer_status::in_progress)
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    be.release(res.id);
    return {st == xfer_status::done, st == xfer_status::in_progress ? "timed out" : reason};
  }
};

bool all_zero(const std::vector<uint8_t>& xs) {
  return std::all_of(xs.begin(), xs.end(), [](uint8_t b) { return b == 0; });
}

/// Every other block of `src`, to `dst` in reverse order (a write or a read
/// of the same shape).
template <class Op>
std::vector<Op> reversed(const pair_of_ranks& p, size_t block, size_t count) {
  std::vector<Op> ops;
  for (size_t i = 0; i < count; ++i)
    ops.push_back({p.src.addr() + 2 * i * block, p.dst.addr() + 2 * (count - 1 - i) * block,
                   block});
  return ops;
}

/// Block `i` of `count` landed in reverse order, every other block, and the
/// gaps stayed untouched.
void check_reversed(const pair_of_ranks& p, size_t block, size_t count) {
  auto got = p.dst.read();
  for (size_t i = 0; i < count; ++i) {
    REQUIRE(std::memcmp(p.bytes.data() + 2 * i * block,
                        got.data() + 2 * (count - 1 - i) * block, block) == 0);
    auto* gap = got.data() + (2 * (count - 1 - i) + 1) * block;
    CHECK(std::all_of(gap, gap + block, [](uint8_t b) { return b == 0; }));
  }
}

} // namespace

TEST_CASE("a transport moves a seeded pattern byte-exact across sizes and batch sizes",
          "[conformance]") {
  for (size_t block : {size_t{1}, size_t{7}, size_t{4096}, size_t{65536}, size_t{1} << 20}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{16}}) {
      INFO(row().name << ": block " << block << " x " << count);
      pair_of_ranks p{block * count * 2};
      REQUIRE(p.run(reversed<write_op>(p, block, count)).first);
      check_reversed(p, block, count);
    }
  }
}

TEST_CASE("copies around the cache land byte-exact at any alignment and size",
          "[conformance]") {
  // Every post streams (a copying backend's threshold at 1 byte): ops of
  // odd sizes at odd addresses take its unaligned head and tail, and the
  // sizes either side of what it streams (256 B up to 64 KiB) its memcpy;
  // a write, and a pull of the same shape where the transport reads.
  for (bool pull : {false, true})
  for (size_t block : {size_t{255}, size_t{256}, size_t{1000}, size_t{4099}, size_t{65541}}) {
    INFO(row().name << ": block " << block << (pull ? ", pulled" : ", written"));
    size_t count = 5;
    pair_of_ranks p{(block + 8) * count * 2, 1};
    if (pull && !p.receiver->caps().reads)
      break;
    std::vector<write_op> ops;
    std::vector<read_op> reads;
    for (size_t i = 0; i < count; ++i) {
      ops.push_back({p.src.addr() + 1 + 2 * i * (block + 8),
                     p.dst.addr() + 3 + 2 * (count - 1 - i) * (block + 8), block});
      reads.push_back({ops.back().src_addr, ops.back().dst_addr, block});
    }
    REQUIRE((pull ? p.pull(reads) : p.run(ops)).first);
    auto got = p.dst.read();
    for (size_t i = 0; i < count; ++i) {
      REQUIRE(std::memcmp(p.bytes.data() + 1 + 2 * i * (block + 8),
                          got.data() + 3 + 2 * (count - 1 - i) * (block + 8), block) == 0);
      // Nothing around the write: its 3 bytes before, what follows it.
      auto* at = got.data() + 2 * (count - 1 - i) * (block + 8);
      CHECK(std::all_of(at, at + 3, [](uint8_t b) { return b == 0; }));
      CHECK(std::all_of(at + 3 + block, at + 2 * (block + 8),
                        [](uint8_t b) { return b == 0; }));
    }
  }
}

TEST_CASE("batches posted together end each as if posted alone", "[conformance]") {
  // Three batches to one peer, as a prefill room's chunk goes to its decode
  // ranks: the first two interleaved slices of the same source pages (head
  // slicing), the last one running past the peer's memory. (Last: a tcp
  // receiver that refuses a batch fails the ones behind it on the
  // connection, as it would posted alone.)
  for (uint64_t streaming : {uint64_t{1}, uint64_t{16} << 20}) {
    INFO(row().name << ": streaming from " << streaming << " bytes");
    constexpr size_t page = 4096, pages = 8, slice = 512;
    pair_of_ranks p{page * pages * 2, streaming};
    auto src = p.src.addr();
    auto dst = p.dst.addr();
    std::vector<write_op> a, bad, b;
    for (size_t pg = 0; pg < pages; ++pg)
      for (size_t t = 0; t < page / (2 * slice); ++t) {
        auto from = src + pg * page + 2 * t * slice;
        a.push_back({from, dst + pg * page / 2 + t * slice, slice});
        b.push_back({from + slice, dst + page * pages + pg * page / 2 + t * slice, slice});
      }
    bad.push_back({src, dst + page * pages, 64});
    bad.push_back({src, dst + 2 * page * pages - 10, 11});
    auto res = p.run_group({p.batch(a), p.batch(b), p.batch(bad)});
    CHECK(res[0].first);
    CHECK(res[1].first);
    CHECK_FALSE(res[2].first);
    CHECK_THAT(res[2].second, Catch::Contains("outside rank 2's registered memory"));
    auto got = p.dst.read();
    for (size_t pg = 0; pg < pages; ++pg)
      for (size_t t = 0; t < page / (2 * slice); ++t) {
        auto* from = p.bytes.data() + pg * page + 2 * t * slice;
        REQUIRE(std::memcmp(from, got.data() + pg * page / 2 + t * slice, slice) == 0);
        REQUIRE(std::memcmp(from + slice, got.data() + page * pages + pg * page / 2 + t * slice,
                            slice) == 0);
      }
    // The refused batch's first write, inside the memory, did not happen:
    // b's bytes are there, not the source's first 64.
    CHECK(std::memcmp(got.data() + page * pages, p.bytes.data() + slice, 64) == 0);
    // An empty group is no call at all.
    CHECK(p.sender->post_group({}).empty());
  }
}

TEST_CASE("strided writes land as the writes they stand for, alone and together",
          "[conformance]") {
  // Token rows of head-sliced NHD pages: each token's two halves go to two
  // decode ranks' pages (halves of `dst` here), one strided write a page
  // run, next to a plain write; transports that do not move strided writes
  // themselves expand them (caps say which), with the same result.
  for (uint64_t streaming : {uint64_t{1}, uint64_t{16} << 20}) {
    INFO(row().name << ": streaming from " << streaming << " bytes");
    constexpr size_t row_bytes = 1024, rows = 64, half = row_bytes / 2;
    constexpr size_t n = row_bytes * rows;
    pair_of_ranks p{2 * n, streaming};
    auto src = p.src.addr();
    auto dst = p.dst.addr();
    auto a = p.batch({});
    auto b = p.batch({{src + n, dst + n, 100}}); // a plain write beside
    a.strided.push_back({src, dst, half, rows / 2, row_bytes, half});
    a.strided.push_back({src + rows / 2 * row_bytes, dst + rows / 2 * half, half, rows / 2,
                         row_bytes, half});
    b.strided.push_back({src + half, dst + n / 2, half, rows, row_bytes, half});
    auto res = p.run_group({a, b});
    CHECK(res[0].first);
    CHECK(res[1].first);
    auto got = p.dst.read();
    for (size_t r = 0; r < rows; ++r) {
      REQUIRE(std::memcmp(p.bytes.data() + r * row_bytes, got.data() + r * half, half) == 0);
      REQUIRE(std::memcmp(p.bytes.data() + r * row_bytes + half, got.data() + n / 2 + r * half,
                          half)
              == 0);
    }
    CHECK(std::memcmp(p.bytes.data() + n, got.data() + n, 100) == 0);
    CHECK(std::all_of(got.begin() + n + 100, got.end(), [](uint8_t x) { return x == 0; }));
  }
  SECTION("one whose span leaves registered memory, or overflows, is refused and moves nothing") {
    pair_of_ranks p{8192};
    auto src = p.src.addr();
    auto dst = p.dst.addr();
    auto post = [&](strided_write w) {
      auto b = p.batch({{src, dst + 4096, 64}});
      b.strided.push_back(w);
      return p.run_group({b}).front();
    };
    // Its last row runs a byte past the end of the peer's memory.
    auto res = post({src, dst, 64, 2, 64, 8192 - 64 + 1});
    CHECK_FALSE(res.first);
    CHECK_THAT(res.second, Catch::Contains("outside rank 2's registered memory"));
    CHECK_FALSE(post({src, dst, 64, 3, UINT64_MAX / 2, 64}).first);
    CHECK_FALSE(post({src, dst, 64, 2, 64, UINT64_MAX - 63}).first);
    CHECK(all_zero(p.dst.read()));
    // Nothing to move is not a strided write.
    if (p.sender->caps().strided_writes) {
      CHECK_FALSE(post({src, dst, 64, 0, 64, 64}).first);
      CHECK_FALSE(post({src, dst, 0, 4, 64, 64}).first);
    }
    CHECK(all_zero(p.dst.read()));
    REQUIRE(post({src, dst, 64, 2, 64, 64}).first);
    auto got = p.dst.read();
    CHECK(std::memcmp(p.bytes.data(), got.data(), 128) == 0);
  }
}

TEST_CASE("a destination outside the peer's registered memory is refused and nothing moves",
          "[conformance]") {
  pair_of_ranks p{8192};
  auto src = p.src.addr();
  auto base = p.dst.addr();
  // The first write is fine, the second runs one byte past the end: the
  // batch is refused whole, before the first write happens.
  auto res = p.run({{src, base, 100}, {src, base + 8092, 101}});
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second, Catch::Contains("outside rank 2's registered memory"));
  CHECK(all_zero(p.dst.read()));
  // Wrapping ranges are refused too, and the transport still works after.
  CHECK_FALSE(p.run({{src, base + 10, UINT64_MAX}}).first);
  REQUIRE(p.run({{src, base, 64}}).first);
  auto got = p.dst.read();
  CHECK(std::memcmp(p.bytes.data(), got.data(), 64) == 0);
}

TEST_CASE("a source outside the sender's registered memory is refused", "[conformance]") {
  pair_of_ranks p{4096};
  test_memory stray{64};
  auto res = p.run({{stray.addr(), p.dst.addr(), 64}});
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second, Catch::Contains("outside the sender's registered memory"));
  CHECK(all_zero(p.dst.read()));
}

TEST_CASE("deregistered memory is no longer writable", "[conformance]") {
  pair_of_ranks p{256};
  REQUIRE_FALSE(p.receiver->deregister_memory(*p.dst_region));
  CHECK_FALSE(p.run({{p.src.addr(), p.dst.addr(), 256}}).first);
  CHECK(all_zero(p.dst.read()));
  // Gone once: a second deregistration is an error.
  CHECK(p.receiver->deregister_memory(*p.dst_region));
}

TEST_CASE("a transport that reads pulls a seeded pattern byte-exact across sizes and batch sizes",
          "[conformance]") {
  if (!pair_of_ranks{64}.receiver->caps().reads)
    return; // "does not read says so" below
  for (size_t block : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    for (size_t count : {size_t{1}, size_t{16}}) {
      INFO(row().name << ": block " << block << " x " << count);
      pair_of_ranks p{block * count * 2};
      REQUIRE(p.pull(reversed<read_op>(p, block, count)).first);
      check_reversed(p, block, count);
    }
  }
}

TEST_CASE("a read outside either side's registered memory is refused whole and moves nothing",
          "[conformance]") {
  pair_of_ranks p{8192};
  if (!p.receiver->caps().reads)
    return;
  auto src = p.src.addr();
  auto dst = p.dst.addr();
  // The first read is fine; the second's source runs one byte past the
  // peer's memory: nothing lands.
  auto res = p.pull({{src, dst, 100}, {src + 8092, dst + 200, 101}});
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second, Catch::Contains("outside rank 1's registered memory"));
  CHECK(all_zero(p.dst.read()));
  // A destination outside the reader's own memory.
  test_memory stray{64};
  res = p.pull({{src, stray.addr(), 64}});
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second, Catch::Contains("outside the reader's registered memory"));
  CHECK(all_zero(stray.read()));
  // A wrapping range, then a good read: the transport still serves.
  CHECK_FALSE(p.pull({{src + 10, dst, UINT64_MAX}}).first);
  REQUIRE(p.pull({{src, dst, 64}}).first);
  CHECK(std::memcmp(p.bytes.data(), p.dst.read().data(), 64) == 0);
}

TEST_CASE("a transport that serves reads itself serves only what it granted, until revoked",
          "[conformance]") {
  pair_of_ranks p{8192};
  if (!p.receiver->caps().reads || !p.sender->enforces_read_grants())
    return;
  auto src = p.src.addr();
  auto dst = p.dst.addr();
  // A room that granted nothing, then a read past the granted pages.
  auto res = p.pull({{src, dst, 64}}, 99);
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second, Catch::Contains("grants rank 2 no pages"));
  REQUIRE(p.sender->grant_read(20, 2, {byte_range{src, 4096}}));
  res = p.pull({{src + 4000, dst, 200}}, 20);
  CHECK_FALSE(res.first);
  CHECK_THAT(res.second,
             Catch::Contains("read 0 of rank 2 lies outside the pages room 20 granted it"));
  CHECK(all_zero(p.dst.read()));
  // The stream survives refusals: a granted read lands; once revoked, the
  // same read is refused.
  REQUIRE(p.pull({{src, dst, 4096}}, 20).first);
  CHECK(std::memcmp(p.bytes.data(), p.dst.read().data(), 4096) == 0);
  p.sender->revoke_read(20);
  CHECK_FALSE(p.pull({{src, dst, 64}}, 20).first);
}

TEST_CASE("a transport that does not read says so", "[conformance]") {
  pair_of_ranks p{64};
  if (p.receiver->caps().reads)
    return;
  read_batch b;
  b.room = 5;
  b.peer = p.sender->endpoint();
  auto res = p.receiver->post_read(b);
  CHECK(res.status == xfer_status::failed);
  CHECK(res.error == errc::unsupported);
}

TEST_CASE("thousands of scattered pages in one batch land byte-exact", "[conformance]") {
  // Past what one call of each transport carries: verbs' max_sge and send
  // window, tcp's IOV_MAX and its receiver's groups of pages.
  constexpr size_t page = 256;
  constexpr size_t pages = 8192;
  pair_of_ranks p{page * pages};
  std::vector<write_op> ops;
  // Odd source pages into the first half, even ones into the second.
  for (size_t i = 0; i < pages / 2; ++i)
    ops.push_back({p.src.addr() + (2 * i + 1) * page, p.dst.addr() + i * page, page});
  for (size_t i = 0; i < pages / 2; ++i)
    ops.push_back({p.src.addr() + 2 * i * page, p.dst.addr() + (pages / 2 + i) * page, page});
  REQUIRE(p.run(ops).first);
  auto got = p.dst.read();
  for (size_t i = 0; i < pages / 2; ++i) {
    REQUIRE(std::memcmp(p.bytes.data() + (2 * i + 1) * page, got.data() + i * page, page) == 0);
    REQUIRE(std::memcmp(p.bytes.data() + 2 * i * page, got.data() + (pages / 2 + i) * page,
                        page) == 0);
  }
}

// -- verbs -------------------------------------------------------------------

TEST_CASE("verbs pulls contiguous pages scattered in reverse with RDMA READ, byte-exact",
          "[verbs]") {
  constexpr size_t page = 4096;
  constexpr size_t pages = 512;
  pair_of_ranks p{page * pages};
  std::vector<read_op> ops;
  // Many entries per READ.
  for (size_t i = 0; i < pages; ++i)
    ops.push_back({p.src.addr() + i * page, p.dst.addr() + (pages - 1 - i) * page, page});
  REQUIRE(p.pull(ops).first);
  auto got = p.dst.read();
  for (size_t i = 0; i < pages; ++i)
    REQUIRE(std::memcmp(p.bytes.data() + i * page, got.data() + (pages - 1 - i) * page, page)
            == 0);
}

// -- cuda --------------------------------------------------------------------

TEST_CASE("cuda moves host memory into GPU memory", "[cuda]") {
  pair_of_ranks p{1 << 20};
  auto host = pattern(1 << 20, 13);
  REQUIRE(p.sender->register_memory({reinterpret_cast<uint64_t>(host.data()), host.size(), -1}));
  REQUIRE(p.run({{reinterpret_cast<uint64_t>(host.data()), p.dst.addr(), host.size()}}, 1, -1)
            .first);
  CHECK(p.dst.read() == host);
}

TEST_CASE("cuda refuses registrations of the wrong kind", "[cuda]") {
  pair_of_ranks p{64};
  std::vector<uint8_t> not_gpu(4096);
  auto wrong = p.sender->register_memory({reinterpret_cast<uint64_t>(not_gpu.data()),
                                          not_gpu.size(), 0});
  REQUIRE_FALSE(wrong);
  CHECK_THAT(describe(wrong.error()), Catch::Contains("GPU 0"));
}
