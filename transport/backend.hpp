#pragma once

#include "kvroom/transport/grants.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/messages/descriptors.hpp"

namespace kvroom {

/// Data-path status of a posted batch, UCX-style.
enum class xfer_status : uint8_t {
  done,         ///< every write landed
  in_progress,  ///< keep polling
  would_block,  ///< back-pressure: nothing posted, retry later (never spin)
  failed,       ///< the batch failed; the reason says why
};

std::string to_string(xfer_status x);

/// What a backend implements. A flag is set only when the backend really
/// does it; the transport choice and the conformance tests read these.
struct backend_caps {
  bool host_memory = false;    ///< moves host memory
  bool device_memory = false;  ///< moves GPU memory
  bool same_process = false;   ///< peers in this process
  bool same_host = false;      ///< peers in other processes on this host
  bool cross_host = false;     ///< peers on other hosts
  uint32_t max_batch_ops = 0;  ///< most writes in one posted batch
};

/// Id of one memory registration, unique within a backend.
using region_id = uint64_t;

/// Id of one posted batch, unique within a backend.
using xfer_id = uint64_t;

/// One data-plane backend of one rank: registers the rank's memory and moves
/// bytes from it into a peer's registered memory (NIXL's prepare/post/poll/
/// release cycle).
///
/// Contract:
/// - `post` validates every write before any byte moves: the source must lie
///   in memory this backend registered, the destination in memory the peer
///   registered. A violation returns an error and moves nothing.
/// - After a successful `post`, callers must keep calling `poll` until it
///   returns `done` or `failed`, then call `release` exactly once.
/// - Methods may block only as long as the documented work takes (a memcpy,
///   a socket write); callers run them off actor threads.
/// - A backend is used by one thread at a time; registration tables it shares
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

  /// Validates and posts every write of `batch`.
  virtual caf::expected<xfer_id> post(const write_batch& batch) = 0;

  /// Progress of a posted batch; `reason` is set when it returns `failed`.
  virtual xfer_status poll(xfer_id id, std::string& reason) = 0;

  /// Forgets a batch that reached `done` or `failed`.
  virtual void release(xfer_id id) = 0;

  /// Moves `batch` on the calling thread, now, when this backend can do so
  /// from any thread at once (its copies finish inside the call and touch
  /// only tables it locks itself): returns the outcome (no error: every byte
  /// landed). `nullopt`: it cannot, post through its owner instead. Rooms use
  /// this for small batches to skip the transfer worker's thread hop.
  virtual std::optional<caf::error> copy_inline(const write_batch& batch) {
    static_cast<void>(batch);
    return std::nullopt;
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
};

using backend_ptr = std::unique_ptr<backend>;

} // namespace kvroom
