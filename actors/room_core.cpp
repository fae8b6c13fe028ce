#include "kvroom/actors/room_core.hpp"

#include <algorithm>

#include "caf/all.hpp"

#include "kvroom/actors/logging.hpp"
#include "kvroom/messages/assert.hpp"

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
  auto prefill_dp = params_.self.side == role::prefill ? params_.self.dp_rank
                                                       : params_.peer_dp_rank;
  protocol_ = std::make_unique<room_protocol>(params_.room, params_.self,
                                              prefill_dp, params_.timeouts,
                                              now_ms(), params_.protocol);
  // The room dies with its rank, but not by monitoring the manager: a CAF
  // 0.17 monitor stays on the monitored actor, with the dead room's storage,
  // until that actor exits. The manager ends its rooms when it exits.
  if (params_.monitor_manager) {
    self_->monitor(params_.manager);
    self_->set_down_handler([this](caf::down_msg&) { self_->quit(); });
  }
  self_->send(params_.manager,
              room_opened{params_.room, caf::actor_cast<caf::actor>(self_),
                          prefill_dp});
}

void room_core::run(room_effects& effects) {
  auto room = params_.room;
  for (auto& fx : effects) {
    switch (fx.what) {
      case room_effect::kind::publish: {
        // Decode: from here on nothing of the room may land in its pages;
        // a data plane that checks grants refuses its writes from now.
        if (is_terminal(fx.state) && params_.data_plane)
          params_.data_plane->revoke(room);
        room_event ev{room, fx.state, std::move(fx.error), decode_prefix_len_};
        if (params_.listener)
          self_->send(params_.listener, ev);
        if (params_.inbox)
          self_->send(params_.inbox, std::move(ev));
        break;
      }
      case room_effect::kind::concluded:
        // The manager hears before the scheduler: its failure record and
        // fan-out never lag behind what the scheduler sees.
        self_->send(params_.manager,
                    room_concluded{room, fx.state, std::move(fx.error),
                                   protocol_->counterparts(), fx.fan_out, fx.requested,
                                   bytes_, transport_, transfer_from_ms_});
        break;
      case room_effect::kind::propose:
        self_->send(params_.manager,
                    to_decider{fx.decider.side, fx.decider.dp_rank,
                               caf::make_message(room_failed{
                                 room, std::move(fx.error), false, fx.rank})});
        break;
      case room_effect::kind::answer:
        // The asking rank's room actor may be gone: its manager settles.
        if (fx.state == kv_poll::failed)
          self_->send(params_.manager,
                      to_rank{fx.rank, caf::make_message(room_failed{
                                         room, std::move(fx.error), true,
                                         params_.self.id})});
        else
          self_->send(params_.manager,
                      to_rank{fx.rank, caf::make_message(room_committed{room})});
        break;
      case room_effect::kind::commit:
        for (auto& kvp : participants_) {
          if (kvp.second)
            self_->send(kvp.second, room_committed{room});
          else
            self_->send(params_.manager,
                        to_rank{kvp.first, caf::make_message(room_committed{room})});
        }
        for (auto id : commit_also_)
          if (id != params_.self.id && participants_.count(id) == 0)
            self_->send(params_.manager,
                        to_rank{id, caf::make_message(room_committed{room})});
        break;
      case room_effect::kind::fence_expired:
        logger()->error("room {} on {}: Failed published without every "
                        "sender's fence after {} ms (senders still listed: "
                        "{}); its pages may still be written",
                        room, to_string(params_.self), protocol_->fence_ms(),
                        protocol_->writers().size());
        break;
    }
  }
}

void room_core::advance(kv_poll next) {
  run(protocol_->advance(next, now_ms()));
}

void room_core::fail_local(std::string reason, bool requested) {
  if (protocol_->concluded()) {
    logger()->debug("room {} on {}: local failure after conclusion ignored: {}",
                    params_.room, to_string(params_.self), reason);
    return;
  }
  run(protocol_->fail_local(std::move(reason), now_ms(), requested));
}

void room_core::on_failed(const room_failed& msg) {
  if (msg.propagated && protocol_->concluded())
    logger()->debug("room {} on {}: failure from rank {} after conclusion "
                    "ignored: {}",
                    params_.room, to_string(params_.self),
                    msg.error.origin_rank, msg.error.failure_reason);
  run(protocol_->on_failure(msg.error, !msg.propagated, msg.from, now_ms()));
}

void room_core::prepare() {
  run(protocol_->prepare(now_ms()));
}

void room_core::on_part(const part_done& part) {
  // A participant in another process comes without a handle (no proxy per
  // room crosses processes): its commit goes through the managers.
  if (part.decode_rank >= 0)
    participants_[part.decode_rank] = part.decode_room;
  if (part.prefill_rank >= 0 && part.prefill_rank != params_.self.id)
    participants_[part.prefill_rank] = part.prefill_room;
  run(protocol_->part_done(part.slot, part.slots, now_ms()));
}

bool room_core::count_part(const rank_ref& decode, const caf::actor& decode_room) {
  run(protocol_->part_done(decode.tp_rank, decode.tp_size, now_ms()));
  if (protocol_->concluded())
    return protocol_->state() == kv_poll::success;
  participants_[decode.id] = decode_room;
  return false;
}

void room_core::on_committed() {
  if (!protocol_->prepared())
    logger()->debug("room {} on {}: commit before this rank's part was done, "
                    "kept until it is", params_.room, to_string(params_.self));
  run(protocol_->committed(now_ms()));
}

void room_core::on_peer_lost(const peer_lost& msg) {
  run(protocol_->peer_lost(msg.rank, msg.reason, now_ms()));
}

void room_core::on_tick() {
  run(protocol_->tick(now_ms()));
}

void room_core::dst_sent(rank_id prefill) {
  protocol_->dst_sent(prefill);
}

void room_core::source_done(rank_id prefill) {
  run(protocol_->source_done(prefill, now_ms()));
}

void room_core::fenced(rank_id prefill) {
  run(protocol_->fenced(prefill, now_ms()));
}

void room_core::clear() {
  run(protocol_->clear(now_ms()));
  if (params_.data_plane)
    params_.data_plane->revoke(params_.room);
  self_->quit();
}

} // namespace kvroom
