// What is particular to some transports (tcp against strangers and hostile
// peers, local registration, endpoint choice) and the fault injector; the
// conformance body every transport runs is conformance_test.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <vector>

#include "kvroom/api/errors.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/log.hpp"
#include "kvroom/transport/select.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace kvroom;

namespace {

/// Drives a post to its end, polling a batch in progress (bounded in
/// count) and releasing it: done, failed (`reason` says why), would_block,
/// or in_progress when it never ended.
xfer_status finish(backend& be, const post_result& posted, std::string& reason) {
  switch (posted.status) {
    case xfer_status::failed:
      reason = describe(posted.error);
      return xfer_status::failed;
    case xfer_status::done:
    case xfer_status::would_block:
      return posted.status;
    case xfer_status::in_progress:
      break;
  }
  // Bounded by time, not by a count of polls: a slow machine's ack takes
  // more of them.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto st = be.poll(posted.id, reason);
    if (st != xfer_status::in_progress) {
      be.release(posted.id);
      return st;
    }
  }
  be.release(posted.id);
  return xfer_status::in_progress;
}

/// Posts `batch` and drives it to its end: ok, or the reason it failed
/// (refused at post, or failed at completion: a remote receiver refuses a
/// batch only once it has seen it).
std::pair<bool, std::string> run(backend& be, const write_batch& batch) {
  std::string reason;
  auto st = finish(be, be.post(batch), reason);
  return {st == xfer_status::done, reason};
}

/// Memory a backend can register: in a /dev/shm segment for "shm", plain
/// heap otherwise. Looks like a vector of bytes.
class buffer {
public:
  buffer(const std::string& backend, size_t n, uint8_t fill = 0) : size_(n) {
    if (backend == "shm") {
      name_ = "/kvroom-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++);
      int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
      data_ = static_cast<uint8_t*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      ::close(fd);
      REQUIRE(data_ != MAP_FAILED);
    } else {
      heap_.resize(n);
      data_ = heap_.data();
    }
    std::memset(data_, fill, n);
  }
  ~buffer() {
    if (!name_.empty()) {
      ::munmap(data_, size_);
      ::shm_unlink(name_.c_str());
    }
  }
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }
  uint8_t* begin() { return data_; }
  uint8_t* end() { return data_ + size_; }
  uint8_t& operator[](size_t i) { return data_[i]; }

private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string name_;
  std::vector<uint8_t> heap_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct pair_of_ranks {
  backend_ptr sender;
  backend_ptr receiver;
  buffer src;
  buffer dst;

  pair_of_ranks(const std::string& name, size_t bytes, fault_plan faults = {})
    : src(name, bytes), dst(name, bytes) {
    auto s = make_backend(backend_config{name, 1, faults});
    auto r = make_backend(backend_config{name, 2, {}});
    REQUIRE(s);
    REQUIRE(r);
    sender = std::move(*s);
    receiver = std::move(*r);
    REQUIRE(sender->register_memory(mem_desc{addr(src), bytes, -1}));
    REQUIRE(receiver->register_memory(mem_desc{addr(dst), bytes, -1}));
    // The rooms (batch rooms) these tests use may write all of dst, and
    // rank 2 may pull all of src from rank 1 (the read tests).
    for (room_id room = 0; room < 16; ++room) {
      REQUIRE(receiver->grant(room, 1, {byte_range{addr(dst), bytes}}));
      REQUIRE(sender->grant_read(room, 2, {byte_range{addr(src), bytes}}));
    }
    std::mt19937_64 rng{1234};
    for (auto& b : src)
      b = static_cast<uint8_t>(rng());
  }

  static uint64_t addr(buffer& xs) {
    return reinterpret_cast<uint64_t>(xs.data());
  }

  static uint64_t addr(std::vector<uint8_t>& xs) {
    return reinterpret_cast<uint64_t>(xs.data());
  }

  write_batch batch(std::vector<write_op> ops, room_id room = 1) {
    write_batch out;
    out.room = room;
    out.peer = receiver->endpoint();
    out.ops = std::move(ops);
    return out;
  }
};


} // namespace

TEST_CASE("local, shm and tcp read in every build") {
  // The pull direction relies on it (the conformance body reads over every
  // transport whose caps say it reads).
  for (auto* name : {"local", "shm", "tcp"}) {
    auto be = make_backend(backend_config{name, 1, {}});
    REQUIRE(be);
    CHECK((*be)->caps().reads);
  }
}

/// How many mappings of shm segment `name` ("/x") this process holds.
int mappings_of(const std::string& name) {
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  int n = 0;
  while (std::getline(maps, line))
    n += line.find("/dev/shm" + name) != std::string::npos ? 1 : 0;
  return n;
}

TEST_CASE("shm: a sender unmaps a peer's segment once it is gone, when it maps a new one") {
  // A decode rank that ends unlinks its segment; the sender's mapping is
  // then all that holds its pages. Mapping the next peer's segment (a
  // replacement's) drops it: what a sender maps follows the live peers,
  // not every peer it ever wrote to.
  constexpr size_t bytes = 1 << 16;
  auto s = make_backend(backend_config{"shm", 1, {}});
  REQUIRE(s);
  auto& sender = **s;
  buffer src{"shm", bytes, 7};
  REQUIRE(sender.register_memory(mem_desc{reinterpret_cast<uint64_t>(src.data()), bytes, -1}));
  auto write_to = [&](backend& receiver, buffer& dst) {
    write_batch b;
    b.room = 1;
    b.peer = receiver.endpoint();
    b.ops = {{reinterpret_cast<uint64_t>(src.data()), reinterpret_cast<uint64_t>(dst.data()), bytes}};
    return run(sender, b);
  };
  std::string first;
  {
    auto r = make_backend(backend_config{"shm", 2, {}});
    REQUIRE(r);
    buffer dst{"shm", bytes};
    REQUIRE((*r)->register_memory(mem_desc{reinterpret_cast<uint64_t>(dst.data()), bytes, -1}));
    first = (*r)->endpoint().shared.at(0).segment;
    REQUIRE(mappings_of(first) == 1); // the receiver's own
    auto res = write_to(**r, dst);
    REQUIRE(res.first);
    CHECK(dst[bytes - 1] == 7);
    CHECK(mappings_of(first) == 2); // and the sender's
  } // the receiver ends: its segment is unmapped by it and unlinked
  CHECK(mappings_of(first) == 1);   // the sender still holds it
  auto r2 = make_backend(backend_config{"shm", 3, {}});
  REQUIRE(r2);
  buffer dst2{"shm", bytes};
  REQUIRE((*r2)->register_memory(mem_desc{reinterpret_cast<uint64_t>(dst2.data()), bytes, -1}));
  auto res = write_to(**r2, dst2);
  REQUIRE(res.first);
  CHECK(dst2[0] == 7);
  CHECK(mappings_of(first) == 0);   // gone with the new mapping
}

TEST_CASE("registration refuses empty, overlapping and device ranges on the host backend") {
  std::vector<uint8_t> buf(1024);
  auto be = make_backend(backend_config{"local", 1, {}});
  REQUIRE(be);
  auto base = pair_of_ranks::addr(buf);
  CHECK_FALSE((*be)->register_memory(mem_desc{0, 10, -1}));
  CHECK_FALSE((*be)->register_memory(mem_desc{base, 0, -1}));
  CHECK_FALSE((*be)->register_memory(mem_desc{base, 1024, 0}));
  REQUIRE((*be)->register_memory(mem_desc{base, 512, -1}));
  CHECK_FALSE((*be)->register_memory(mem_desc{base + 100, 512, -1}));
  CHECK((*be)->register_memory(mem_desc{base + 512, 512, -1}));
}

TEST_CASE("a tcp peer sending garbage or a short payload is dropped; the receiver keeps serving") {
  pair_of_ranks p{"tcp", 4096};
  auto ep = p.receiver->endpoint();
  auto colon = ep.address.rfind(':');
  auto port = static_cast<uint16_t>(std::stoi(ep.address.substr(colon + 1)));
  auto raw = [&](const void* data, size_t len) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    ::send(fd, data, len, MSG_NOSIGNAL);
    // Half-close: the receiver sees the short stream end at once.
    ::shutdown(fd, SHUT_WR);
    char buf[256];
    // The receiver answers a refusal or just closes: either way it returns.
    ::recv(fd, buf, sizeof(buf), 0);
    ::close(fd);
  };
  std::string garbage(64, 'x');
  raw(garbage.data(), garbage.size());
  // A valid header announcing a write into registered memory, then the
  // connection closes before the payload: only bytes inside the validated
  // range could have landed, and the receiver survives.
  struct {
    uint32_t magic = 0x4b56524d;
    uint16_t version = 1, reserved = 0;
    uint64_t xfer = 1, tag = 1;
    uint32_t nops = 1, reserved2 = 0;
    uint64_t total = 4096;
    uint64_t dst, len = 4096;
  } hdr;
  hdr.dst = pair_of_ranks::addr(p.dst);
  raw(&hdr, sizeof(hdr));
  auto res = run(*p.sender, p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 4096}}));
  CHECK(res.first);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 4096) == 0);
}

TEST_CASE("choose_endpoint prefers the nearest transport both ends offer") {
  std::vector<endpoint_desc> mine{{"local", "1", 7, 1}, {"tcp", "127.0.0.1:1", 0, 1}};
  std::vector<endpoint_desc> same_proc{{"local", "2", 7, 2}, {"tcp", "127.0.0.1:2", 0, 2}};
  std::vector<endpoint_desc> other_proc{{"local", "2", 8, 2}, {"tcp", "127.0.0.1:2", 0, 2}};
  CHECK(choose_endpoint(same_proc, mine, "auto")->transport == "local");
  CHECK(choose_endpoint(other_proc, mine, "auto")->transport == "tcp");
  CHECK(choose_endpoint(same_proc, mine, "tcp")->transport == "tcp");
  auto none = choose_endpoint(same_proc, mine, "shm");
  REQUIRE_FALSE(none);
  CHECK(describe(none.error()).find("offers no shm endpoint (it offers local, tcp)") != std::string::npos);
  CHECK_FALSE(choose_endpoint({{"local", "2", 8, 2}}, mine, "auto"));
}

TEST_CASE("a peer endpoint that is malformed or from another process is refused") {
  pair_of_ranks p{"local", 64};
  auto b = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 8}});
  b.peer.address = "not-a-number";
  CHECK(p.sender->post(b).status == xfer_status::failed);
  b = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 8}});
  b.peer.domain ^= 1;
  auto res = p.sender->post(b);
  REQUIRE(res.status == xfer_status::failed);
  CHECK(describe(res.error).find("not in this process") != std::string::npos);
  CHECK_FALSE(make_backend(backend_config{"carrier-pigeon", 1, {}}));
}

TEST_CASE("the fault injector fails the selected batches at each point") {
  auto run = [](fault_point point, uint32_t aux_ops, std::string& reason, bool& posted) {
    fault_plan plan;
    plan.rooms = {7};
    plan.point = point;
    pair_of_ranks p{"local", 256, plan};
    auto b = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 128}}, 7);
    b.aux_ops = aux_ops;
    auto res = p.sender->post(b);
    posted = res.status != xfer_status::failed;
    if (point != fault_point::stall)
      return finish(*p.sender, res, reason);
    REQUIRE(res.status == xfer_status::in_progress);
    auto st = p.sender->poll(res.id, reason);
    p.sender->release(res.id);
    return st;
  };
  std::string reason;
  bool posted = false;
  CHECK(run(fault_point::before_post, 0, reason, posted) == xfer_status::failed);
  CHECK_FALSE(posted);
  CHECK(reason.find("injected fault before post (room 7)") != std::string::npos);
  CHECK(run(fault_point::after_post, 0, reason, posted) == xfer_status::failed);
  CHECK(posted);
  CHECK(reason == "injected fault after post (room 7)");
  CHECK(run(fault_point::bad_completion, 0, reason, posted) == xfer_status::failed);
  CHECK(reason.find("bad completion") != std::string::npos);
  CHECK(run(fault_point::stall, 0, reason, posted) == xfer_status::in_progress);
  // slow: nothing has landed right after post; later it all lands and the
  // batch completes without an error.
  {
    fault_plan plan;
    plan.rooms = {7};
    plan.point = fault_point::slow;
    plan.slow_ms = 20;
    pair_of_ranks p{"local", 256, plan};
    std::memset(reinterpret_cast<void*>(pair_of_ranks::addr(p.src)), 0x11, 128);
    std::memset(reinterpret_cast<void*>(pair_of_ranks::addr(p.dst)), 0x22, 128);
    auto b = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 128}}, 7);
    auto res = p.sender->post(b);
    REQUIRE(res.status == xfer_status::in_progress);
    auto id = res.id;
    CHECK(p.sender->poll(id, reason) == xfer_status::in_progress);
    CHECK(*reinterpret_cast<const uint8_t*>(pair_of_ranks::addr(p.dst)) == 0x22);
    auto st = xfer_status::in_progress;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (st == xfer_status::in_progress && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = p.sender->poll(id, reason);
    }
    CHECK(st == xfer_status::done);
    CHECK(*reinterpret_cast<const uint8_t*>(pair_of_ranks::addr(p.dst)) == 0x11);
    p.sender->release(id);
  }
  // on_aux leaves KV-only batches alone and fails those carrying aux data.
  CHECK(run(fault_point::on_aux, 0, reason, posted) == xfer_status::done);
  CHECK(run(fault_point::on_aux, 1, reason, posted) == xfer_status::failed);
  CHECK(reason.find("aux") != std::string::npos);
}

TEST_CASE("the fault injector offers every endpoint of what it wraps") {
  fault_plan plan;
  plan.rooms = {1};
  backend_config cfg{"auto", 1, plan};
  cfg.network = true;
  auto be = make_backend(cfg);
  REQUIRE(be);
  std::vector<std::string> names;
  for (auto& e : (*be)->endpoints())
    names.push_back(e.transport);
  CHECK(names == std::vector<std::string>{"local", "shm", "tcp"});
}

TEST_CASE("targeted faults give each room its own point") {
  fault_plan plan;
  plan.targeted = {{1, fault_point::before_post}, {2, fault_point::after_post}};
  pair_of_ranks p{"local", 64, plan};
  auto batch = [&](room_id r) {
    return p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 8}}, r);
  };
  CHECK(p.sender->post(batch(1)).status == xfer_status::failed);
  auto res = p.sender->post(batch(2));
  REQUIRE(res.status == xfer_status::in_progress);
  std::string reason;
  CHECK(finish(*p.sender, res, reason) == xfer_status::failed);
  CHECK(reason == "injected fault after post (room 2)");
  CHECK(finish(*p.sender, p.sender->post(batch(3)), reason) == xfer_status::done);
}

TEST_CASE("the same seed reproduces the same random faults") {
  auto schedule = [](uint64_t seed) {
    fault_plan plan;
    plan.probability = 0.3;
    plan.seed = seed;
    pair_of_ranks p{"local", 64, plan};
    std::vector<bool> failed;
    for (room_id r = 0; r < 200; ++r) {
      auto res = p.sender->post(p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 8}}, r));
      failed.push_back(res.status == xfer_status::failed);
      if (res.status == xfer_status::in_progress)
        p.sender->release(res.id);
    }
    return failed;
  };
  auto a = schedule(11);
  CHECK(a == schedule(11));
  CHECK(a != schedule(12));
  auto n = std::count(a.begin(), a.end(), true);
  CHECK(n > 30);
  CHECK(n < 90);
  fault_plan bad;
  bad.probability = 1.5;
  CHECK_FALSE(make_backend(backend_config{"local", 1, bad}));
}

namespace {

/// Threads of this process, from /proc.
int thread_count() {
  std::ifstream in{"/proc/self/status"};
  std::string key;
  while (in >> key)
    if (key == "Threads:") {
      int n = 0;
      in >> n;
      return n;
    }
  return -1;
}

/// This process's fds and what each is ("socket:[inode]" with its TCP
/// ports and state from /proc/net/tcp), so a check on the fd count names
/// the fds it did not expect.
std::map<int, std::string> fd_table() {
  std::map<std::string, std::string> tcp; // inode -> "local->remote state"
  std::ifstream net{"/proc/net/tcp"};
  std::string line;
  std::getline(net, line); // the header
  while (std::getline(net, line)) {
    std::istringstream in{line};
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
    in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
    auto port = [](const std::string& a) {
      return std::to_string(std::stoul(a.substr(a.find(':') + 1), nullptr, 16));
    };
    if (!inode.empty())
      tcp[inode] = port(local) + "->" + port(remote) + " state " + state;
  }
  std::map<int, std::string> out;
  if (auto* d = ::opendir("/proc/self/fd")) {
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.')
        continue;
      char target[256] = {};
      auto path = std::string{"/proc/self/fd/"} + e->d_name;
      auto n = ::readlink(path.c_str(), target, sizeof target - 1);
      std::string what = n > 0 ? std::string(target, static_cast<size_t>(n)) : "?";
      if (what.rfind("socket:[", 0) == 0) {
        auto inode = what.substr(8, what.size() - 9);
        if (auto i = tcp.find(inode); i != tcp.end())
          what += " tcp " + i->second;
      }
      out[std::atoi(e->d_name)] = what;
    }
    ::closedir(d);
  }
  return out;
}

/// The fds of `now` that `before` did not have, one per line.
std::string new_fds(const std::map<int, std::string>& before,
                    const std::map<int, std::string>& now) {
  std::string out;
  for (auto& [fd, what] : now) {
    auto i = before.find(fd);
    // The listing's own fds (this function reads /proc while it lists).
    if (what.rfind("/proc/", 0) == 0)
      continue;
    if (i == before.end() || i->second != what)
      out += "fd " + std::to_string(fd) + ": " + what + "\n";
  }
  return out.empty() ? "none" : out;
}

int connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t tcp_port(backend& be) {
  auto ep = be.endpoint();
  return static_cast<uint16_t>(std::stoi(ep.address.substr(ep.address.rfind(':') + 1)));
}

size_t detail_max_handshakes() {
  return 64; // tcp_backend::max_handshakes (the class is private to transport/)
}

/// Connects and answers the receiver's membership challenge as rank
/// `sender` with `secret` (the wire format of tcp_backend.cpp): a member's
/// socket, for tests of what a member may and may not do.
int connect_as_member(uint16_t port, rank_id receiver, const deployment_secret& secret,
                      rank_id sender = 1) {
  int fd = connect_to(port);
  if (fd < 0)
    return -1;
  char challenge[40];
  if (::recv(fd, challenge, sizeof(challenge), MSG_WAITALL) != sizeof(challenge)) {
    ::close(fd);
    return -1;
  }
  auto mac = secret.mac("kvroom/tcp/v1", std::string{challenge + 8, 32}, sender, receiver);
  char proof[48] = {'R', 'P', 'V', 'K'}; // "KVPR" little-endian
  int64_t who = sender;
  std::memcpy(proof + 8, &who, 8);
  std::memcpy(proof + 16, mac.data(), 32);
  ::send(fd, proof, sizeof(proof), MSG_NOSIGNAL);
  return fd;
}

} // namespace

TEST_CASE("tcp: a peer without the deployment secret writes nothing") {
  buffer src("tcp", 4096, 7), dst("tcp", 4096, 0);
  backend_config sc{"tcp", 1, {}};
  sc.secret = deployment_secret{"the sender's secret, not ours"};
  backend_config rc{"tcp", 2, {}};
  rc.secret = deployment_secret{"the receiver's deployment secret"};
  auto s = make_backend(sc);
  auto r = make_backend(rc);
  REQUIRE((s && r));
  REQUIRE((*s)->register_memory(mem_desc{pair_of_ranks::addr(src), 4096, -1}));
  REQUIRE((*r)->register_memory(mem_desc{pair_of_ranks::addr(dst), 4096, -1}));
  REQUIRE((*r)->grant(0, 1, {byte_range{pair_of_ranks::addr(dst), 4096}}));
  write_batch b;
  b.peer = (*r)->endpoint();
  b.ops = {{pair_of_ranks::addr(src), pair_of_ranks::addr(dst), 4096}};
  CHECK_FALSE(run(**s, b).first);
  CHECK(std::all_of(dst.begin(), dst.end(), [](uint8_t x) { return x == 0; }));
  // The same secret on both ends: the same batch lands.
  sc.secret = rc.secret;
  auto member = make_backend(sc);
  REQUIRE(member);
  REQUIRE((*member)->register_memory(mem_desc{pair_of_ranks::addr(src), 4096, -1}));
  CHECK(run(**member, b).first);
  CHECK(dst[0] == 7);
}

TEST_CASE("tcp: a member writes only the pages a live room granted it") {
  pair_of_ranks p{"tcp", 4 * 4096};
  auto base = pair_of_ranks::addr(p.dst);
  auto src = pair_of_ranks::addr(p.src);
  // Room 40 grants rank 1 pages 1 and 2 of dst, nothing else.
  REQUIRE(p.receiver->grant(40, 1, {byte_range{base + 4096, 2 * 4096}}));
  auto zero = [&](size_t from, size_t n) {
    return std::all_of(p.dst.begin() + from, p.dst.begin() + from + n,
                       [](uint8_t x) { return x == 0; });
  };
  // Another page of the same room: refused, not a byte written.
  auto res = run(*p.sender, p.batch({{src, base + 3 * 4096, 4096}}, 40));
  CHECK_FALSE(res.first);
  CHECK(res.second.find("outside the pages room 40 granted it") != std::string::npos);
  CHECK(zero(3 * 4096, 4096));
  // A room that granted nothing: refused.
  res = run(*p.sender, p.batch({{src, base + 4096, 4096}}, 41));
  CHECK_FALSE(res.first);
  CHECK(zero(4096, 4096));
  // The granted pages land, and the connection survived the refusals.
  res = run(*p.sender, p.batch({{src, base + 4096, 2 * 4096}}, 40));
  CHECK(res.first);
  CHECK(std::memcmp(p.src.data(), p.dst.data() + 4096, 2 * 4096) == 0);
  // After the room concluded: refused, nothing changes.
  p.receiver->revoke(40);
  std::fill(p.dst.begin(), p.dst.end(), 0);
  res = run(*p.sender, p.batch({{src, base + 4096, 4096}}, 40));
  CHECK_FALSE(res.first);
  CHECK(zero(0, 4 * 4096));
  // Another member (rank 3) with the grant of rank 1: refused.
  backend_config other{"tcp", 3, {}};
  auto third = make_backend(other);
  REQUIRE(third);
  REQUIRE((*third)->register_memory(mem_desc{src, 4 * 4096, -1}));
  REQUIRE(p.receiver->grant(42, 1, {byte_range{base, 4096}}));
  res = run(**third, p.batch({{src, base, 4096}}, 42));
  CHECK_FALSE(res.first);
  CHECK(res.second.find("rank 3 was granted no pages of room 42") != std::string::npos);
  CHECK(zero(0, 4096));
}

TEST_CASE("tcp: strangers holding every handshake slot take no member's connection") {
  pair_of_ranks p{"tcp", 4096};
  auto batch = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 4096}});
  REQUIRE(run(*p.sender, batch).first); // the member's connection is up
  std::vector<int> idle;
  for (size_t i = 0; i < 2 * detail_max_handshakes(); ++i)
    if (int fd = connect_to(tcp_port(*p.receiver)); fd >= 0)
      idle.push_back(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < 20; ++i)
    CHECK(run(*p.sender, batch).first);
  for (auto fd : idle)
    ::close(fd);
}

TEST_CASE("tcp: a silent stranger is closed at the handshake deadline") {
  auto be = make_backend(backend_config{"tcp", 9, {}});
  REQUIRE(be);
  int fd = connect_to(tcp_port(**be));
  REQUIRE(fd >= 0);
  auto start = std::chrono::steady_clock::now();
  char buf[64];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
    // the challenge; then nothing until the close
  }
  auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  CHECK(took < std::chrono::milliseconds(2500));
}

/// Connections this process's tcp receivers turned away so far (their
/// own count: proofs missing or failed, and gates full).
uint64_t tcp_refusals() {
  uint64_t n = 0;
  for (auto& [kind, count] : detail::limited_warning_counts())
    if (kind == "tcp-unauthenticated" || kind == "tcp-refused-connection")
      n += count;
  return n;
}

TEST_CASE("tcp: a stranger's connect/close loop leaves threads, maps and fds flat, and a member "
          "keeps writing meanwhile") {
  pair_of_ranks p{"tcp", 4096};
  auto port = tcp_port(*p.receiver);
  auto count = [](const char* dir_or_file, bool lines) {
    size_t n = 0;
    if (lines) {
      std::ifstream in{dir_or_file};
      std::string line;
      while (std::getline(in, line))
        ++n;
      return n;
    }
    if (auto* d = ::opendir(dir_or_file)) {
      while (::readdir(d))
        ++n;
      ::closedir(d);
    }
    return n;
  };
  auto member_batch = [&] {
    return run(*p.sender, p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 4096}}))
      .first;
  };
  // Every connection this test makes, and the rank's count of those it
  // turned away: the gate has let go of all of them once the two agree
  // (it closes a connection before it counts it).
  const auto refused_before = tcp_refusals();
  uint64_t made = 0;
  auto in_gate = [&] {
    // Signed: the difference is what the kernel's accept queue and the
    // gate still hold.
    return static_cast<int64_t>(made) - static_cast<int64_t>(tcp_refusals() - refused_before);
  };
  // Bounded in count and in time, whatever the machine's speed. Paced on
  // the rank's own count of connections it turned away, so the kernel's
  // accept queue never holds more than `ahead` (far below SOMAXCONN): a
  // full queue drops SYNs, and each stalls this loop for a second.
  constexpr int64_t ahead = 512;
  auto cycles = [&](uint64_t most, std::chrono::seconds limit) {
    auto end = std::chrono::steady_clock::now() + limit;
    uint64_t done = 0;
    bool member_ok = true;
    for (; done < most && std::chrono::steady_clock::now() < end; ++done) {
      auto wait_end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (in_gate() >= ahead && std::chrono::steady_clock::now() < wait_end)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      int fd = connect_to(port);
      REQUIRE(fd >= 0);
      ::close(fd);
      ++made;
      if (done % 2'000 == 1'999)
        member_ok = member_ok && member_batch();
    }
    CHECK(member_ok);
    return done;
  };
  // The loop ends with up to `ahead` connections still queued for the
  // gate, which takes them one at a time: the fd count then flickers
  // between n and n+1 (measured: 15 in 30-75 % of samples right after the
  // loop, 14 once the gate had counted every connection). A count taken
  // at such a moment was the "one extra fd" seen under ctest -j2; so the
  // settle waits for the gate's own count first, then for the fds.
  auto settle = [&](size_t fds) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (in_gate() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(in_gate() == 0);
    // What the gate closed is gone from the table at once; a member
    // connection being replaced takes a poll round.
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (count("/proc/self/fd", false) > fds && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  REQUIRE(member_batch()); // the member's connection is up
  auto before = thread_count();
  REQUIRE(before > 0);
  auto fds = count("/proc/self/fd", false);
  // The first cycles set up what lasts anyway (the log's buffers, the
  // gate's vectors); the rest must add nothing.
  cycles(2'000, std::chrono::seconds(20));
  settle(fds);
  auto maps = count("/proc/self/maps", true);
  fds = count("/proc/self/fd", false);
  auto table = fd_table();
  // A fixed count, not as many as a time allows (that measured 3,244 in
  // 20 s under ctest -j2 beside a sanitizer build, and failed): enough to
  // show a leak of one thread, map or fd per cycle, within a limit that
  // fits a machine 50 times slower than this one's ~5,000 cycles/s.
  auto done = cycles(5'000, std::chrono::seconds(150));
  INFO(done << " cycles in the measured part");
  REQUIRE(done == 5'000);
  settle(fds);
  CHECK(thread_count() <= before);
  CHECK(count("/proc/self/maps", true) <= maps + 8);
  // Exact: with the gate's queue drained, nothing of 5,000 strangers stays.
  INFO("fds new since the measured part began:\n" << new_fds(table, fd_table()));
  CHECK(count("/proc/self/fd", false) <= fds);
  CHECK(member_batch());
}

TEST_CASE("tcp: a peer trickling a batch is dropped at the batch's deadline, not kept by every byte") {
  backend_config cfg{"tcp", 9, {}};
  cfg.io_timeout_ms = 300;
  auto be = make_backend(cfg);
  REQUIRE(be);
  int fd = connect_as_member(tcp_port(**be), 9, deployment_secret{});
  REQUIRE(fd >= 0);
  // One byte every 50 ms: each recv alone is well inside the timeout.
  auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    char byte = 'K';
    if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) {
      closed = true;
      break;
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 50) > 0) {
      char buf[64];
      closed = ::recv(fd, buf, sizeof(buf), 0) <= 0;
    }
  }
  auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  CHECK(closed);
  CHECK(took < std::chrono::seconds(3));
}

TEST_CASE("tcp: a header announcing a million writes allocates nothing before they arrive") {
  pair_of_ranks p{"tcp", 4096};
  auto rss = [] {
    std::ifstream in{"/proc/self/statm"};
    uint64_t size = 0, resident = 0;
    in >> size >> resident;
    return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  };
  struct {
    uint32_t magic = 0x4b56524d;
    uint16_t version = 1, reserved = 0;
    uint64_t xfer = 1, tag = 1;
    uint32_t nops = 1u << 20, reserved2 = 0;
    uint64_t total = 4096;
  } hdr;
  // 40 strangers each announce 16 MiB of descriptors and send none: held
  // open, they would cost 640 MiB if the count were believed.
  auto before = rss();
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    int fd = connect_as_member(tcp_port(*p.receiver), 2, deployment_secret{});
    REQUIRE(fd >= 0);
    ::send(fd, &hdr, sizeof(hdr), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto grown = rss() - std::min(rss(), before);
  for (auto fd : fds)
    ::close(fd);
  CHECK(grown < (64ull << 20));
  // The member's real batch goes through once the receiver has seen its
  // four silent connections close (on a loaded machine that can take a
  // moment: until then the per-peer bound refuses a fifth).
  auto batch = p.batch({{pair_of_ranks::addr(p.src), pair_of_ranks::addr(p.dst), 4096}});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto res = run(*p.sender, batch);
  while (!res.first && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    res = run(*p.sender, batch);
  }
  INFO(res.second);
  CHECK(res.first);
}

TEST_CASE("tcp: a keyed batch lands at most once, whichever path carries its copy") {
  pair_of_ranks p{"tcp", 8192};
  auto src = pair_of_ranks::addr(p.src);
  auto dst = pair_of_ranks::addr(p.dst);
  auto b = p.batch({{src, dst, 4096}});
  b.key = 77;
  REQUIRE(run(*p.sender, b).first);
  CHECK(std::memcmp(p.src.data(), p.dst.data(), 4096) == 0);
  // The source changes, and the same batch (same key) comes again, as a
  // retry over another path would: it is acknowledged and dropped.
  std::vector<uint8_t> before(p.dst.data(), p.dst.data() + 4096);
  std::memset(p.src.data(), 0xEE, 4096);
  auto again = run(*p.sender, b);
  CHECK(again.first);
  CHECK(std::memcmp(before.data(), p.dst.data(), 4096) == 0);
  // Another key, or an unkeyed batch, lands.
  b.key = 78;
  REQUIRE(run(*p.sender, b).first);
  CHECK(p.dst[0] == 0xEE);
  // Keys are the room's: once its grant is revoked and given again (a new
  // room with the same id), they are forgotten.
  p.receiver->revoke(1);
  REQUIRE(p.receiver->grant(1, 1, {byte_range{dst, 8192}}));
  std::memset(p.src.data(), 0x11, 4096);
  REQUIRE(run(*p.sender, b).first);
  CHECK(p.dst[0] == 0x11);
}

TEST_CASE("tcp: a batch refused for its room leaves the sender's other batches on the connection") {
  pair_of_ranks p{"tcp", 8192};
  auto src = pair_of_ranks::addr(p.src);
  auto dst = pair_of_ranks::addr(p.dst);
  // Room 20 has no grant: refused, but the stream stays usable.
  auto refused = p.batch({{src, dst, 4096}}, 20);
  auto fine = p.batch({{src + 4096, dst + 4096, 4096}}, 1);
  auto r1 = p.sender->post(refused);
  auto r2 = p.sender->post(fine);
  REQUIRE(r1.status == xfer_status::in_progress);
  REQUIRE(r2.status == xfer_status::in_progress);
  std::string why1, why2;
  CHECK(finish(*p.sender, r1, why1) == xfer_status::failed);
  CHECK(finish(*p.sender, r2, why2) == xfer_status::done);
  INFO(why1);
  CHECK(why1.find("grants rank 1 no pages") != std::string::npos);
  CHECK(std::memcmp(p.src.data() + 4096, p.dst.data() + 4096, 4096) == 0);
}

TEST_CASE("tcp: a batch the post already knows failed is answered failed, not in progress") {
  buffer src("tcp", 4096, 7);
  auto s = make_backend(backend_config{"tcp", 1, {}});
  REQUIRE(s);
  REQUIRE((*s)->register_memory(mem_desc{pair_of_ranks::addr(src), 4096, -1}));
  // A port nothing listens on: bound, never listened to, then closed.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  write_batch b;
  b.peer = (*s)->endpoint();
  b.peer.owner = 2;
  b.peer.address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  b.ops = {{pair_of_ranks::addr(src), 0x1000, 4096}};
  auto res = (*s)->post(b);
  CHECK(res.status == xfer_status::failed);
  CHECK(is(res.error, errc::transport_error));
  INFO(describe(res.error));
  CHECK(describe(res.error).find("tcp to 127.0.0.1:") != std::string::npos);
}

TEST_CASE("expand_strided: each strided write's rows in order, before the plain writes") {
  write_batch b;
  b.room = 7;
  b.key = 9;
  b.aux_ops = 1;
  b.ops = {{1000, 2000, 8}, {3000, 4000, 16}};
  b.strided = {{10, 20, 4, 3, 8, 4}, {100, 200, 2, 1, 0, 0}};
  CHECK(b.total_bytes() == 8 + 16 + 12 + 2);
  CHECK(b.descriptors() == 4);
  auto x = expand_strided(b);
  CHECK(x.room == 7);
  CHECK(x.key == 9);
  CHECK(x.aux_ops == 1);
  CHECK(x.strided.empty());
  REQUIRE(x.ops.size() == 6);
  std::vector<std::array<uint64_t, 3>> got;
  for (auto& op : x.ops)
    got.push_back({op.src_addr, op.dst_addr, op.size_bytes});
  CHECK(got
        == std::vector<std::array<uint64_t, 3>>{
          {10, 20, 4}, {18, 24, 4}, {26, 28, 4}, {100, 200, 2}, {1000, 2000, 8}, {3000, 4000, 16}});
  CHECK(x.total_bytes() == b.total_bytes());
  uint64_t span = 0;
  CHECK(b.strided[0].span(true, span));
  CHECK(span == 2 * 8 + 4);
  CHECK(b.strided[0].span(false, span));
  CHECK(span == 2 * 4 + 4);
  CHECK_FALSE(strided_write{0, 0, 4, 0, 8, 8}.span(true, span));
  CHECK_FALSE(strided_write{UINT64_MAX - 10, 0, 4, 3, 8, 8}.span(true, span));
  CHECK_FALSE(strided_write{0, 0, 4, 3, UINT64_MAX / 2 + 1, 8}.span(true, span));
}
