#pragma once

// What the directory core asks of the store a deployment's directory lives
// in: a prefix read, one conditional write, leases, and a watch. etcd is one
// implementation (etcd/etcd_gateway.hpp); a store is that interface, its
// connector and its row (directory_stores.hpp), in a folder of its own.
//
// The calls block: each client belongs to one of the directory's own
// threads (the directory actor's, its watch's, its lease keeper's), never
// to an actor of the scheduler's. Not thread-safe except `cancel`.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

namespace kvroom {

/// One key as the store holds it.
struct store_kv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  /// The lease it lives on (0: none).
  int64_t lease = 0;
};

/// One change under a watched prefix.
struct store_event {
  bool deleted = false;
  store_kv kv;
  /// What the key held before (a deletion names the entry that went).
  std::optional<store_kv> prev;
};

/// Every key under a prefix, and the store's revision the read saw.
struct store_snapshot {
  std::vector<store_kv> kvs;
  int64_t revision = 0;
};

class store_client {
public:
  virtual ~store_client();

  // -- leases: a process's entries live on its one lease ----------------------

  /// A new lease of `ttl_s` seconds; its id.
  virtual caf::expected<int64_t> grant(int64_t ttl_s) = 0;

  /// Renews `lease`; the seconds it has left, 0 when it is gone (expired or
  /// revoked: whatever was attached to it is deleted). Only the store's own
  /// answer says 0: a call that failed is an error, never "gone".
  /// `timeout_ms` bounds the answer (0: the client's own limit).
  virtual caf::expected<int64_t> keep_alive(int64_t lease, uint32_t timeout_ms = 0) = 0;

  /// The seconds `lease` has left as the store reports it, -1 when it does
  /// not exist (expired or revoked).
  virtual caf::expected<int64_t> time_to_live(int64_t lease, uint32_t timeout_ms = 0) = 0;

  virtual caf::error revoke(int64_t lease) = 0;

  // -- keys ---------------------------------------------------------------------

  /// Every key under `prefix`, read linearizably: a store that cannot say
  /// what is current refuses rather than answer stale. An answer without
  /// the store's revision is an error, never "empty".
  virtual caf::expected<store_snapshot> range_prefix(const std::string& prefix) = 0;

  /// One transaction: puts `key` = `value` on `lease` only if no key under
  /// `prefix` was created or changed after `revision` (what the caller
  /// decided from). True when it was put; false when something changed.
  virtual caf::expected<bool> put_if_unchanged(const std::string& prefix, int64_t revision,
                                               const std::string& key, const std::string& value,
                                               int64_t lease) = 0;

  /// Deletes `key` if it is still attached to `lease` (ours, not a
  /// replacement's).
  virtual caf::error delete_if_lease(const std::string& key, int64_t lease) = 0;

  // -- the watch ----------------------------------------------------------------

  /// Streams changes under `prefix` from `start_revision` (with each key's
  /// previous value) into `on_events` until `cancel()`, an error or
  /// `idle_ms` without a change. Returns the revision to resume from. A
  /// start revision the store no longer has is an error with code
  /// `errc::unavailable` and "compacted" in its text: read the prefix again.
  virtual caf::expected<int64_t>
  watch(const std::string& prefix, int64_t start_revision, uint32_t idle_ms,
        const std::function<void(std::vector<store_event>&)>& on_events) = 0;

  /// Ends a `watch` running on another thread, for good. Call it until the
  /// watch returned: a watch between two requests may not notice the first.
  virtual void cancel() = 0;

  /// Where calls go now, for logs ("host:port").
  virtual const std::string& current_endpoint() const = 0;
};

/// Makes one client of one store; `timeout_ms` bounds each call's answer
/// (0: the store's own limit).
using store_connector = std::function<std::unique_ptr<store_client>(uint32_t timeout_ms)>;

} // namespace kvroom
