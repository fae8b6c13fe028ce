#pragma once

#include "kvroom/actors/control/membership.hpp"
#include "kvroom/api/backend.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "caf/actor.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/behavior.hpp"
#include "caf/send.hpp"

#include "kvroom/actors/inline_path.hpp"
#include "kvroom/actors/local_messages.hpp"
#include "kvroom/actors/nodes.hpp"
#include "kvroom/actors/room/room_port.hpp"
#include "kvroom/actors/room/room_protocol.hpp"
#include "kvroom/actors/room/room_timing.hpp"

namespace kvroom {

/// What every room of a rank shares, made once when the rank starts. A
/// room holds one pointer to it instead of a handle or shared pointer to
/// each of these: their reference counts are shared by all of the rank's
/// rooms, counted up on the scheduler's thread and down on CAF's workers,
/// so each was a cache line moving between cores twice per room.
struct room_context {
  rank_ref self;
  caf::actor manager;
  /// The scheduler's inbox; receives every state change.
  caf::actor inbox;
  room_timeouts timeouts;
  /// This rank's registry entry: its layout and data-plane endpoint.
  std::shared_ptr<const rank_entry> self_entry;
  /// Prefill rooms: the rank's transfer worker.
  caf::actor worker;
  /// Prefill rooms: small batches moved without the worker (may be null).
  std::shared_ptr<inline_path> shortcut;
  uint32_t max_queued_chunks = 1024;
  /// Prefill rooms: the transport to reach decode with, or "auto".
  std::string transport = "auto";
  room_protocol::options protocol;
  /// Sabotage only: monitor the manager, which in CAF 0.17 keeps every dead
  /// room's storage on the manager until it exits (~1.9 KB per room).
  bool monitor_manager = false;
  /// Nodes whose ranks proved membership (the manager's table).
  std::shared_ptr<const trust_table> trust;
  /// The rank's data plane: decode rooms grant writes, prefill rooms grant
  /// a pulling decode rank reads.
  std::shared_ptr<backend> data_plane;
};

/// What a room actor is spawned with.
struct room_params {
  room_id room = 0;
  /// The rank's part, the same for all of its rooms (never null).
  std::shared_ptr<const room_context> shared;
  /// Optional subscriber (actor-based schedulers); receives the same events.
  caf::actor listener;
  /// Decode rooms: the prefill data-parallel group serving this room.
  int32_t peer_dp_rank = 0;
  /// Decode rooms: read the prefill's pages (rank_config::pull).
  bool pull = false;
  /// When the scheduler opened the room (`room_timing::now()`): its
  /// deadlines count from here. The actor itself starts with its first
  /// message (see rank::open), which may come much later.
  uint64_t opened_ms = 0;
};

/// The part every room actor shares: a shell around `room_protocol` that
/// feeds it what arrives and carries out the effects it returns (state
/// changes to the scheduler, conclusions to the manager, proposals, answers
/// and commits through the managers; `carry_out` reads them). It decides
/// nothing itself, and reads the clock only through `room_timing`.
class room_core final : public room_port {
public:
  void init(caf::event_based_actor* self, room_params params);

  const room_params& params() const noexcept {
    return params_;
  }

  /// What the rank's rooms share (params().shared).
  const room_context& shared() const noexcept {
    return *params_.shared;
  }

  const room_protocol& protocol() const noexcept {
    return *protocol_;
  }

  bool concluded() const noexcept {
    return protocol_->concluded();
  }

  void set_counterparts(std::vector<rank_ref> xs) {
    protocol_->set_counterparts(std::move(xs));
  }

  /// Sends `msg` to `dest`, a rank's manager (or a room of this process):
  /// from this room when `dest` is in this process, else through this
  /// rank's manager, which sends it with its other messages for that peer
  /// (control_outbox.hpp). A room named as the sender of a message to
  /// another node made CAF 0.17 create a proxy for it there, announce it
  /// back and kill it when the room ended: two more frames on the wire per
  /// room and peer (measured: 12 `recvfrom` per tiny room across
  /// processes). The receiving side checks only the sender's node.
  template <class T>
  void send_to_peer(const caf::actor& dest, T&& msg) {
    if (local(dest))
      self_->send(dest, std::forward<T>(msg));
    else
      self_->send(shared().manager, kvroom::to_peer{dest, caf::make_message(std::forward<T>(msg))});
  }

  /// The message being handled comes from this process or from a node that
  /// proved membership. Room actors are reachable from every node that ever
  /// got their handle; what a stranger sends them changes nothing.
  /// True for actors of this process: only they get a room's own handle.
  /// A handle sent to another process makes CAF create, announce and later
  /// kill a proxy for it there, several wire frames per room; rooms in
  /// other processes are addressed through their manager by room id.
  bool local(const caf::actor& other) const {
    return other && detail::same_node(other, self_);
  }

  /// Peer messages always have a sender (the manager or a local room); an
  /// anonymous one could come from anywhere (CAF 0.17 delivers a remote
  /// anonymous message without a sender).
  bool from_member() const {
    auto& sender = self_->current_sender();
    return sender && (detail::same_node(sender, self_)
                      || (shared().trust && shared().trust->contains(sender->node())));
  }

  /// How a part's word (`report_part`, `tell_done`) travels: the room kind
  /// knows its peers' handles and routes.
  using part_router = std::function<void(const room_effect&)>;
  void route_parts(part_router fn) {
    part_router_ = std::move(fn);
  }

  /// The room actor of rank `rank`, in this process: a commit for that rank
  /// goes to it directly instead of through the managers.
  void know_room(rank_id rank, caf::actor room) {
    if (rank < 0 || !local(room))
      return;
    for (auto& [id, known] : handles_)
      if (id == rank) {
        known = std::move(room);
        return;
      }
    handles_.emplace_back(rank, std::move(room));
  }

  /// A handle this room knows for rank `rank`'s room (null: none, or in
  /// another process).
  caf::actor room_of(rank_id rank) const {
    for (auto& [id, known] : handles_)
      if (id == rank)
        return known;
    return caf::actor{};
  }

  void advance(kv_poll next);
  /// A failure identified here, of class `cause`; `requested` when the
  /// scheduler asked for it (abort).
  void fail_local(std::string reason, failure_cause cause, bool requested = false);
  void on_failed(const room_failed& msg);
  void prepare();
  /// Decider: a decode TP slot reported its part.
  void on_part(const part_done& part);
  /// Prefill: every byte of this rank landed (see room_protocol).
  void all_written(const std::vector<written_part>& parts);
  /// Decode: a source wrote its last byte (see room_protocol).
  void source_finished(const source_report& report);
  void on_committed();
  void mapped_group(const std::vector<rank_id>& group) {
    protocol_->mapped_group(group);
  }
  void on_peer_lost(const peer_lost& msg);
  void on_tick();

  /// For the rank's metrics: the transfer starts now (see room_concluded).
  void note_transfer_start() {
    if (transfer_from_ms_ == 0)
      transfer_from_ms_ = timing_.now();
  }
  /// For the rank's metrics: the room moved `bytes` over `transport`.
  void note_transfer(uint64_t bytes, std::string transport) {
    bytes_ = bytes;
    transport_ = std::move(transport);
  }
  /// Prefill: the tokens decode holds already, told to the scheduler with
  /// every state from WaitingForInput on (room_event).
  void set_decode_prefix_len(int64_t tokens) {
    decode_prefix_len_ = tokens;
  }
  void dst_sent(rank_id prefill, bool reports);
  void fenced(rank_id prefill);

  /// Prefill: a pulling decode rank may read this room's pages (grants are
  /// revoked once the room is terminal here, waiting for a read being
  /// served: no page is read after its room concluded).
  void reads_granted() {
    reads_granted_ = true;
  }
  /// Decode, pulling: this rank's worker has reads of the room in flight.
  void reading(bool in_flight);

  /// Decode, layer by layer: tells the scheduler that these KV buffers hold
  /// every byte of the room (`kv_receiver::landed`). Nothing once the room
  /// concluded: its state then says it all.
  void publish_landed(std::vector<int32_t> kv_buffers);

  /// The scheduler released the room: stop for good.
  void clear();

  /// A room kind's behaviour: its own handlers `fs`, then those every room
  /// kind shares (failures, commits and fences from members, the
  /// scheduler's abort, peer loss and clear), in one behaviour (one
  /// allocation per room actor, as before they were shared). The room core
  /// lives in the actor's state, so it outlives them.
  template <class... Fs>
  caf::behavior behavior_with(Fs... fs) {
    auto* core = this;
    return {
      std::move(fs)...,
      // From other ranks: only from members (see from_member).
      [core](const room_failed& msg) {
        if (core->from_member())
          core->on_failed(msg);
      },
      [core](const room_committed&) {
        if (core->from_member())
          core->on_committed();
      },
      [core](const room_fenced& msg) {
        if (core->from_member())
          core->fenced(msg.prefill_rank);
      },
      [core](const room_abort& msg) { core->abort(msg.reason); },
      [core](const peer_lost& msg) { core->on_peer_lost(msg); },
      [core](const room_clear&) { core->clear(); },
    };
  }

  /// The scheduler aborted the room (`reason` may be empty).
  void abort(const std::string& reason);

  const room_timing& timing() const noexcept {
    return timing_;
  }

  // -- room_port ----------------------------------------------------------
  void publish(kv_poll state, kv_transfer_error error) override;
  void concluded(const room_effect& fx) override;
  void to_decider(const decider_ref& group, caf::message msg) override;
  void to_rank(rank_id rank, caf::message msg) override;
  void commit(room_id room, rank_id rank) override;
  void part_word(const room_effect& fx) override;

private:
  void run(room_effects& effects) {
    carry_out(params_.room, shared().self, effects, *this);
    // Ends in this job rather than in the later one a `room_clear` would
    // cost: a room is otherwise idle when its scheduler clears it.
    if (protocol_->finished())
      end();
  }
  void end();

  caf::event_based_actor* self_ = nullptr;
  room_params params_;
  room_timing timing_;
  std::unique_ptr<room_protocol> protocol_;
  // Room actors of other ranks in this process, by rank id: a room's
  // counterparts, a few. A vector, not a hash map: its first entry is one
  // small allocation, not a bucket array and a node.
  std::vector<std::pair<rank_id, caf::actor>> handles_;
  part_router part_router_;
  uint64_t transfer_from_ms_ = 0;
  uint64_t bytes_ = 0;
  std::string transport_;
  int64_t decode_prefix_len_ = 0;
  bool reads_granted_ = false;
  /// The room's conclusion told the manager it ends with it.
  bool ending_ = false;
  void revoke_grants();
};

} // namespace kvroom
