#include "kvroom/transport/grace_period.hpp"

#include <utility>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvroom/messages/assert.hpp"

namespace kvroom::detail {

bool grace_period_mode::light = false;

namespace {

int membarrier(int cmd) {
  return static_cast<int>(::syscall(__NR_membarrier, cmd, 0, 0));
}

/// Every thread's slot. A thread takes one on its first section and hands it
/// back when it exits; slots are reused, never freed, so `synchronize` may
/// wait on one outside the mutex (its counter only moves on). As many as
/// the process ever ran threads at once.
struct registry {
  std::mutex mtx;
  std::vector<std::unique_ptr<grace_period::slot>> slots;
  std::vector<grace_period::slot*> free;
  std::once_flag probed;
};

registry& the_registry() {
  // Leaked on purpose: threads may exit (and leave) after static
  // destructors ran.
  static auto* instance = new registry;
  return *instance;
}

} // namespace

void grace_period::probe() {
  // Decided once, before any slot exists, so every reader runs in the mode
  // it will be waited for in.
  std::call_once(the_registry().probed, [] {
    auto cmds = membarrier(MEMBARRIER_CMD_QUERY);
    grace_period_mode::light = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0
                               && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    ::pthread_atfork(fork_prepare, fork_parent, fork_child);
  });
}

void grace_period::fork_prepare() {
  // Held across fork: the child must not inherit it locked by a thread it
  // does not have.
  the_registry().mtx.lock();
}

void grace_period::fork_parent() {
  the_registry().mtx.unlock();
}

void grace_period::fork_child() {
  // The child has the forking thread only. Every other slot is free now,
  // and none may stay odd: a thread that was copying when the process
  // forked would make every later grace period in the child wait for ever.
  // A membarrier registration is not inherited: register again, or let
  // readers fence themselves.
  auto& reg = the_registry();
  reg.free.clear();
  for (auto& s : reg.slots) {
    if (s.get() == current_slot_)
      continue;
    auto seq = s->seq.load(std::memory_order_relaxed);
    s->seq.store(seq + (seq & 1), std::memory_order_relaxed);
    s->depth = 0;
    reg.free.push_back(s.get());
  }
  if (grace_period_mode::light)
    grace_period_mode::light = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  reg.mtx.unlock();
}

/// Hands the thread's slot back when the thread exits.
struct grace_period_slot_owner {
  grace_period::slot* slot = nullptr;

  ~grace_period_slot_owner() {
    auto& reg = the_registry();
    std::lock_guard<std::mutex> guard{reg.mtx};
    reg.free.push_back(slot);
    // A section opened later in this thread's exit re-attaches nothing: it
    // would find a destroyed owner, so none may be opened (none is: posts
    // run on live threads).
    grace_period::current_slot_ = nullptr;
  }
};

grace_period::slot* grace_period::attach() {
  auto& reg = the_registry();
  probe();
  thread_local grace_period_slot_owner owner;
  {
    std::lock_guard<std::mutex> guard{reg.mtx};
    if (reg.free.empty()) {
      reg.slots.push_back(std::make_unique<slot>());
      owner.slot = reg.slots.back().get();
    } else {
      owner.slot = reg.free.back();
      reg.free.pop_back();
    }
  }
  current_slot_ = owner.slot;
  return current_slot_;
}

size_t grace_period::slots_in_use() {
  auto& reg = the_registry();
  std::lock_guard<std::mutex> guard{reg.mtx};
  return reg.slots.size() - reg.free.size();
}

void grace_period::synchronize() {
  KVROOM_ASSERT(current_slot_ == nullptr || current_slot_->depth == 0);
  auto& reg = the_registry();
  probe();
  // Orders the caller's publication before the slots are read; in light
  // mode the membarrier gives every reader's compiler barrier the same
  // weight.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (grace_period_mode::light)
    (void) membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  // The sections open now, read under the mutex and waited for outside it:
  // a TCP receiver's section lasts while its payload arrives, and threads
  // taking their first slot meanwhile must not wait for that.
  std::vector<std::pair<slot*, uint64_t>> open;
  {
    std::lock_guard<std::mutex> guard{reg.mtx};
    for (auto& s : reg.slots) {
      auto seen = s->seq.load(std::memory_order_acquire);
      if ((seen & 1) != 0)
        open.emplace_back(s.get(), seen);
    }
  }
  for (auto [s, seen] : open) {
    // A section copies at most one batch: yield a little, then sleep; a
    // reader preempted mid-copy is waited for, not spun on.
    for (int spins = 0; s->seq.load(std::memory_order_acquire) == seen; ++spins) {
      if (spins < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

} // namespace kvroom::detail
