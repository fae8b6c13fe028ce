#include "room_driver.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <thread>

namespace kvroom::bench {

bench_group::bench_group(runtime& rt, int tp_size, const kv_shape& shape,
                         int64_t ppr)
  : tp(tp_size), pages_per_room(ppr) {
  auto g = local_group::start(rt, tp, shape);
  if (!g) {
    std::fprintf(stderr, "%s\n", describe(g.error()).c_str());
    std::exit(2);
  }
  prefill_mem = std::move((*g)->prefill_mem);
  decode_mem = std::move((*g)->decode_mem);
  prefill = std::move((*g)->prefill);
  decode = std::move((*g)->decode);
}

bench_group::bench_group(runtime& rt, int prefill_tp, int decode_tp,
                         const parallel_layout& model, const kv_shape& shape, int64_t ppr)
  : tp(prefill_tp), pages_per_room(ppr) {
  auto g = local_group::start(rt, prefill_tp, decode_tp, model, shape);
  if (!g) {
    std::fprintf(stderr, "%s\n", describe(g.error()).c_str());
    std::exit(2);
  }
  prefill_mem = std::move((*g)->prefill_mem);
  decode_mem = std::move((*g)->decode_mem);
  prefill = std::move((*g)->prefill);
  decode = std::move((*g)->decode);
}

bench_group::bench_group(std::unique_ptr<local_group> g, int64_t ppr)
  : tp(g->tp()), pages_per_room(ppr) {
  prefill_mem = std::move(g->prefill_mem);
  decode_mem = std::move(g->decode_mem);
  prefill = std::move(g->prefill);
  decode = std::move(g->decode);
}

bench_group::~bench_group() {
  decode.clear();
  prefill.clear();
}

room_driver::room_driver(bench_group& g, size_t concurrency, room_id first_room)
  : g_(g),
    loop_(ranks_of(g.prefill), ranks_of(g.decode), 0, concurrency, first_room,
          std::numeric_limits<uint64_t>::max() / 2, hooks()) {
  // nop
}

loop_hooks room_driver::hooks() {
  loop_hooks h;
  h.receiver_ready = [this](loop_room& r, int t) {
    (void) r.receivers[static_cast<size_t>(t)].init(decode_pages(r.slot),
                                                   static_cast<int64_t>(r.slot));
    return true;
  };
  h.sender_ready = [this](loop_room& r, int t) {
    auto p = pages(r.slot);
    auto& s = r.senders[static_cast<size_t>(t)];
    (void) s.init(p.size(), static_cast<int64_t>(r.slot));
    (void) s.send(std::move(p), true);
    return true;
  };
  h.concluded = [this](loop_room& r) {
    bool ok = true;
    for (auto& x : r.receivers)
      ok = ok && x.poll() == kv_poll::success;
    (ok ? succeeded : failed) += 1;
    latencies_us.push_back(std::chrono::duration<double, std::micro>(
                             std::chrono::steady_clock::now() - r.opened)
                             .count());
  };
  return h;
}

std::vector<int64_t> room_driver::pages(size_t slot) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < g_.pages_per_room; ++i)
    out.push_back(static_cast<int64_t>(slot) * g_.pages_per_room + i);
  return out;
}

void room_driver::finish(double max_seconds) {
  loop_.stop_admitting();
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(max_seconds));
  while (!loop_.done() && std::chrono::steady_clock::now() < deadline)
    step();
}

double room_driver::run_for(double seconds) {
  auto t0 = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  while (since() < seconds)
    if (!step())
      std::this_thread::yield();
  finish();
  return since();
}

bool room_driver::step() {
  auto progressed = loop_.step();
  if (!loop_.open_error().empty()) {
    std::fprintf(stderr, "cannot open room: %s\n", loop_.open_error().c_str());
    std::exit(2);
  }
  return progressed;
}

std::vector<int64_t> room_driver::decode_pages(size_t slot) const {
  if (decode_order.empty())
    return pages(slot);
  std::vector<int64_t> out;
  for (auto i : decode_order)
    out.push_back(static_cast<int64_t>(slot) * g_.pages_per_room + i);
  return out;
}

} // namespace kvroom::bench
