// Moves one room through an installed kvroom and checks it landed.
#include <chrono>
#include <cstdio>
#include <thread>

#include <kvroom/kvroom.hpp>

int main() {
  kvroom::runtime rt{kvroom::runtime_options{"sharing", 0, "warn"}};
  kvroom::kv_shape shape;
  kvroom::host_kv_cache src{shape}, dst{shape};
  kvroom::rank_config pc, dc;
  pc.side = kvroom::role::prefill;
  pc.memory = src.layout();
  dc.side = kvroom::role::decode;
  dc.memory = dst.layout();
  auto p = rt.add_rank(pc);
  auto d = rt.add_rank(dc);
  if (!p || !d)
    return 1;
  auto s = (*p)->make_sender(1);
  auto r = (*d)->make_receiver(1);
  src.write_room(1, {0, 1}, 0);
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
  bool ok = r->poll() == kvroom::kv_poll::success && dst.check_room(1, {5, 6}, 1);
  std::printf("consumer: %s\n", ok ? "room 1 landed byte-exact" : "FAILED");
  s->clear();
  r->clear();
  p->reset();
  d->reset();
  return ok ? 0 : 1;
}
