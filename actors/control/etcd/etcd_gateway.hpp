#pragma once

// etcd's v3 API through its documented JSON gateway (grpc-gateway: POST
// /v3/<service>/<method>, keys and values base64, int64 as strings), over
// cpp-httplib. Blocking calls: for the directory's own threads, never an
// actor of the scheduler's.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/actors/control/directory/store_client.hpp"

namespace httplib {
class Client;
} // namespace httplib

namespace kvroom {

/// Where etcd is and how to reach it: etcd's own TLS and auth pass through.
struct etcd_options {
  /// "host:port" of each member; a call that cannot reach one tries the next.
  std::vector<std::string> endpoints;
  /// https to every member (etcds://), checked against `cacert`.
  bool tls = false;
  std::string cacert;
  /// A client certificate, for members that require one.
  std::string cert;
  std::string key;
  /// etcd's own authentication (`etcdctl user add`): a token per session.
  std::string user;
  std::string password;
  /// A call that gets no answer this long fails over to the next member
  /// (lease renewals use a shorter one: lease_timing.hpp).
  uint32_t request_timeout_ms = 3000;
};

/// What one member's answer to a call means for the call.
enum class etcd_answer {
  ok,
  /// This member cannot serve it now (no leader, an election, a timeout,
  /// unavailable): ask the next member at once.
  elsewhere,
  /// The session's token expired or is missing: authenticate again.
  auth,
  /// The request itself is wrong (a lease that does not exist, a bad
  /// key): asking elsewhere gets the same answer.
  refused,
};

/// Reads a member's HTTP answer. The gateway answers a stream's failure
/// (keepalive, watch) with HTTP 200 and an `error` object in the body, so
/// a 200 is not by itself a success.
etcd_answer classify_etcd_answer(int status, const std::string& body);

/// The message of an etcd error body ("etcdserver: no leader"), or the
/// body's start.
std::string etcd_error_text(const std::string& body);

/// Parses "etcd://host:port[,host:port...]" (or "etcds://" for TLS).
caf::expected<etcd_options> parse_etcd_url(const std::string& url);

/// `url` parsed, with etcd's TLS files and auth user (the one place the
/// command line and Python turn their options into etcd_options).
caf::expected<etcd_options> etcd_options_of(const std::string& url, std::string cacert,
                                            std::string cert, std::string key,
                                            std::string user, std::string password);

/// One client of one etcd cluster. Not thread-safe except `cancel`: give each
/// thread its own.
class etcd_gateway final : public store_client {
public:
  explicit etcd_gateway(etcd_options opts);
  ~etcd_gateway();

  etcd_gateway(const etcd_gateway&) = delete;
  etcd_gateway& operator=(const etcd_gateway&) = delete;

  /// A new lease of `ttl_s` seconds; its id.
  caf::expected<int64_t> grant(int64_t ttl_s) override;

  /// Renews `lease`; the seconds it has left, 0 when it is gone (expired or
  /// revoked: whatever was attached to it is deleted). Only etcd's own
  /// answer says 0: a call that failed is an error, never "gone".
  /// `timeout_ms` bounds each member's answer (0: the options' timeout).
  caf::expected<int64_t> keep_alive(int64_t lease, uint32_t timeout_ms = 0) override;

  /// The seconds `lease` has left as etcd reports it (LeaseTimeToLive), -1
  /// when it does not exist (expired or revoked).
  caf::expected<int64_t> time_to_live(int64_t lease, uint32_t timeout_ms = 0) override;

  caf::error revoke(int64_t lease) override;

  /// Every key under `prefix`, read linearizably (through the leader: a
  /// member cut off from the cluster refuses rather than answer stale). An
  /// answer without the store's revision is an error, never "empty".
  caf::expected<store_snapshot> range_prefix(const std::string& prefix) override;

  /// One transaction: puts `key` = `value` on `lease` only if no key under
  /// `prefix` was created or changed after `revision` (what the caller
  /// decided from). True when it was put; false when something changed.
  caf::expected<bool> put_if_unchanged(const std::string& prefix, int64_t revision,
                                       const std::string& key, const std::string& value,
                                       int64_t lease);

  /// Deletes `key` if it is still attached to `lease` (ours, not a
  /// replacement's).
  caf::error delete_if_lease(const std::string& key, int64_t lease) override;

  /// Writes `key` = `value` unconditionally (tests, tools).
  caf::error put(const std::string& key, const std::string& value, int64_t lease = 0);

  /// Streams changes under `prefix` from `start_revision` (with each key's
  /// previous value) into `on_events` until `cancel()`, an error or
  /// `idle_ms` without a byte. Returns the revision to resume from. A
  /// compacted start revision is an error with code `errc::unavailable` and
  /// "compacted" in its text: list again.
  caf::expected<int64_t> watch(const std::string& prefix, int64_t start_revision,
                               uint32_t idle_ms,
                               const std::function<void(std::vector<store_event>&)>& on_events) override;

  /// Ends a `watch` running on another thread, for good. Call it until the
  /// watch returned: a watch between two requests has no socket to shut.
  void cancel() override;

  /// The member calls go to ("host:port").
  const std::string& current_endpoint() const override;

private:
  caf::expected<std::string> post(const std::string& path, const std::string& body,
                                  uint32_t timeout_ms = 0);
  std::unique_ptr<httplib::Client> make_client(const std::string& endpoint,
                                               uint32_t read_timeout_ms) const;
  caf::error authenticate(httplib::Client& cli);

  etcd_options opts_;
  size_t current_ = 0;
  std::string token_;
  std::atomic<bool> cancelled_{false};
  /// The client a watch reads with, for `cancel` from another thread
  /// (std::atomic_load/store: it outlives whichever thread drops it last).
  std::shared_ptr<httplib::Client> watching_;
};

/// The first key after every key that starts with `prefix` (etcd's
/// range_end for a prefix).
std::string prefix_end(std::string prefix);

} // namespace kvroom
