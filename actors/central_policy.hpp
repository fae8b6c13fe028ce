#pragma once

// CAF 0.17's work sharing (one queue every worker takes its jobs from)
// without what CAF's version costs per hand-off. Included by
// quiet_clock.cpp only, which loads it as the scheduling policy "central".
//
// A room is a few actors that message each other a few times each: every
// message to an idle actor is a job on the shared queue, and on 2 cores a
// room's whole budget in CAF is about 9 us. CAF's `work_sharing`:
// - puts every worker that finds the queue empty to sleep at once, so the
//   next job, usually made microseconds later, waits for a futex wake and a
//   context switch (tens of microseconds on a virtualised machine);
// - signals its condition variable while it holds the queue's lock, so the
//   worker it wakes runs only to block on that lock;
// - allocates a list node per job.
// `perf record --call-graph dwarf -e syscalls:sys_enter_futex` over
// `kvroom-bench rooms` put most of the workers' futex calls in that lock
// and that condition variable.
//
// This policy keeps CAF's semantics (FIFO, any worker takes any job, a job
// that yields goes to the back, a sleeping worker is signalled for a new
// job as in CAF) and changes how: jobs sit in a ring; one worker at a time,
// finding the queue empty, looks again for a few microseconds, yielding its
// core between looks, before it sleeps (and mostly stops looking while its
// looks find nothing); an enqueue signals outside the
// lock, and only when a worker sleeps that no earlier signal is on its way
// to. Measured in docs/performance.md ("The scheduler's central queue").
//
// The one lock in actors/, and why: this is not actor state but the run
// queue beneath every actor, shared by the worker threads by definition
// (CAF's policies guard theirs with a mutex and a condition variable too).
// No handler ever runs under it; it guards a push or a pop.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <thread>

#include "caf/policy/unprofiled.hpp"
#include "caf/resumable.hpp"
#include "caf/scheduler/abstract_coordinator.hpp"

namespace kvroom::detail {

/// The queue's lock: glibc's adaptive mutex, which spins a little before it
/// sleeps. A push or a pop holds it for nanoseconds, and a plain mutex
/// sleeps in the kernel at the first contention: with two workers and the
/// scheduler's thread on the queue, `perf record -e
/// syscalls:sys_enter_futex` over `kvroom-bench rooms --concurrency=256`
/// found nine futex calls in ten on it.
class queue_mutex {
public:
  queue_mutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&mutex_, &attr);
    pthread_mutexattr_destroy(&attr);
  }

  ~queue_mutex() {
    pthread_mutex_destroy(&mutex_);
  }

  queue_mutex(const queue_mutex&) = delete;
  queue_mutex& operator=(const queue_mutex&) = delete;

  void lock() noexcept {
    pthread_mutex_lock(&mutex_);
  }

  void unlock() noexcept {
    pthread_mutex_unlock(&mutex_);
  }

private:
  pthread_mutex_t mutex_;
};

/// The central job queue's scheduling policy (see above).
class central_policy : public caf::policy::unprofiled {
public:
  /// How long a worker that found the queue empty looks again before it
  /// sleeps. A room's next job is usually made within microseconds by the
  /// other worker, the scheduler's thread or the middleman's; a sleeping
  /// worker costs a futex wake and a context switch to get back (tens of
  /// microseconds on a virtualised machine). Measured: 10 us (30 us was no
  /// better).
  static constexpr auto spin_time = std::chrono::microseconds(10);

  /// Bounds of the spin score (below), and how often a worker spins all the
  /// same once spins stopped finding work.
  static constexpr int max_spin_score = 8;
  static constexpr uint32_t probe_every = 8;

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {
      // nop
    }

    queue_mutex lock;
    std::condition_variable_any cv;
    /// Jobs in the order they came (guarded by lock). Bounded by the
    /// actors that exist: an actor is at most once in the queue.
    std::deque<caf::resumable*> queue;
    /// Workers waiting on cv, and those of them a signal is on its way to
    /// (both guarded by lock).
    size_t sleeping = 0;
    size_t signalled = 0;
    /// queue.size(), for the spinning worker, which reads it without the lock.
    std::atomic<size_t> length{0};
    /// Whether a worker spins now: one at a time.
    std::atomic<bool> spinner{false};
    /// How spins went lately (success +2, failure -1), and the idles that
    /// did not spin for it: the spinner's alone (it holds `spinner`).
    int spin_score = 0;
    uint32_t skipped_spins = 0;
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {
      // nop
    }
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(d(self), job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  /// A job that gave up its worker goes to the back, as in CAF's policies.
  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& q = d(self->parent());
    if (auto* job = spin(q))
      return job;
    std::unique_lock<queue_mutex> guard{q.lock};
    while (q.queue.empty()) {
      ++q.sleeping;
      q.cv.wait(guard);
      --q.sleeping;
      // A spurious wake-up takes no signal: one still on its way counts.
      if (q.signalled > 0)
        --q.signalled;
    }
    return pop(q);
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker*, UnaryFunction) {
    // nop: workers hold no jobs of their own
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& q = d(self);
    std::lock_guard<queue_mutex> guard{q.lock};
    while (!q.queue.empty())
      f(pop(q));
  }

private:
  /// Looks at the queue for `spin_time` before the caller sleeps, giving
  /// the core to any other runnable thread between looks (a spinner that
  /// only paused cost the scheduler's thread its core on 2 cores: rooms/s
  /// at 16 and 64 in flight fell below CAF's policy). One worker at a time
  /// spins; the others sleep at once, for the same reason.
  static caf::resumable* spin(coordinator_data& q) {
    if (q.spinner.exchange(true, std::memory_order_acquire))
      return nullptr;
    caf::resumable* job = nullptr;
    // Spins that keep finding nothing (a process that waits on the network
    // between jobs) stop, but for one idle in `probe_every`: their yields
    // cost the threads that make the work their cores.
    if (q.spin_score < 0 && ++q.skipped_spins % probe_every != 0) {
      q.spinner.store(false, std::memory_order_release);
      return nullptr;
    }
    auto until = std::chrono::steady_clock::now() + spin_time;
    do {
      if (q.length.load(std::memory_order_relaxed) > 0) {
        std::lock_guard<queue_mutex> guard{q.lock};
        if (!q.queue.empty()) {
          job = pop(q);
          break;
        }
      }
      std::this_thread::yield();
    } while (std::chrono::steady_clock::now() < until);
    q.spin_score = job != nullptr ? std::min(q.spin_score + 2, max_spin_score)
                                  : std::max(q.spin_score - 1, -max_spin_score);
    // Cleared before the caller takes the lock to sleep: an enqueue after
    // that sees a sleeper to signal (it signals past a spinner anyway).
    q.spinner.store(false, std::memory_order_release);
    return job;
  }

  static void enqueue(coordinator_data& q, caf::resumable* job) {
    bool wake = false;
    {
      std::lock_guard<queue_mutex> guard{q.lock};
      q.queue.push_back(job);
      q.length.store(q.queue.size(), std::memory_order_relaxed);
      // A sleeper already signalled takes this job or the one before it;
      // the others are awake and take it after their current job.
      // Past a spinner too: one that yielded its core may not run for a
      // while on a busy machine (measured: leaving jobs to the spinner cost
      // rooms/s across processes, 2-5 processes on 2 cores).
      if (q.sleeping > q.signalled) {
        ++q.signalled;
        wake = true;
      }
    }
    // Outside the lock: the woken worker's first step is to take it.
    if (wake)
      q.cv.notify_one();
  }

  static caf::resumable* pop(coordinator_data& q) {
    auto* job = q.queue.front();
    q.queue.pop_front();
    q.length.store(q.queue.size(), std::memory_order_relaxed);
    return job;
  }
};

} // namespace kvroom::detail
