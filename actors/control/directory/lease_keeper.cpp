#include "kvroom/actors/control/directory/lease_keeper.hpp"

#include <chrono>

#include "caf/send.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

lease_keeper::lease_keeper(const store_connector& connect, std::string name, lease_timing timing,
                           int64_t lease, caf::actor target)
  : client_(connect(0)), name_(std::move(name)), timing_(timing), lease_(lease),
    target_(std::move(target)) {
  thread_ = std::thread([this] { run(); });
}

lease_keeper::~lease_keeper() {
  stop();
}

void lease_keeper::stop() {
  stopping_ = true;
  if (thread_.joinable())
    thread_.join();
  target_ = nullptr;
}

void lease_keeper::run() {
  lease_renewal renewal{timing_, monotonic_ms()};
  while (!stopping_) {
    // In slices, so a stop is seen within 20 ms.
    while (!stopping_ && monotonic_ms() < renewal.due_ms())
      std::this_thread::sleep_for(std::chrono::milliseconds(
        std::min<uint64_t>(20, renewal.due_ms() - monotonic_ms())));
    if (stopping_)
      return;
    auto lease = lease_.load();
    auto left = client_->keep_alive(lease, timing_.call_timeout_ms());
    auto now = monotonic_ms();
    if (!left) {
      // Never read as a loss: only the store's answer says the lease is gone.
      if (renewal.failed(now))
        logger()->warn("{}: cannot renew lease {:x} ({}); the store confirmed it {} ms "
                       "ago, TTL {} s; asking again",
                       name_, lease, describe(left.error()), now - renewal.confirmed_ms(),
                       timing_.ttl_s());
      continue;
    }
    if (renewal.answered(*left, now) == lease_renewal::outcome::renewed)
      continue;
    // The store says the lease is gone (this process was cut off from it longer
    // than the TTL): every entry on it is gone too. A new lease, and the
    // directory registers its ranks again on it.
    auto fresh = client_->grant(timing_.ttl_s());
    if (!fresh) {
      logger()->warn("{}: lease {:x} is gone and a new one cannot be granted yet ({}); "
                     "trying again",
                     name_, lease, describe(fresh.error()));
      continue;
    }
    lease_ = *fresh;
    renewal.replaced(monotonic_ms());
    caf::anon_send(target_, lease_atom::value, lease, *fresh);
  }
}

} // namespace kvroom
