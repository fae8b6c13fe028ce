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

  // -- store_client (its contract: store_client.hpp) ---------------------------
  // etcd's own terms: a call that gets no answer from one member (no
  // leader, an election, a timeout) goes to the next; reads are
  // linearizable (through the leader: a member cut off from the cluster
  // refuses rather than answer stale); `time_to_live` is LeaseTimeToLive;
  // a watch is the gateway's stream, `idle_ms` without a byte ending it.

  caf::expected<int64_t> grant(int64_t ttl_s) override;
  caf::expected<int64_t> keep_alive(int64_t lease, uint32_t timeout_ms = 0) override;
  caf::expected<int64_t> time_to_live(int64_t lease, uint32_t timeout_ms = 0) override;
  caf::error revoke(int64_t lease) override;
  caf::expected<store_snapshot> range_prefix(const std::string& prefix) override;
  caf::expected<bool> put_if_unchanged(const std::string& prefix, int64_t revision,
                                       const std::string& key, const std::string& value,
                                       int64_t lease) override;
  caf::error delete_if_lease(const std::string& key, int64_t lease) override;
  caf::expected<int64_t>
  watch(const std::string& prefix, int64_t start_revision, uint32_t idle_ms,
        const std::function<void(std::vector<store_event>&)>& on_events) override;
  void cancel() override;
  /// The member calls go to ("host:port").
  const std::string& current_endpoint() const override;

  // -- etcd's alone --------------------------------------------------------------

  /// Writes `key` = `value` unconditionally (tests, tools).
  caf::error put(const std::string& key, const std::string& value, int64_t lease = 0);

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
