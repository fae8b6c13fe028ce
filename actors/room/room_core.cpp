#include "kvroom/actors/room/room_core.hpp"

#include "caf/all.hpp"
#include "caf/default_attachable.hpp"

#include "kvroom/api/logging.hpp"

namespace kvroom {

void room_core::init(caf::event_based_actor* self, room_params params) {
  self_ = self;
  params_ = std::move(params);
  timing_ = room_timing{shared().timeouts};
  auto prefill_dp = shared().self.side == role::prefill ? shared().self.dp_rank
                                                       : params_.peer_dp_rank;
  protocol_ = std::make_unique<room_protocol>(params_.room, shared().self, prefill_dp,
                                              timing_, params_.opened_ms, shared().protocol);
  // The room dies with its rank, but not by monitoring the manager: a CAF
  // 0.17 monitor stays on the monitored actor, with the dead room's storage,
  // until that actor exits. The manager ends its rooms when it exits.
  if (shared().monitor_manager) {
    self_->monitor(shared().manager);
    self_->set_down_handler([this](caf::down_msg&) { self_->quit(); });
  }
  // The manager heard of the room from its rank already (rank::open).
}

// -- room_port ------------------------------------------------------------------

void room_core::publish(kv_poll state, kv_transfer_error error) {
  auto room = params_.room;
  // Decode: from here on nothing of the room may land in its pages; a data
  // plane that checks grants refuses its writes from now. Prefill: a
  // pulling decode rank reads nothing more of it (its lease ended).
  if (is_terminal(state))
    revoke_grants();
  room_event ev{room, state, std::move(error), decode_prefix_len_};
  if (params_.listener)
    self_->send(params_.listener, ev);
  if (shared().inbox)
    self_->send(shared().inbox, std::move(ev));
}

void room_core::publish_landed(std::vector<int32_t> kv_buffers) {
  if (kv_buffers.empty() || concluded() || !shared().inbox)
    return;
  self_->send(shared().inbox, room_landed{params_.room, std::move(kv_buffers)});
}

void room_core::concluded(const room_effect& fx) {
  // A room that finished with this conclusion (Success published with it,
  // no fence holding it) ends in this job: its word closes it at the
  // manager, which then needs no down message (see run()).
  ending_ = protocol_->finished();
  // The manager hears before the scheduler: its failure record and fan-out
  // never lag behind what the scheduler sees.
  self_->send(shared().manager,
              room_concluded{params_.room, fx.state, fx.error, protocol_->counterparts(),
                             fx.fan_out, fx.requested, bytes_, transport_,
                             transfer_from_ms_, ending_});
}

void room_core::end() {
  // The manager learned of the end from the conclusion: its monitor would
  // only send a down message for it to look up and drop.
  if (ending_)
    self_->detach(caf::default_attachable::observe_token{
      caf::actor_cast<caf::actor_addr>(shared().manager), caf::default_attachable::monitor});
  self_->quit();
}

void room_core::to_decider(const decider_ref& group, caf::message msg) {
  self_->send(shared().manager, kvroom::to_decider{group.side, group.dp_rank, std::move(msg)});
}

void room_core::to_rank(rank_id rank, caf::message msg) {
  self_->send(shared().manager, kvroom::to_rank{rank, std::move(msg)});
}

void room_core::commit(room_id room, rank_id rank) {
  // A participant in another process comes without a handle (no proxy per
  // room crosses processes): its commit goes through the managers.
  if (auto other = room_of(rank))
    self_->send(other, room_committed{room});
  else
    to_rank(rank, caf::make_message(room_committed{room}));
}

void room_core::part_word(const room_effect& fx) {
  if (part_router_)
    part_router_(fx);
}

// -- inputs ---------------------------------------------------------------------

void room_core::advance(kv_poll next) {
  run(protocol_->advance(next, timing_.now()));
}

void room_core::fail_local(std::string reason, failure_cause cause, bool requested) {
  if (protocol_->concluded()) {
    logger()->debug("room {} on {}: local failure after conclusion ignored: {}",
                    params_.room, to_string(shared().self), reason);
    return;
  }
  run(protocol_->fail_local(std::move(reason), cause, timing_.now(), requested));
}

void room_core::on_failed(const room_failed& msg) {
  if (msg.propagated && protocol_->concluded())
    logger()->debug("room {} on {}: failure from rank {} after conclusion "
                    "ignored: {}",
                    params_.room, to_string(shared().self),
                    msg.error.origin_rank, msg.error.failure_reason);
  run(protocol_->on_failure(msg.error, !msg.propagated, msg.from, timing_.now()));
}

void room_core::prepare() {
  run(protocol_->prepare(timing_.now()));
}

void room_core::on_part(const part_done& part) {
  know_room(part.decode_rank, part.decode_room);
  know_room(part.prefill_rank, part.prefill_room);
  run(protocol_->part_done(part.slot, part.slots, part.decode_rank,
                           part.prefill_rank == shared().self.id ? -1 : part.prefill_rank,
                           timing_.now()));
}

void room_core::all_written(const std::vector<written_part>& parts) {
  run(protocol_->all_written(parts, timing_.now()));
}

void room_core::source_finished(const source_report& report) {
  run(protocol_->source_finished(report, timing_.now()));
}

void room_core::on_committed() {
  if (!protocol_->prepared() && !protocol_->concluded())
    logger()->debug("room {} on {}: commit before this rank's part was done, "
                    "kept until it is", params_.room, to_string(shared().self));
  run(protocol_->committed(timing_.now()));
}

void room_core::on_peer_lost(const peer_lost& msg) {
  run(protocol_->peer_lost(msg.rank, msg.reason, timing_.now()));
}

void room_core::on_tick() {
  run(protocol_->tick(timing_.now()));
}

void room_core::dst_sent(rank_id prefill, bool reports) {
  protocol_->dst_sent(prefill, reports);
}

void room_core::fenced(rank_id prefill) {
  run(protocol_->fenced(prefill, timing_.now()));
}

void room_core::abort(const std::string& reason) {
  auto by = "aborted by " + to_string(shared().self.side) + " scheduler";
  fail_local(reason.empty() ? by : by + ": " + reason, failure_cause::abort, true);
}

void room_core::reading(bool in_flight) {
  run(protocol_->reading(in_flight, timing_.now()));
}

void room_core::revoke_grants() {
  if (!shared().data_plane)
    return;
  if (shared().self.side == role::decode)
    shared().data_plane->revoke(params_.room);
  else if (reads_granted_)
    shared().data_plane->revoke_read(params_.room);
}

void room_core::clear() {
  // Reads of this room still waiting at the worker are dropped (those
  // under way complete: a scheduler that clears a live room gave its pages
  // up, as with a push whose sender has not fenced yet).
  if (protocol_->reads_in_flight() && shared().worker)
    self_->send(shared().worker, fence_room{params_.room});
  run(protocol_->clear(timing_.now()));
  revoke_grants();
  self_->quit();
}

} // namespace kvroom
