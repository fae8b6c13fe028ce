#pragma once

// CAF 0.17's scheduler workers without the per-job bookkeeping of a logger
// that logs nothing. Included by quiet_clock.cpp only, which loads them.
//
// Debian's CAF 0.17.6 compiles its logging macros in at level QUIET, where
// no log statement is left, yet for every job a worker resumes:
// - CAF's worker loop (`caf/scheduler/worker.hpp`) `dynamic_cast`s the job
//   to an actor, a cross-cast that walks the type's whole hierarchy, only to
//   push the actor's id into the thread's logger;
// - that loop and `scheduled_actor::resume` (compiled into libcaf_core)
//   each record the id in the logger under a shared spinlock and a hash of
//   the thread's id, and restore it afterwards.
// `perf record --call-graph dwarf` over `kvroom-bench rooms
// --concurrency=256`: the logger's spinlock and map 8 % of all samples, the
// cast 4 %. `quiet_policy` runs CAF's policy with a worker whose loop is
// CAF's, step for step, without either; the library's `resume` skips its
// part when the thread has no current logger, which this worker never sets
// and clears after a spawn from one of its jobs set it.
//
// A CAF built to log keeps CAF's own worker and logger.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "caf/actor_system.hpp"
#include "caf/detail/build_config.hpp"
#include "caf/detail/set_thread_name.hpp"
#include "caf/execution_unit.hpp"
#include "caf/logger.hpp"
#include "caf/resumable.hpp"
#include "caf/scheduler/coordinator.hpp"
#include "caf/scheduler/worker.hpp"

namespace kvroom::detail {

/// CAF's scheduling policy `Base` (work sharing or work stealing), as it
/// is; its own type selects the worker below.
template <class Base>
class quiet_policy : public Base {
public:
  template <class Worker>
  void before_resume(Worker* worker, caf::resumable* job) {
#if CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET
    // A spawn from the last job set the logger on this thread (CAF's
    // `spawn_impl` does): without it, `resume` skips the logger.
    if (caf::logger::current_logger() != nullptr)
      caf::logger::set_current_actor_system(nullptr);
#endif
    Base::before_resume(worker, job);
  }
};

} // namespace kvroom::detail

#if CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET

namespace caf::scheduler {

/// The worker of a `quiet_policy`: CAF's `worker<Policy>` with the same
/// interface (what the coordinator and both policies call), its loop
/// without the logger's lines.
template <class Base>
class worker<kvroom::detail::quiet_policy<Base>> : public execution_unit {
public:
  using policy_type = kvroom::detail::quiet_policy<Base>;
  using job_ptr = resumable*;
  using coordinator_ptr = coordinator<policy_type>*;
  using policy_data = typename policy_type::worker_data;

  worker(size_t worker_id, coordinator_ptr parent, const policy_data& init, size_t throughput)
    : execution_unit(&parent->system()),
      max_throughput_(throughput),
      id_(worker_id),
      parent_(parent),
      data_(init) {
    // nop
  }

  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  void start() {
    thread_ = std::thread{[this] {
      detail::set_thread_name("kvroom.worker");
      system().thread_started();
      run();
      system().thread_terminates();
    }};
  }

  /// A job from any other thread.
  void external_enqueue(job_ptr job) {
    policy_.external_enqueue(this, job);
  }

  /// A job from the one this worker runs now (this thread only).
  void exec_later(job_ptr job) override {
    policy_.internal_enqueue(this, job);
  }

  coordinator_ptr parent() {
    return parent_;
  }

  size_t id() const {
    return id_;
  }

  std::thread& get_thread() {
    return thread_;
  }

  policy_data& data() {
    return data_;
  }

  size_t max_throughput() {
    return max_throughput_;
  }

  /// Jobs this worker resumed: an actor scheduled once more, for any
  /// number of messages (benchmarks divide it by rooms).
  uint64_t resumed() const noexcept {
    return resumed_.load(std::memory_order_relaxed);
  }

private:
  void run() {
    for (;;) {
      auto job = policy_.dequeue(this);
      policy_.before_resume(this, job);
      // One writer: no read-modify-write, no line shared with another worker.
      resumed_.store(resumed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      auto res = job->resume(this, max_throughput_);
      policy_.after_resume(this, job);
      switch (res) {
        case resumable::resume_later:
          // The job stays referenced: it is still in the loop.
          policy_.resume_job_later(this, job);
          break;
        case resumable::done:
          policy_.after_completion(this, job);
          intrusive_ptr_release(job);
          break;
        case resumable::awaiting_message:
          // Scheduled again by its next message, referenced again then.
          intrusive_ptr_release(job);
          break;
        case resumable::shutdown_execution_unit:
          policy_.after_completion(this, job);
          policy_.before_shutdown(this);
          return;
      }
    }
  }

  size_t max_throughput_;
  std::thread thread_;
  size_t id_;
  coordinator_ptr parent_;
  policy_data data_;
  policy_type policy_;
  std::atomic<uint64_t> resumed_{0};
};

} // namespace caf::scheduler

#endif // CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET
