#pragma once

// Every message kvroom's actors exchange. Plain structs, each with its
// inspect() below it; `add_message_types` (registration.hpp) announces them.
// Messages that cross processes carry only values and actor handles; bulk KV
// bytes never travel as actor messages.

#include <cstdint>
#include <string>
#include <vector>

#include "caf/actor.hpp"
#include "caf/message.hpp"
#include "caf/meta/type_name.hpp"

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/metrics.hpp"
#include "kvroom/api/parallel_layout.hpp"

namespace kvroom {

// -- scheduler -> room ---------------------------------------------------------

/// Prefill scheduler declares how many KV pages the room will send and which
/// aux slot holds its metadata (SGLang `KVSender.init`).
struct sender_init {
  room_id room = 0;
  uint64_t num_kv_indices = 0;
  int64_t aux_index = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sender_init& x) {
  return f(caf::meta::type_name("kvroom.sender_init"), x.room,
           x.num_kv_indices, x.aux_index);
}

/// One chunk of source page indices (SGLang `KVSender.send`); the aux slot
/// and the state pages (`state_indices`, hybrid models) follow the last
/// chunk.
struct sender_chunk {
  room_id room = 0;
  std::vector<int64_t> kv_indices;
  bool is_last = false;
  std::vector<int64_t> state_indices;
  /// The KV buffers these pages are of (a layer's K and V, sent as soon as
  /// the layer was computed); empty: every buffer.
  std::vector<int32_t> kv_buffers = {};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sender_chunk& x) {
  return f(caf::meta::type_name("kvroom.sender_chunk"), x.room, x.kv_indices,
           x.is_last, x.state_indices, x.kv_buffers);
}

/// Decode scheduler hands the pre-allocated destination pages and aux slot
/// (SGLang `KVReceiver.init`).
struct receiver_init {
  room_id room = 0;
  std::vector<int64_t> kv_indices;
  int64_t aux_index = 0;
  /// Hybrid models: the state slots or window pages for the request.
  std::vector<int64_t> state_indices;
  /// Tokens decode holds already (its radix cache, SGLang's
  /// `decode_prefix_len`): `kv_indices` are the pages after them, and
  /// prefill sends only those.
  int64_t decode_prefix_len = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, receiver_init& x) {
  return f(caf::meta::type_name("kvroom.receiver_init"), x.room, x.kv_indices,
           x.aux_index, x.state_indices, x.decode_prefix_len);
}

/// Scheduler gives up on the room; fails it here and on every other rank.
struct room_abort {
  room_id room = 0;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_abort& x) {
  return f(caf::meta::type_name("kvroom.room_abort"), x.room, x.reason);
}

/// Scheduler releases the room: the room actor exits, its id is tombstoned.
struct room_clear {
  room_id room = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_clear& x) {
  return f(caf::meta::type_name("kvroom.room_clear"), x.room);
}

// -- room -> scheduler ---------------------------------------------------------

/// A room's new state, pushed to the scheduler's inbox; drained once per
/// scheduler iteration so `poll()` is a plain read. A Failed event carries
/// the root cause, so `failure()` is a plain read too.
struct room_event {
  room_id room = 0;
  kv_poll state = kv_poll::bootstrapping;
  kv_transfer_error error;
  /// Prefill, from WaitingForInput on: the tokens decode holds already
  /// (receiver_init), which the scheduler skips (SGLang's
  /// `pop_decode_prefix_len`).
  int64_t decode_prefix_len = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_event& x) {
  return f(caf::meta::type_name("kvroom.room_event"), x.room, x.state,
           x.error, x.decode_prefix_len);
}

/// Decode, layer by layer: these KV buffers of the room hold every byte the
/// room will put there (`kv_receiver::landed`). Room -> its rank's inbox
/// only; the state is `room_event`'s, which this never changes.
struct room_landed {
  room_id room = 0;
  std::vector<int32_t> kv_buffers;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_landed& x) {
  return f(caf::meta::type_name("kvroom.room_landed"), x.room, x.kv_buffers);
}

// -- decode room <-> prefill room ----------------------------------------------

/// Decode rank's destination for one room, sent to each prefill rank it needs
/// (through that rank's manager, which parks it until the sender exists).
struct dst_info {
  room_id room = 0;
  rank_ref decode_rank;
  caf::actor decode_room;
  std::vector<int64_t> kv_indices;
  int64_t aux_index = 0;
  std::vector<int64_t> state_indices;
  /// See receiver_init.
  int64_t decode_prefix_len = 0;
  /// The decode rank pulls: it reads the prefill rank's pages itself
  /// (`source_ready`, `reads_done`) instead of the prefill writing them.
  bool pull = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dst_info& x) {
  return f(caf::meta::type_name("kvroom.dst_info"), x.room, x.decode_rank,
           x.decode_room, x.kv_indices, x.aux_index, x.state_indices, x.decode_prefix_len,
           x.pull);
}

/// Prefill room started moving bytes for the room (decode -> Transferring).
struct transfer_started {
  room_id room = 0;
  rank_id src_rank = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_started& x) {
  return f(caf::meta::type_name("kvroom.transfer_started"), x.room,
           x.src_rank);
}

/// Prefill room finished every KV page and the aux data for this decode rank.
/// A transfer result means the bytes landed on every data plane (tcp: the
/// receiver applied and acked them; verbs: the remote NIC completed the
/// write; shm/local: the copy returned), so a sender that decides the room
/// counts this slot's part itself: `counted` tells the decode rank not to
/// confirm it, and `committed` that the count completed the room (Success,
/// with no message after this one).
struct transfer_done {
  room_id room = 0;
  rank_id src_rank = -1;
  uint64_t bytes = 0;
  uint64_t pages = 0;
  bool counted = false;
  bool committed = false;
  /// The deployment checks integrity: `digest` is the part's (see
  /// transport/part_digest.hpp), which the decode rank checks against what
  /// landed before it counts the part.
  bool has_digest = false;
  uint64_t digest = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_done& x) {
  return f(caf::meta::type_name("kvroom.transfer_done"), x.room, x.src_rank,
           x.bytes, x.pages, x.counted, x.committed, x.has_digest, x.digest);
}

/// Pull: prefill rank `src_rank` holds job `job_id` of this room for decode
/// rank `decode_rank` to read. `ops` are the writes a push would post (source:
/// the prefill's pages; destination: the decode rank's), and the prefill
/// granted that rank reads of exactly their source bytes until the room
/// concludes there. The decode rank reads them only into pages it handed
/// out for this room. `prefill_room`: the room's actor where both share a
/// process (the answer goes straight to it; across processes no proxy per
/// room is made and the answer goes through the managers).
struct source_ready {
  room_id room = 0;
  rank_id src_rank = -1;
  rank_id decode_rank = -1;
  uint64_t job_id = 0;
  caf::actor prefill_room;
  std::vector<write_op> ops;
  int32_t src_device_id = -1;
  int32_t dst_device_id = -1;
  /// A chunk of some KV buffers (a layer's): decode counts what it lands.
  bool layer = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, source_ready& x) {
  return f(caf::meta::type_name("kvroom.source_ready"), x.room, x.src_rank, x.decode_rank,
           x.job_id, x.prefill_room, x.ops, x.src_device_id, x.dst_device_id, x.layer);
}

/// Pull: decode rank `decode_rank`'s reads of job `job_id` are over: every
/// byte landed (`ok`, `bytes`), or none may be counted (`reason`). The
/// prefill room takes it as a push's transfer result.
struct reads_done {
  room_id room = 0;
  rank_id decode_rank = -1;
  uint64_t job_id = 0;
  bool ok = false;
  std::string reason;
  uint64_t bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reads_done& x) {
  return f(caf::meta::type_name("kvroom.reads_done"), x.room, x.decode_rank, x.job_id, x.ok,
           x.reason, x.bytes);
}

/// Push, a chunk of some KV buffers (a layer's): prefill rank `src_rank`'s
/// writes of one job landed in decode rank `decode_rank`, this many bytes
/// in each of its buffers (counted by destination address). Decode's room
/// tells its scheduler which buffers are whole (`room_landed`); a pulling
/// decode rank counts its own reads instead.
struct chunk_landed {
  room_id room = 0;
  rank_id src_rank = -1;
  rank_id decode_rank = -1;
  std::vector<int32_t> kv_buffers;
  std::vector<uint64_t> bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chunk_landed& x) {
  return f(caf::meta::type_name("kvroom.chunk_landed"), x.room, x.src_rank, x.decode_rank,
           x.kv_buffers, x.bytes);
}

// -- agreement: one decider per room -------------------------------------------

/// Decode rank of TP slot `slot` (of `slots`) received every byte of its
/// part; sent to the room's decider (prefill TP rank 0 of the room's prefill
/// group). Carries both room actors of the slot so the decider can commit
/// them directly.
struct part_done {
  room_id room = 0;
  int32_t slot = 0;
  int32_t slots = 1;
  rank_id decode_rank = -1;
  caf::actor decode_room;
  rank_id prefill_rank = -1;
  caf::actor prefill_room;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, part_done& x) {
  return f(caf::meta::type_name("kvroom.part_done"), x.room, x.slot, x.slots,
           x.decode_rank, x.decode_room, x.prefill_rank, x.prefill_room);
}

/// Decider -> every other rank of the room: every part is done, conclude
/// Success. A rank whose part is done waits for this instead of concluding on
/// its own, so no rank reports Success while another reports Failed.
struct room_committed {
  room_id room = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_committed& x) {
  return f(caf::meta::type_name("kvroom.room_committed"), x.room);
}

/// Manager -> another process's manager: the control messages for it that
/// one drain of the sender's mailbox produced, in order (see
/// control_outbox.hpp). Each is handled as if it came alone, with the
/// same sender; a bundle inside a bundle is dropped.
struct control_bundle {
  std::vector<caf::message> messages;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, control_bundle& x) {
  return f(caf::meta::type_name("kvroom.control_bundle"), x.messages);
}

// -- failure fan-out -----------------------------------------------------------

/// A room failed. `propagated` is true for a decision: the receiver concludes
/// the room as Failed with the origin's reason and rank, logs at debug (the
/// origin itself at error/warning), and never fans it out again.
/// `propagated` is false for a proposal from rank `from` to the room's
/// decider (room_protocol), which decides: Failed for everyone (and fans it
/// out), or, when the room concluded already, its outcome back to `from`.
struct room_failed {
  room_id room = 0;
  kv_transfer_error error;
  bool propagated = false;
  rank_id from = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_failed& x) {
  return f(caf::meta::type_name("kvroom.room_failed"), x.room, x.error,
           x.propagated, x.from);
}

/// Prefill rank `prefill_rank` -> decode rank `decode_rank` (manager to
/// manager): it posts nothing more for this room and nothing it posted is
/// still moving. The decode room holds a Failed state from its scheduler
/// until this arrives (or the prefill rank is lost), so pages the scheduler
/// reuses after `poll()` returned Failed are never written again.
struct room_fenced {
  room_id room = 0;
  rank_id prefill_rank = -1;
  rank_id decode_rank = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_fenced& x) {
  return f(caf::meta::type_name("kvroom.room_fenced"), x.room,
           x.prefill_rank, x.decode_rank);
}

/// Room -> its manager: the room reached a terminal state. `error` is set
/// when `state` is Failed; `counterparts` are the other side's ranks it knew
/// (empty: unknown yet). `fan_out` asks the manager to send the failure to
/// every other rank of the room (the decider's decisions, and a rank that
/// concludes alone).
struct room_concluded {
  room_id room = 0;
  kv_poll state = kv_poll::failed;
  kv_transfer_error error;
  std::vector<rank_ref> counterparts;
  bool fan_out = false;
  /// The scheduler asked for it (abort, clear of a live room): logged at
  /// info at the origin, since nothing went wrong that anyone must fix.
  bool requested = false;
  /// For the rank's metrics: bytes the room moved (prefill), over which
  /// data plane, and since when its transfer ran (prefill: its last chunk
  /// arrived; decode: it handed its pages over; 0: never).
  uint64_t bytes = 0;
  std::string transport;
  uint64_t transfer_from_ms = 0;
  /// The room's actor ends with this message (room_protocol::finished) and
  /// took the manager's monitor off first: no down message follows, this
  /// one closes the room.
  bool ended = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_concluded& x) {
  return f(caf::meta::type_name("kvroom.room_concluded"), x.room, x.state,
           x.error, x.counterparts, x.fan_out, x.requested, x.bytes, x.transport,
           x.transfer_from_ms, x.ended);
}

// -- room / scheduler -> manager -----------------------------------------------

/// A rank announces a room it opened to its manager, in the room actor's
/// name and before anything the room sends; the manager adds it to the room
/// directory and hands it anything parked.
struct room_opened {
  room_id room = 0;
  caf::actor room_actor;
  /// The room's prefill data-parallel group, whose TP rank 0 decides it.
  int32_t prefill_dp = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_opened& x) {
  return f(caf::meta::type_name("kvroom.room_opened"), x.room, x.room_actor,
           x.prefill_dp);
}

/// Asks a manager for the failure record of a room (kept until the room is
/// cleared); answered with `failure_reply`. Schedulers get the cause with the
/// Failed state; this is for tools and actor-based callers.
struct take_failure {
  room_id room = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, take_failure& x) {
  return f(caf::meta::type_name("kvroom.take_failure"), x.room);
}

/// Answer to `take_failure`; `found` is false when no record exists.
struct failure_reply {
  bool found = false;
  kv_transfer_error error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure_reply& x) {
  return f(caf::meta::type_name("kvroom.failure_reply"), x.found, x.error);
}

/// Asks a manager for its counters; answered with `manager_stats`.
struct get_stats {};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, get_stats&) {
  return f(caf::meta::type_name("kvroom.get_stats"));
}

// -- bootstrap registry --------------------------------------------------------

/// One rank as the registry knows it: where it sits, its manager, its
/// registered memory and every way its data plane is reached.
struct rank_entry {
  rank_ref rank;
  /// Set for ranks in this process and in the registry's own table; the
  /// registry sends it empty for ranks with a control endpoint, which peers
  /// reach over a direct link of their own (never relayed by the registry).
  caf::actor manager;
  memory_layout layout;
  std::vector<endpoint_desc> endpoints;
  /// Where the rank's manager is published (port 0: in this process only).
  std::string control_host;
  uint16_t control_port = 0;
  /// Random per process: tells a replaced rank (same id) from the old one.
  uint64_t incarnation = 0;
  /// What part of the model's KV cache it holds, when the rank said
  /// (rank_config::parallel): checked against its peers' at registration.
  bool has_parallel = false;
  parallel_layout parallel;
  /// Its end-to-end integrity check ("off", "xxh3"): every rank of a
  /// deployment the same (refused at registration otherwise).
  std::string integrity = "off";
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_entry& x) {
  return f(caf::meta::type_name("kvroom.rank_entry"), x.rank, x.manager,
           x.layout, x.endpoints, x.control_host, x.control_port, x.incarnation,
           x.has_parallel, x.parallel, x.integrity);
}

// Membership handshakes. Every proof is an HMAC keyed by the deployment
// secret over fresh nonces of both sides and both identities; the secret
// never travels (see api/secret.hpp).

/// Rank -> registry, a request: "prove you hold the secret, and challenge me".
struct registry_hello {
  std::string nonce;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, registry_hello& x) {
  return f(caf::meta::type_name("kvroom.registry_hello"), x.nonce);
}

/// The registry's answer: its proof over the rank's nonce and its own nonce
/// for the rank to answer in `register_rank`.
struct registry_challenge {
  std::string nonce;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, registry_challenge& x) {
  return f(caf::meta::type_name("kvroom.registry_challenge"), x.nonce, x.proof);
}

/// Manager A -> manager B over A's direct link, first of four messages:
/// A's id, process incarnation and nonce.
struct link_hello {
  rank_id from = -1;
  uint64_t incarnation = 0;
  std::string nonce;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_hello& x) {
  return f(caf::meta::type_name("kvroom.link_hello"), x.from, x.incarnation, x.nonce);
}

/// B -> A: B's proof over both nonces and B's own nonce.
struct link_reply {
  rank_id from = -1;
  std::string nonce;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_reply& x) {
  return f(caf::meta::type_name("kvroom.link_reply"), x.from, x.nonce, x.proof);
}

/// A -> B: A's proof. B trusts A's node from here on.
struct link_finish {
  rank_id from = -1;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_finish& x) {
  return f(caf::meta::type_name("kvroom.link_finish"), x.from, x.proof);
}

/// B -> A: B trusts A now, so A may let its rooms talk to B.
struct link_ack {
  rank_id from = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_ack& x) {
  return f(caf::meta::type_name("kvroom.link_ack"), x.from);
}

/// Manager A -> linked manager B: "our link has carried nothing for a
/// while; shall we close it?" B agrees unless it has use for it.
struct link_close {
  rank_id from = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_close& x) {
  return f(caf::meta::type_name("kvroom.link_close"), x.from);
}

/// B's answer: agreed (B no longer counts A linked: no monitor, no loss
/// when the connection goes) or not (B has rooms with A).
struct link_closed {
  rank_id from = -1;
  bool agreed = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_closed& x) {
  return f(caf::meta::type_name("kvroom.link_closed"), x.from, x.agreed);
}

/// A rank announces itself, answering the registry's challenge (nonces of
/// both sides, its id); the registry pushes `directory_update` to every
/// registered manager (including the new one).
struct register_rank {
  rank_entry entry;
  std::string rank_nonce;
  std::string proof;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, register_rank& x) {
  return f(caf::meta::type_name("kvroom.register_rank"), x.entry, x.rank_nonce, x.proof);
}

/// Registry -> every remaining manager: a registered rank's manager went
/// down, as the registry's node saw it. Ranks that never linked to it learn
/// the loss from this; linked ranks see it first through their own monitor.
struct rank_down {
  rank_ref rank;
  std::string reason;
  bool orderly = false;  ///< it shut down in order
  /// The directory's word is final: etcd deleted the rank's entry (its
  /// lease expired, or it left), so its id and place are free for a
  /// replacement. Linked peers count it lost too; without it (the built-in
  /// registry) a linked peer's own monitor decides.
  bool final = false;
  /// The incarnation that is gone (0: whichever is known).
  uint64_t incarnation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_down& x) {
  return f(caf::meta::type_name("kvroom.rank_down"), x.rank, x.reason, x.orderly, x.final,
           x.incarnation);
}

/// The registry's full view, pushed on every change.
struct directory_update {
  std::vector<rank_entry> ranks;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, directory_update& x) {
  return f(caf::meta::type_name("kvroom.directory_update"), x.ranks);
}

// -- room <-> transfer worker (same process) -----------------------------------

/// A batch of writes for the worker to post and drive to completion.
struct transfer_job {
  room_id room = 0;
  uint64_t job_id = 0;
  write_batch batch;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_job& x) {
  return f(caf::meta::type_name("kvroom.transfer_job"), x.room, x.job_id,
           x.batch);
}

/// One chunk's batches for several decode ranks (a prefill room's targets),
/// posted together so a copying backend may interleave them
/// (`backend::post_group`); each job is answered on its own, as if sent
/// alone.
struct transfer_jobs {
  room_id room = 0;
  std::vector<transfer_job> jobs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_jobs& x) {
  return f(caf::meta::type_name("kvroom.transfer_jobs"), x.room, x.jobs);
}

/// Pull: a batch of reads for the decode rank's worker to post and drive to
/// completion (answered with a `transfer_result` like a write job).
struct read_job {
  room_id room = 0;
  uint64_t job_id = 0;
  read_batch batch;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_job& x) {
  return f(caf::meta::type_name("kvroom.read_job"), x.room, x.job_id, x.batch);
}

/// The worker's verdict on one job.
struct transfer_result {
  room_id room = 0;
  uint64_t job_id = 0;
  bool ok = false;
  std::string reason;
  uint64_t bytes = 0;
  /// A failure's class: the data plane's (`transport`), or an injected
  /// fault's (`fault`).
  failure_cause cause = failure_cause::transport;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_result& x) {
  return f(caf::meta::type_name("kvroom.transfer_result"), x.room, x.job_id,
           x.ok, x.reason, x.bytes, x.cause);
}

} // namespace kvroom
