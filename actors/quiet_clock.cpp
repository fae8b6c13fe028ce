#include "kvroom/actors/quiet_clock.hpp"

#include "caf/actor_system.hpp"
#include "caf/detail/set_thread_name.hpp"
#include "caf/policy/work_sharing.hpp"
#include "caf/policy/work_stealing.hpp"
#include "caf/scheduler/coordinator.hpp"

#include "kvroom/actors/central_policy.hpp"
#include "kvroom/actors/quiet_worker.hpp"

namespace kvroom::detail {

namespace {

void mark(caf::abstract_actor* self) {
  if (auto* m = dynamic_cast<clock_mark*>(self))
    m->mark_timed();
}

/// CAF's coordinator for `Policy`, with the quiet clock as the system's
/// clock. The base still starts its own clock's thread, which nothing
/// then uses (it sleeps until the system stops).
template <class Policy>
class quiet_coordinator : public caf::scheduler::coordinator<Policy>, public resume_count {
public:
  using super = caf::scheduler::coordinator<Policy>;
  using super::super;

  quiet_clock& clock() noexcept override {
    return clock_;
  }

  uint64_t resumed() const noexcept override {
#if CAF_LOG_LEVEL == CAF_LOG_LEVEL_QUIET
    if (!started_.load(std::memory_order_acquire))
      return 0;
    // The workers exist from the start on, until the system is gone.
    auto& self = const_cast<quiet_coordinator&>(*this);
    uint64_t n = 0;
    for (size_t i = 0; i < self.num_workers(); ++i)
      n += self.worker_by_id(i)->resumed();
    return n;
#else
    return 0;
#endif
  }

protected:
  void start() override {
    timer_ = std::thread{[this] {
      caf::detail::set_thread_name("kvroom.clock");
      this->system().thread_started();
      clock_.run_dispatch_loop();
      this->system().thread_terminates();
    }};
    super::start();
    started_.store(true, std::memory_order_release);
  }

  void stop() override {
    // Actors cleaned up while the workers stop still cancel their timeouts.
    super::stop();
    clock_.cancel_dispatch_loop();
    timer_.join();
  }

private:
  quiet_clock clock_;
  std::thread timer_;
  std::atomic<bool> started_{false};
};

} // namespace

void quiet_clock::set_ordinary_timeout(time_point t, caf::abstract_actor* self,
                                       caf::atom_value type, uint64_t id) {
  mark(self);
  super::set_ordinary_timeout(t, self, type, id);
}

void quiet_clock::set_request_timeout(time_point t, caf::abstract_actor* self,
                                      caf::message_id id) {
  mark(self);
  super::set_request_timeout(t, self, id);
}

void quiet_clock::set_multi_timeout(time_point t, caf::abstract_actor* self,
                                    caf::atom_value type, uint64_t id) {
  mark(self);
  super::set_multi_timeout(t, self, type, id);
}

void quiet_clock::cancel_timeouts(caf::abstract_actor* self) {
  // Called from the ending actor's own cleanup, after its last handler: no
  // timeout of its own can be set concurrently.
  if (auto* m = dynamic_cast<clock_mark*>(self); m != nullptr && !m->timed()) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  super::cancel_timeouts(self);
}

bool load_quiet_scheduler(caf::actor_system_config& cfg, caf::atom_value policy) {
  using caf::actor_system;
  if (policy == caf::atom("stealing")) {
    cfg.module_factories.push_back([](actor_system& sys) -> actor_system::module* {
      return new quiet_coordinator<quiet_policy<caf::policy::work_stealing>>(sys);
    });
    return true;
  }
  if (policy == caf::atom("central")) {
    cfg.module_factories.push_back([](actor_system& sys) -> actor_system::module* {
      return new quiet_coordinator<quiet_policy<central_policy>>(sys);
    });
    return true;
  }
  if (policy == caf::atom("sharing")) {
    cfg.module_factories.push_back([](actor_system& sys) -> actor_system::module* {
      return new quiet_coordinator<quiet_policy<caf::policy::work_sharing>>(sys);
    });
    return true;
  }
  return false;
}

uint64_t resumed_jobs(caf::actor_system& sys) {
  auto* counter = dynamic_cast<const resume_count*>(&sys.scheduler());
  return counter != nullptr ? counter->resumed() : 0;
}

bool runs_central_policy(caf::actor_system& sys) {
  using central = quiet_coordinator<quiet_policy<central_policy>>;
  return dynamic_cast<central*>(&sys.scheduler()) != nullptr;
}

const quiet_clock* quiet_clock_of(caf::actor_system& sys) {
  return dynamic_cast<const quiet_clock*>(&sys.clock());
}

} // namespace kvroom::detail
