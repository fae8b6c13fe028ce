#pragma once

// CAF 0.17's system clock without one wake-up of its thread per actor end.
//
// `local_actor::cleanup` cancels the ending actor's timeouts through the
// clock thread's queue whether the actor set any or not: a futex wake-up
// and a context switch per actor end, about 6 % of all cycles of a serve
// process at 23 K rooms/s (46 K cancellations a second for two rank
// processes; `perf`). kvroom's own actors (`counted_actor`) carry a mark the
// clock sets when one of them sets a timeout; an actor that never did ends
// without a word to the clock thread. Every other actor, and every marked
// one, is cancelled as CAF does.
//
// The clock is CAF's own `thread_safe_actor_clock`, run by a coordinator
// that is CAF's work-stealing or work-sharing one in all else (or runs
// kvroom's central queue, central_policy.hpp), loaded as
// the system's scheduler module by `load_quiet_scheduler` (an actor system
// takes a user's scheduler module before making its own). Its workers skip
// the bookkeeping of CAF's logger for every job they resume, which Debian's
// CAF does although it logs nothing (quiet_worker.hpp).

#include <atomic>
#include <cstdint>
#include <thread>

#include "caf/actor_system_config.hpp"
#include "caf/detail/thread_safe_actor_clock.hpp"

namespace kvroom::detail {

/// Set on an actor once it set a timeout through the system clock.
class clock_mark {
public:
  void mark_timed() noexcept {
    timed_.store(true, std::memory_order_release);
  }

  bool timed() const noexcept {
    return timed_.load(std::memory_order_acquire);
  }

private:
  std::atomic<bool> timed_{false};
};

class quiet_clock : public caf::detail::thread_safe_actor_clock {
public:
  using super = caf::detail::thread_safe_actor_clock;

  void set_ordinary_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                            uint64_t id) override;

  void set_request_timeout(time_point t, caf::abstract_actor* self, caf::message_id id) override;

  void set_multi_timeout(time_point t, caf::abstract_actor* self, caf::atom_value type,
                         uint64_t id) override;

  void cancel_timeouts(caf::abstract_actor* self) override;

  /// Cancellations forwarded to the clock thread, and skipped.
  uint64_t forwarded() const noexcept {
    return forwarded_.load(std::memory_order_relaxed);
  }

  uint64_t skipped() const noexcept {
    return skipped_.load(std::memory_order_relaxed);
  }

private:
  std::atomic<uint64_t> forwarded_{0};
  std::atomic<uint64_t> skipped_{0};
};

/// What kvroom's scheduler module counts of its workers.
class resume_count {
public:
  virtual ~resume_count() = default;

  /// Jobs resumed by all workers so far (0 with a CAF built to log).
  virtual uint64_t resumed() const noexcept = 0;
};

/// Makes `cfg`'s actor system run `policy` ("central", kvroom's
/// central_policy.hpp, or CAF's "stealing" or "sharing") with a
/// quiet_clock; false (and nothing loaded) for any other policy.
bool load_quiet_scheduler(caf::actor_system_config& cfg, caf::atom_value policy);

/// Jobs the workers of `sys` resumed so far: an actor scheduled from idle
/// once, for any number of messages. 0 when its scheduler is another.
uint64_t resumed_jobs(caf::actor_system& sys);

/// Whether `sys` runs kvroom's central queue (central_policy.hpp).
bool runs_central_policy(caf::actor_system& sys);

/// The quiet clock of `sys`, or nullptr when its scheduler is another.
const quiet_clock* quiet_clock_of(caf::actor_system& sys);

} // namespace kvroom::detail
