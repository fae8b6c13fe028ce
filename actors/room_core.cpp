#include "actors/room_core.hpp"

#include <algorithm>

#include "actors/logging.hpp"
#include "messages/assert.hpp"

namespace kvroom {

uint64_t room_core::now_ms() noexcept {
  using namespace std::chrono;
  return static_cast<uint64_t>(
    duration_cast<milliseconds>(steady_clock::now().time_since_epoch())
      .count());
}

std::chrono::milliseconds room_core::tick_interval(const room_timeouts& t) {
  auto shortest = std::min({t.bootstrap_ms, t.waiting_ms, t.transferring_ms});
  auto ms = std::clamp<uint32_t>(shortest / 8, 1, 2000);
  return std::chrono::milliseconds{ms};
}

void room_core::init(caf::event_based_actor* self, room_params params) {
  self_ = self;
  params_ = std::move(params);
  fsm_ = std::make_unique<room_fsm>(params_.room, params_.self,
                                    params_.timeouts, now_ms());
}

void room_core::publish(kv_poll state) {
  room_event ev{params_.room, state};
  if (params_.inbox)
    self_->send(params_.inbox, ev);
  if (params_.listener)
    self_->send(params_.listener, ev);
}

void room_core::conclude() {
  // The manager hears first: once the scheduler sees Failed and asks for the
  // failure, the record is already in the manager's mailbox ahead of it.
  room_concluded msg{params_.room, fsm_->state(), {}, counterparts_};
  if (fsm_->state() == kv_poll::failed)
    msg.error = fsm_->failure();
  self_->send(params_.manager, std::move(msg));
  publish(fsm_->state());
}

void room_core::advance(kv_poll next) {
  if (fsm_->advance(next, now_ms()) == fsm_result::changed)
    publish(next);
}

void room_core::succeed() {
  if (fsm_->succeed() == fsm_result::changed)
    conclude();
}

void room_core::fail_local(std::string reason) {
  auto res = fsm_->fail_local(std::move(reason));
  if (res == fsm_result::changed)
    conclude();
  else
    logger()->debug("room {} on {}: local failure ignored ({})", params_.room,
                    to_string(params_.self), to_string(res));
}

void room_core::fail_remote(const kv_transfer_error& err) {
  auto res = fsm_->fail_remote(err);
  if (res == fsm_result::changed)
    conclude();
  else
    logger()->debug("room {} on {}: late failure from rank {} ignored ({}): {}",
                    params_.room, to_string(params_.self), err.origin_rank,
                    to_string(res), err.failure_reason);
}

void room_core::check_deadline() {
  if (fsm_->tick(now_ms()) == fsm_result::changed)
    conclude();
}

bool room_core::depends_on(const rank_ref& rank) const noexcept {
  if (rank.id == params_.self.id)
    return false;
  if (rank.side == params_.self.side && rank.dp_rank == params_.self.dp_rank)
    return true;
  return std::any_of(counterparts_.begin(), counterparts_.end(),
                     [&](const rank_ref& x) {
                       return x.side == rank.side && x.dp_rank == rank.dp_rank;
                     });
}

void room_core::on_peer_lost(const peer_lost& msg) {
  if (fsm_->concluded() || !depends_on(msg.rank))
    return;
  kv_transfer_error err{params_.room, msg.reason, true, msg.rank.id};
  fail_remote(err);
}

void room_core::clear() {
  // Clearing a live room abandons it: its peers learn now, not at a timeout.
  if (!fsm_->concluded())
    fail_local("cleared by scheduler while " + to_string(fsm_->state()));
  fsm_->clear();
  self_->quit();
}

} // namespace kvroom
