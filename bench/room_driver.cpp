#include "room_driver.hpp"

#include <cstdio>
#include <cstdlib>

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

bench_group::~bench_group() {
  decode.clear();
  prefill.clear();
}

room_driver::room_driver(bench_group& g, size_t concurrency, room_id first_room)
  : g_(g), concurrency_(concurrency), next_(first_room) {
  for (size_t s = concurrency; s-- > 0;)
    free_slots_.push_back(s);
}

std::vector<int64_t> room_driver::pages(size_t slot) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < g_.pages_per_room; ++i)
    out.push_back(static_cast<int64_t>(slot) * g_.pages_per_room + i);
  return out;
}

void room_driver::finish(double max_seconds) {
  admit = false;
  auto deadline = std::chrono::steady_clock::now()
                  + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(max_seconds));
  while (!in_flight_.empty() && std::chrono::steady_clock::now() < deadline)
    step();
}

bool room_driver::step() {
  bool progressed = false;
  auto tp = static_cast<size_t>(g_.tp);
  while (admit && !free_slots_.empty()) {
    room r;
    r.id = next_++;
    r.slot = free_slots_.back();
    free_slots_.pop_back();
    r.opened = std::chrono::steady_clock::now();
    for (size_t t = 0; t < tp; ++t) {
      auto recv = g_.decode[t]->make_receiver(r.id);
      auto send = g_.prefill[t]->make_sender(r.id);
      if (!recv || !send) {
        std::fprintf(stderr, "cannot open room: %s\n",
                     describe(recv ? send.error() : recv.error()).c_str());
        std::exit(2);
      }
      r.receivers.push_back(*recv);
      r.senders.push_back(*send);
    }
    r.sent.assign(tp, 0);
    r.received.assign(tp, 0);
    in_flight_.push_back(std::move(r));
    progressed = true;
  }
  for (auto i = in_flight_.begin(); i != in_flight_.end();) {
    auto& r = *i;
    bool done = true;
    for (size_t t = 0; t < tp; ++t) {
      auto st = r.receivers[t].poll();
      if (!r.received[t] && st == kv_poll::waiting_for_input) {
        r.received[t] = 1;
        (void) r.receivers[t].init(pages(r.slot), static_cast<int64_t>(r.slot));
        progressed = true;
      }
      done = done && is_terminal(st);
      st = r.senders[t].poll();
      if (!r.sent[t] && st == kv_poll::waiting_for_input) {
        r.sent[t] = 1;
        auto p = pages(r.slot);
        (void) r.senders[t].init(p.size(), static_cast<int64_t>(r.slot));
        (void) r.senders[t].send(std::move(p), true);
        progressed = true;
      }
      done = done && is_terminal(st);
    }
    if (!done) {
      ++i;
      continue;
    }
    bool ok = true;
    for (size_t t = 0; t < tp; ++t) {
      ok = ok && r.receivers[t].poll() == kv_poll::success;
      (void) r.receivers[t].clear();
      (void) r.senders[t].clear();
    }
    (ok ? succeeded : failed) += 1;
    latencies_us.push_back(std::chrono::duration<double, std::micro>(
                             std::chrono::steady_clock::now() - r.opened)
                             .count());
    free_slots_.push_back(r.slot);
    // Order does not matter to a scheduler loop: swap-remove in O(1).
    if (&*i != &in_flight_.back())
      *i = std::move(in_flight_.back());
    in_flight_.pop_back();
    progressed = true;
  }
  return progressed;
}

} // namespace kvroom::bench
