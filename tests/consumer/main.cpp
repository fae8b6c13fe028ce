// Moves rooms through an installed kvroom and checks what landed: a
// scheduler that registers its own buffers and builds its ranks' data plane
// itself, as an embedder does; then reads back what the API reports
// (failures, metrics, stats, the other side's shape, paths, transports) and
// chooses a directory store. It includes only <kvroom/kvroom.hpp>: whatever
// the API declares must be callable from the installed package.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <kvroom/kvroom.hpp>

namespace {

constexpr uint64_t page_bytes = 4096;
constexpr uint64_t pages = 16;
constexpr uint64_t aux_bytes = 64;
constexpr uint64_t aux_slots = 4;

/// One K buffer and one aux buffer, in the scheduler's own memory.
struct cache {
  std::vector<uint8_t> kv = std::vector<uint8_t>(page_bytes * pages);
  std::vector<uint8_t> aux = std::vector<uint8_t>(aux_bytes * aux_slots);

  kvroom::memory_layout layout() {
    kvroom::memory_layout out;
    out.kv.push_back({{reinterpret_cast<uint64_t>(kv.data()), kv.size(), -1}, page_bytes});
    out.aux.push_back({{reinterpret_cast<uint64_t>(aux.data()), aux.size(), -1}, aux_bytes});
    return out;
  }
};

} // namespace

int main() {
  // Options that cannot work are refused by name before anything starts.
  kvroom::runtime_options bad{"fifo", 0, "warn"};
  auto refused = kvroom::check_options(bad);
  if (!refused || kvroom::describe(refused).find("'fifo'") == std::string::npos) {
    std::fprintf(stderr, "consumer: an unknown scheduler policy was not refused\n");
    return 1;
  }
  kvroom::runtime rt{kvroom::runtime_options{"central", 0, "warn"}};
  cache src, dst;
  for (size_t i = 0; i < src.kv.size(); ++i)
    src.kv[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < src.aux.size(); ++i)
    src.aux[i] = static_cast<uint8_t>(i + 3);
  kvroom::rank_config pc, dc;
  pc.side = kvroom::role::prefill;
  pc.memory = src.layout();
  // The prefill rank's data plane built by the embedder: here kvroom's own
  // backend, through the same factory call a rank makes.
  int built = 0;
  std::string plane;
  pc.data_plane = [&](const kvroom::backend_config& bc) {
    ++built;
    auto made = kvroom::make_backend(bc);
    if (made)
      plane = (*made)->name();
    return made;
  };
  dc.side = kvroom::role::decode;
  dc.memory = dst.layout();
  auto p = rt.add_rank(pc);
  auto d = rt.add_rank(dc);
  if (!p || !d)
    return 1;
  auto s = (*p)->make_sender(1);
  auto r = (*d)->make_receiver(1);
  bool sent = false, received = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!received && r->poll() == kvroom::kv_poll::waiting_for_input)
      received = !r->init({5, 6}, 1);
    if (!sent && s->poll() == kvroom::kv_poll::waiting_for_input)
      sent = !s->init(2, 0) && !s->send({0, 1}, true);
    if (kvroom::is_terminal(r->poll()) && kvroom::is_terminal(s->poll()))
      break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  bool ok = r->poll() == kvroom::kv_poll::success;
  for (uint64_t i = 0; ok && i < 2 * page_bytes; ++i)
    ok = dst.kv[5 * page_bytes + i] == src.kv[i];
  for (uint64_t i = 0; ok && i < aux_bytes; ++i)
    ok = dst.aux[aux_bytes + i] == src.aux[i];
  // A call on a concluded room does nothing (a peer's abort may race any
  // call): the outcome is poll()'s to tell, and the rank counts the call.
  auto again = s->send({2}, true);
  ok = ok && !again && p->get()->calls_after_conclusion() == 1;
  std::printf("consumer: %s (data plane %s, built %d time)\n",
              ok ? "room 1 landed byte-exact" : "FAILED", plane.c_str(), built);
  ok = ok && built == 1 && !plane.empty();
  // A room the decode side aborts: both sides read Failed, decode as the
  // origin, with its cause as a value.
  {
    auto s2 = (*p)->make_sender(2);
    auto r2 = (*d)->make_receiver(2);
    (void) r2->abort("scheduler gave up");
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until
           && !(kvroom::is_terminal(s2->poll()) && kvroom::is_terminal(r2->poll())))
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    auto mine = r2->failure();
    auto theirs = s2->failure();
    bool failed = s2->poll() == kvroom::kv_poll::failed && r2->poll() == kvroom::kv_poll::failed
                  && mine && theirs && !mine->is_from_another_rank
                  && theirs->is_from_another_rank && theirs->origin_rank == (*d)->ref().id
                  && theirs->cause == kvroom::failure_cause::abort;
    std::printf("consumer: room 2 %s: %s (cause %s)\n", failed ? "failed as asked" : "FAILED",
                theirs ? to_string(*theirs).c_str() : "no failure",
                theirs ? to_string(theirs->cause).c_str() : "-");
    ok = ok && failed;
    (void) s2->clear();
    (void) r2->clear();
  }
  // What the API reports: metrics and their Prometheus text, the manager's
  // counters, the other side's shape, the paths and the transports here.
  {
    auto m = (*d)->metrics();
    auto text = kvroom::prometheus_text({m, (*p)->metrics()}, kvroom::process_refusals());
    auto stats = (*d)->stats();
    auto shape = (*d)->shape_of_side(kvroom::role::prefill);
    auto transports = kvroom::probe_backends();
    bool reported = m.rooms_success == 1 && m.rooms_failed == 1
                    && text.find("kvroom_") != std::string::npos && stats
                    && stats->successes == 1 && shape && shape->ranks == 1 && shape->tp_size == 1
                    && !transports.empty() && kvroom::health_of({m}).ready;
    std::printf("consumer: reports %s (%zu bytes of metrics, %zu transports, %zu paths)\n",
                reported ? "ok" : "FAILED", text.size(), transports.size(),
                (*p)->paths().size());
    ok = ok && reported;
  }
  // The directory kept in a store is the API's too: a scheme no store
  // serves is refused by name, and an etcd that does not answer is an error
  // within the timeout (no etcd runs here).
  {
    kvroom::runtime_options o{"central", 0, "error"};
    o.network = true;
    kvroom::runtime net{o};
    kvroom::directory_options dir;
    dir.url = "consul://127.0.0.1:8500";
    auto unknown = net.use_directory(dir, 200);
    dir.url = "etcd://127.0.0.1:1";
    auto unreachable = net.use_directory(dir, 300);
    std::printf("consumer: use_directory: %s; %s\n", to_string(unknown).c_str(),
                to_string(unreachable).c_str());
    ok = ok && unknown && unreachable;
  }
  (void) s->clear();
  (void) r->clear();
  p->reset();
  d->reset();
  return ok ? 0 : 1;
}
