#pragma once

// The data plane as kvroom drives it: the `backend` interface (kvroom's
// transports implement it, and so may an embedder's own transfer engine,
// `rank_config::data_plane`), what a rank asks of one (`backend_config`),
// and the faults a stress run injects into one (`fault_plan`).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/secret.hpp"

namespace kvroom {

/// Data-path status of a posted batch, UCX-style.
enum class xfer_status : uint8_t {
  done,         ///< every write landed
  in_progress,  ///< keep polling
  would_block,  ///< back-pressure: nothing posted, retry later (never spin)
  failed,       ///< the batch failed; the reason says why
};

std::string to_string(xfer_status x);

/// What one backend instance can do beyond its transport's row, read by
/// the rooms (a pull needs `reads`) and the conformance body. What memory
/// a transport moves and which peers it reaches are facts of the transport,
/// kept once in its row of the table (transport_table.hpp), not here.
struct backend_caps {
  uint32_t max_batch_ops = 0;  ///< most writes in one posted batch
  bool reads = false;          ///< serves `post_read` (a pull)
  /// Moves `write_batch::strided` itself (else a rank plans none for it).
  bool strided_writes = false;
};

/// Id of one memory registration, unique within a backend.
using region_id = uint64_t;

/// Id of one posted batch, unique within a backend.
using xfer_id = uint64_t;

/// What `post` did with a batch (UCX's `UCS_OK` / `UCS_INPROGRESS` /
/// `UCS_ERR_NO_RESOURCE`; NIXL's `postXfer` may complete synchronously).
struct post_result {
  /// done: every write landed inside the call (nothing to poll or release);
  /// in_progress: poll `id` until it is done or failed, then release it;
  /// would_block: nothing was posted, post again later; failed: `error`
  /// says why (a batch refused by validation moved nothing).
  xfer_status status = xfer_status::failed;
  xfer_id id = 0;
  caf::error error;

  static post_result done() {
    return {xfer_status::done, 0, caf::error{}};
  }
  static post_result in_progress(xfer_id id) {
    return {xfer_status::in_progress, id, caf::error{}};
  }
  static post_result would_block() {
    return {xfer_status::would_block, 0, caf::error{}};
  }
  static post_result failed(caf::error err) {
    return {xfer_status::failed, 0, std::move(err)};
  }
};

/// One data-plane backend of one rank: registers the rank's memory and moves
/// bytes from it into a peer's registered memory (NIXL's prepare/post/poll/
/// release cycle).
///
/// Contract:
/// - `post` validates every write before any byte moves: the source must lie
///   in memory this backend registered, the destination in memory the peer
///   registered. A violation fails the post and moves nothing.
/// - A post that returns `in_progress` is polled until `done` or `failed`,
///   then released exactly once; every other outcome leaves nothing to
///   poll or release.
/// - Methods may block only as long as the documented work takes (a memcpy,
///   a socket write); callers run them off actor threads.
/// - A backend is used by one thread at a time, except `post` of a batch
///   for which `completes_inline` says yes; registration tables it shares
///   with other backends are its own to protect.
class backend {
public:
  virtual ~backend();

  /// Short lowercase name: "local", "shm", "tcp", "verbs", "cuda", "fault".
  virtual std::string name() const = 0;

  virtual backend_caps caps() const = 0;

  /// How peers reach the memory this backend registered.
  virtual endpoint_desc endpoint() const = 0;

  /// Every way to reach it; a backend that bundles several lists each.
  virtual std::vector<endpoint_desc> endpoints() const {
    return {endpoint()};
  }

  /// Registers memory this rank sends from or exposes to peers.
  virtual caf::expected<region_id> register_memory(const mem_desc& mem) = 0;

  /// Removes a registration; writes into it are refused from then on.
  virtual caf::error deregister_memory(region_id id) = 0;

  /// Validates and posts every write of `batch` (see `post_result`).
  virtual post_result post(const write_batch& batch) = 0;

  /// Posts several batches at once: one chunk of a prefill room for each of
  /// its decode ranks. Each outcome is the one `post` would give that batch
  /// posted alone in the same order (`results[i]` for `batches[i]`; a batch
  /// refused at the post moves nothing and takes nothing from the others),
  /// and once one answers
  /// `would_block` none after it is posted (each answers `would_block`), so
  /// a caller that posts them again later keeps their order. The default
  /// posts them one by one with `post`; a backend that copies (local, shm)
  /// interleaves their writes instead: under head slicing each decode rank
  /// takes part of every source token, and copying a token's parts together
  /// reads the source once, in order, instead of once per decode rank with
  /// holes (docs/performance.md).
  virtual std::vector<post_result> post_group(const std::vector<const write_batch*>& batches);

  /// Validates and posts every read of `batch` (a pull): bytes of the
  /// peer's registered memory land in this rank's. The contract is `post`'s:
  /// every range is checked before a byte moves (the local one inside this
  /// rank's registered memory, the remote one inside the peer's, and, where
  /// the peer serves reads itself, inside what it granted this rank for the
  /// batch's room: `grant_read`); a refused batch moves nothing; a batch in
  /// progress is polled and released like a posted one. Backends that cannot
  /// read answer `failed` with errc::unsupported.
  virtual post_result post_read(const read_batch& batch);

  /// True when posting the reads of `batch` completes inside the call and
  /// may happen on any thread at once (see `completes_inline`).
  virtual bool reads_inline(const read_batch& batch) const {
    static_cast<void>(batch);
    return false;
  }

  /// Progress of a batch whose post returned `in_progress`; `reason` is set
  /// when it returns `failed`. A backend whose posts all complete inside
  /// the call keeps no batches and answers `failed` for any id.
  virtual xfer_status poll(xfer_id id, std::string& reason) {
    reason = name() + " backend has no batch " + std::to_string(id) + " in progress";
    return xfer_status::failed;
  }

  /// True when the batch `id`, whose `poll` answered `failed`, failed by a
  /// fault injected on purpose (the fault decorator: tests, `kvroom
  /// stress`): its room's failure is then a `fault`, not the transport's.
  /// Asked before `release`. (A `post` that fails says so by its error's
  /// code: errc::injected_fault.)
  virtual bool injected(xfer_id id) const {
    static_cast<void>(id);
    return false;
  }

  /// Forgets a batch that reached `done` or `failed` after `in_progress`.
  virtual void release(xfer_id id) {
    static_cast<void>(id);
  }

  /// True when the batch `id`, whose `poll` answered `failed`, was refused
  /// by its receiver (outside what it granted, its room concluded there):
  /// the batch is at fault, not the path, and another path would be
  /// refused too. Asked before `release`. (A `post` that fails says so by
  /// its error's code: see `is_path_fault`.)
  virtual bool refused(xfer_id id) const {
    static_cast<void>(id);
    return false;
  }

  /// True when posting `batch` completes inside the call (done or failed)
  /// and may happen on any thread at once (its copies touch only tables it
  /// locks itself): a room then posts a small batch itself instead of a
  /// round trip through the transfer worker's thread. Thread-safe.
  virtual bool completes_inline(const write_batch& batch) const {
    static_cast<void>(batch);
    return false;
  }

  // -- connection set-up and completion (backends that need them) -----------

  /// Messages this backend wants delivered to peer ranks' backends (verbs
  /// queue-pair data). The owner drains them after every call and carries
  /// them between ranks as actor messages; most backends have none.
  virtual std::vector<transport_control> take_control() {
    return {};
  }

  /// A peer backend's message arrives (see `take_control`). Malformed or
  /// unexpected input returns an error and changes nothing.
  virtual caf::error on_control(const transport_control& msg);

  /// A backend that completes work on a thread of its own calls `notify`
  /// (from that thread) when a posted batch may have changed state, so its
  /// owner polls then instead of on a timer. Set once, before any post.
  virtual void set_notifier(std::function<void()> notify) {
    static_cast<void>(notify);
  }

  // -- per-room write grants (receiving side; see grants.hpp) ---------------
  // Called from any thread. Backends whose receiver reads remote writes
  // itself (tcp) admit a batch only inside what its authenticated sender was
  // granted for a live room; the others cannot check at the receiver (a
  // local or shm writer copies into the memory itself, a NIC writes for
  // verbs) and ignore them: there, only members hold the way in.

  /// True when `grant` restricts what peers may write.
  virtual bool enforces_grants() const {
    return false;
  }

  /// `sender` may write `ranges` for `room` until `revoke(room)`. False when
  /// the backend's grant table is full.
  virtual bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges) {
    static_cast<void>(room);
    static_cast<void>(sender);
    static_cast<void>(ranges);
    return true;
  }

  /// Nothing of `room` is written again once this returns.
  virtual void revoke(room_id room) {
    static_cast<void>(room);
  }

  // -- per-room read grants (serving side of a pull) -------------------------
  // What a peer may read of this rank's memory. Backends that serve reads
  // themselves (a tcp read request is answered by this rank's connection
  // thread) admit a read only inside them; where the reader copies itself
  // (local, shm) or the NIC reads (verbs), only members hold the way in, as
  // for writes.

  /// True when `grant_read` restricts what peers may read.
  virtual bool enforces_read_grants() const {
    return false;
  }

  /// `reader` may read `ranges` of this rank's memory for `room` until
  /// `revoke_read(room)`. False when the table is full.
  virtual bool grant_read(room_id room, rank_id reader, std::vector<byte_range> ranges) {
    static_cast<void>(room);
    static_cast<void>(reader);
    static_cast<void>(ranges);
    return true;
  }

  /// Nothing of `room` is read again once this returns (a read being
  /// served finishes first).
  virtual void revoke_read(room_id room) {
    static_cast<void>(room);
  }
};

using backend_ptr = std::unique_ptr<backend>;

/// True when a failed `post` blames the path (a connection, a device, an
/// injected fault: another path may carry the batch), false when it
/// blames the batch (a range outside registered memory, an unsupported
/// kind of memory: every path would refuse it).
bool is_path_fault(const caf::error& err);

// -- injected faults ---------------------------------------------------------

/// Where the fault-injecting backend breaks a batch.
enum class fault_point : uint8_t {
  before_post,  ///< post() refuses the batch; nothing moves
  after_post,   ///< the bytes move, then the completion reports failure
  on_aux,       ///< only batches carrying aux data fail (before post)
  bad_completion,  ///< the bytes move, the completion carries an error
  stall,        ///< the batch never completes (a hung NIC or peer)
  slow,         ///< no failure: the bytes move only `slow_ms` after post, then
                ///< the batch completes (a slow link; exercises the fence)
  flip,         ///< no failure reported: one byte arrives changed (silent
                ///< corruption on the way; the integrity check's prey). The
                ///< source byte is changed while the batch is posted and
                ///< restored after: transports that read the source inside
                ///< `post` (local, shm, tcp) carry the change
};

std::string to_string(fault_point x);
bool from_string(const std::string& str, fault_point& x);

/// One room's batches failing at one point.
struct room_fault {
  room_id room = 0;
  fault_point point = fault_point::before_post;
};

/// Which batches the fault-injecting backend fails: those tagged with one of
/// `rooms` (at `point`) or named in `targeted` (at their own point), plus
/// each other batch with `probability` (at `point`), drawn from `seed` so
/// the same seed reproduces the same faults; and batches on broken
/// `paths`.
struct fault_plan {
  std::vector<room_id> rooms;
  std::vector<room_fault> targeted;
  double probability = 0.0;
  uint64_t seed = 1;
  fault_point point = fault_point::before_post;
  /// How long a `slow` batch waits before its bytes move.
  uint32_t slow_ms = 30;
  /// Broken paths: a batch sent on one of these fails at `path_point`
  /// with `path_probability` (1: the link is down), whatever room it
  /// carries. An entry is a transport name or the start of an endpoint
  /// address ("127.0.0.2:" is every port of that host). The faults above
  /// apply on every path.
  std::vector<std::string> paths;
  double path_probability = 1.0;
  fault_point path_point = fault_point::before_post;

  bool empty() const noexcept {
    return rooms.empty() && targeted.empty() && probability <= 0.0 && paths.empty();
  }
};

// -- what a rank asks for ---------------------------------------------------

/// What a rank asks the factory (`rank_config::data_plane` too) for.
struct backend_config {
  /// A transport of the table (transport_table.hpp: local, cuda, shm, verbs,
  /// tcp), or "auto": every transport this rank can offer behind one
  /// router, in the table's order: local, cuda when a GPU is usable, and
  /// with `network` shm, verbs when an RDMA port is active, and tcp.
  std::string name = "local";
  /// The rank whose memory the backend registers.
  rank_id owner = 0;
  /// Faults to inject; an empty plan adds no wrapper.
  fault_plan faults;
  /// With "auto": also offer endpoints other processes and hosts can reach.
  bool network = false;
  /// IPv4 addresses the tcp listeners bind and advertise, comma-separated:
  /// one data path per address (a host's several NICs).
  std::string tcp_host = "127.0.0.1";
  /// Bound on one tcp batch's socket I/O.
  uint32_t io_timeout_ms = 30'000;
  /// local, shm: a post (or group of posts) that copies at least this many
  /// bytes copies around the cache (streaming stores; bulk_copy.hpp), as a
  /// transfer larger than the cache whose destination this CPU never reads
  /// should; 0: always with the cache.
  uint64_t streaming_copy_bytes = uint64_t{16} << 20;
  /// verbs: the RDMA device to use; empty takes the first with an active port.
  std::string verbs_device = {};
  /// tcp: peers prove membership with it before a byte of theirs is read
  /// as a batch (empty: the insecure deployment's public key).
  deployment_secret secret = {};
};

// -- kvroom's own backends --------------------------------------------------

/// Builds the backend named in `cfg` from its row of the transport table (local, cuda, shm,
/// verbs, tcp)
/// (or the router over every row for "auto"), wrapped in the fault
/// injector when `cfg.faults` selects anything.
caf::expected<backend_ptr> make_backend(const backend_config& cfg);

/// Whether a backend can run here, and why not when it cannot.
struct backend_availability {
  std::string name;
  bool compiled = false;
  bool available = false;
  std::string detail;
};

/// Every transport of the table, compiled in or not, with its run-time
/// status.
std::vector<backend_availability> probe_backends();

} // namespace kvroom
