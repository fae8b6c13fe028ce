#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/config.hpp"
#include "kvroom/api/secret.hpp"

namespace kvroom::detail {
struct control_door;
} // namespace kvroom::detail

namespace kvroom {

class rank;
class membership;

/// How an owned actor system is set up.
struct runtime_options {
  /// Scheduler policy: "central" (default), kvroom's one shared queue
  /// whose idle worker looks again for a few microseconds before it sleeps
  /// (actors/central_policy.hpp); "sharing", CAF's work sharing; "stealing",
  /// CAF's work stealing, which bursts of spawns (one actor per room)
  /// collapse in CAF 0.17 (docs/TOOLCHAIN.md). "central" needs the quiet
  /// clock below; with CAF's clock it is CAF's "sharing".
  std::string scheduler_policy = "central";
  /// Scheduler threads; 0 picks the hardware threads (at least 2). CAF's own
  /// default, max(hardware threads, 4), halves room throughput on 2 cores:
  /// idle workers contend for the shared queue and wake each other.
  size_t max_threads = 0;
  /// spdlog level for kvroom's logger.
  std::string log_level = "info";
  /// Most ranks the bootstrap registry accepts.
  uint32_t max_ranks = 4096;
  /// Ranks in other processes and hosts: loads CAF's middleman and turns its
  /// failure detection on (off by default in CAF 0.17). Every node of a
  /// deployment needs the same two settings: a node with heartbeats talking
  /// to one without tears the link down.
  bool network = false;
  uint32_t heartbeat_ms = 100;
  /// A peer silent this long (a frozen process) is declared lost.
  uint32_t connection_timeout_ms = 1000;
  /// The deployment secret (`deployment_secret::from_file`): ranks and the
  /// registry prove membership with it. Empty: an insecure deployment, said
  /// once in the log; fine in one process, not on a network others reach.
  deployment_secret secret;
  /// Control-plane TLS (CAF's OpenSSL module): PEM certificate and key of
  /// this process and the CA every peer's certificate must chain to. All
  /// three or none; with them, ranks and registries listen and dial over
  /// mutual TLS only, so a client without a certificate of the deployment's
  /// CA cannot even speak CAF's protocol to them. The tcp data plane stays
  /// plain TCP (membership-checked, not encrypted).
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_cafile;
  /// Run CAF's scheduler with `detail::quiet_clock` (quiet_clock.hpp): no
  /// wake-up of the clock thread per actor end. Off: CAF's clock as it is.
  bool quiet_clock = true;
};

/// The scheduler policies `runtime_options::scheduler_policy` takes.
bool known_scheduler_policy(const std::string& name) noexcept;

/// Why `opts` cannot set up a runtime (`errc::invalid_config`, naming the
/// field and what it takes), or none: an unknown scheduler policy or log
/// level, control-plane TLS without all three of its files, and on the
/// network a heartbeat of 0 ms or a connection timeout not above it (a
/// healthy peer would be declared lost). Nothing is set up by asking.
caf::error check_options(const runtime_options& opts);

/// Adds kvroom's message types and scheduler defaults to a CAF config an
/// embedder owns, and (with `opts.quiet_clock`) the scheduler module that
/// runs CAF's coordinator with the quiet clock. `runtime(caf::actor_system&)`
/// needs this on that config. Throws `std::invalid_argument` with
/// `check_options`' reason for options it refuses, before touching `cfg`
/// (CAF 0.17 itself takes an unknown policy as work stealing, with a line
/// on stderr, and an unknown log level would leave the level as it was).
void prepare_config(caf::actor_system_config& cfg,
                    const runtime_options& opts = {});

/// The process-wide part of kvroom: an actor system (owned, or the caller's)
/// and the in-process bootstrap registry. Ranks are created from it and must
/// be destroyed before it.
class runtime {
public:
  /// Owns an actor system configured by `opts`; throws
  /// `std::invalid_argument` for options `check_options` refuses.
  explicit runtime(runtime_options opts = {});

  /// Attaches to the caller's system, whose config went through
  /// `prepare_config`.
  explicit runtime(caf::actor_system& sys, uint32_t max_ranks = 4096,
                   deployment_secret secret = {});

  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  caf::actor_system& system() noexcept {
    return *sys_;
  }

  /// The bootstrap registry every rank of this runtime registers with.
  const caf::actor& registry() const noexcept {
    return registry_;
  }

  /// Starts one rank: validates `cfg`, registers its memory with its data
  /// plane, spawns its manager and transfer worker and registers it.
  caf::expected<std::unique_ptr<rank>> add_rank(rank_config cfg);

  /// Makes this runtime's bootstrap registry reachable on `port` (0: any;
  /// the port is returned) for ranks in other processes (needs `network`).
  caf::expected<uint16_t> publish_registry(uint16_t port,
                                           const std::string& host = {});

  /// Tests only: after `delay`, this runtime's bootstrap registry drops rank
  /// `id` as a registry stalled past its connection timeout does: every
  /// other rank hears it lost, and the registry closes its connection to
  /// the rank's process, which registers again (`kvroom registry
  /// --chaos-drop-rank`).
  void chaos_drop_rank(rank_id id, std::chrono::milliseconds delay);

  /// Uses the registry published at `host:port` instead of this runtime's
  /// own, retrying with exponential backoff (50 ms doubling to 1 s) until
  /// `timeout_ms` passes: ranks and registry may start in any order. Ranks
  /// keep the address: when the registry goes away they keep their cached
  /// directory, reconnect with backoff and register again.
  caf::error connect_registry(const std::string& host, uint16_t port,
                              uint32_t timeout_ms = 30'000);

  /// Uses a directory kept in a store instead of a registry process, the
  /// store chosen by `opts.url`'s scheme (`etcd://...`, `etcds://...`):
  /// every rank of this runtime keeps its entry under `opts.prefix` on this
  /// process's lease and watches the prefix. Needs `network`, and is chosen
  /// before the first rank. Retries reaching the store until `timeout_ms`
  /// passes; an unknown scheme or a malformed URL is an error naming it.
  caf::error use_directory(const directory_options& opts, uint32_t timeout_ms = 30'000);

  /// How long a rank of this runtime may wait for its registration: a
  /// directory on etcd holds a dead rank's id and place until its lease
  /// expires, and a replacement waits that long.
  uint32_t registration_wait_ms() const noexcept {
    return registration_wait_ms_;
  }

private:
  friend class rank;

  /// The proofs this runtime's ranks and registry use.
  const std::shared_ptr<const membership>& members() const noexcept {
    return members_;
  }

  std::unique_ptr<caf::actor_system_config> owned_cfg_;
  std::unique_ptr<caf::actor_system> owned_sys_;
  caf::actor_system* sys_ = nullptr;
  void init(uint32_t max_ranks, deployment_secret secret);
  /// Sent as an actor: the registry ignores anonymous exits (a remote
  /// anonymous message arrives without a sender).
  void stop_local_registry();

  caf::actor registry_;
  /// The gated door of this process's control endpoints, when this
  /// runtime installed it.
  std::unique_ptr<detail::control_door> door_;
  std::string registry_host_;
  uint16_t registry_port_ = 0;
  uint32_t registration_wait_ms_ = 0;
  /// Counts this process's links per peer process (idle links close).
  caf::actor link_keeper_;
  std::shared_ptr<const membership> members_;
  size_t live_ranks_ = 0;
  uint32_t max_ranks_ = 4096;
};

} // namespace kvroom
