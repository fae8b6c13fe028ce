#pragma once

#include <functional>
#include <optional>

#include <cstdint>
#include <string>
#include <vector>

#include "caf/error.hpp"

#include "kvroom/api/backend.hpp"
#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/parallel_layout.hpp"

namespace kvroom {

/// How long a room may stay in each non-terminal state. SGLang has no limit
/// on Transferring and leaks slots there (sglang#31800); kvroom has one for
/// every state. Zero is not allowed: every state must end.
struct room_timeouts {
  uint32_t bootstrap_ms = 300'000;
  uint32_t waiting_ms = 300'000;
  uint32_t transferring_ms = 120'000;
};

/// The end-to-end integrity check of a deployment (`rank_config::integrity`,
/// the same on every rank: checked at registration).
enum class integrity_mode : uint8_t {
  off,
  xxh3,  ///< XXH3-64 of every part (Debian's libxxhash)
};

std::string to_string(integrity_mode x);
bool from_string(const std::string& str, integrity_mode& x);

/// When a data path rests and for how long: Mooncake TENT's failover rules
/// (docs/source/design/tent/failover.md): a path with `errors_to_rest`
/// errors within `error_window_ms` rests for `first_rest_ms`; a path that
/// rests again before it stayed healthy for `max_rest_ms` rests twice as
/// long as the last time, up to `max_rest_ms`.
struct path_rules {
  uint32_t errors_to_rest = 3;
  uint32_t error_window_ms = 10'000;
  uint32_t first_rest_ms = 30'000;
  uint32_t max_rest_ms = 300'000;
};

/// How the path layer spreads and retries batches.
struct path_options {
  path_rules rules;
  /// A batch of at least twice this many bytes with several healthy paths
  /// in its nearest tier is cut into one slice per path (each at least this
  /// large), every slice its own batch with its own grant check.
  uint64_t slice_bytes = 256 * 1024;
  /// Paths remembered at most; healthy ones unused the longest go first.
  size_t max_paths = 1024;
};

/// A deployment's directory kept in a store instead of a registry process
/// (`runtime::use_directory`). The store is chosen by the URL's scheme:
/// `etcd://host:port[,host:port...]`, or `etcds://...` for etcd over TLS.
struct directory_options {
  std::string url;
  /// The deployment's keys live under this (several deployments can share
  /// one store).
  std::string prefix = "/kvroom/default";
  /// A process that stops renewing its lease is gone this long after
  /// (rounded up to whole seconds, at least 2: etcd's own floor).
  uint32_t lease_ttl_ms = 5000;
  /// A registration the store does not answer (unreachable, overloaded) is
  /// tried again this long before it fails.
  uint32_t registration_timeout_ms = 15'000;
  /// The store's own TLS: the CA of its certificates, and a client
  /// certificate with its key for stores that ask for one.
  std::string cacert;
  std::string cert;
  std::string key;
  /// The store's own authentication (etcd: `etcdctl user add`).
  std::string user;
  std::string password;
};

/// Limits that keep every queue of a rank bounded.
struct rank_limits {
  /// Rooms open on this rank at once; `make_sender`/`make_receiver` refuse more.
  uint32_t max_rooms = 65'536;
  /// Destinations or failures a manager holds for rooms not yet open here.
  uint32_t max_parked = 65'536;
  /// Cleared room ids remembered so late messages cannot resurrect them.
  uint32_t max_tombstones = 65'536;
  /// Chunks a sender room queues while bootstrapping or transferring.
  uint32_t max_queued_chunks = 1'024;
  /// Jobs a transfer worker holds before refusing (back-pressure).
  uint32_t max_queued_jobs = 65'536;
  /// Bound on the scheduler thread's blocking queries (failure(), stats()).
  uint32_t query_timeout_ms = 2'000;
  /// Batches up to this size move on the room's own thread when the data
  /// plane allows (same-process memcpy); 0 sends every batch to the worker.
  uint32_t inline_copy_bytes = 64 * 1024;
  /// A link to a peer process that carried no control message this long,
  /// with no open room here involving its ranks, is closed by agreement
  /// (and made again when a room needs it); 0 keeps links for good.
  uint32_t idle_link_ms = 60'000;
};

/// Faults in the control plane, for stress runs: the manager delays some of
/// the messages it sends to other ranks, or (sabotage, to prove a checker
/// catches it) drops its failure fan-out altogether.
struct control_chaos {
  double delay_probability = 0.0;
  uint32_t max_delay_ms = 0;
  uint64_t seed = 1;
  bool drop_fan_out = false;
  /// Sabotage: decode publishes terminal states without the senders' fence.
  bool no_fence = false;
  /// Sabotage: every rank concludes its own failures (no decider).
  bool local_decisions = false;
  /// Sabotage: room actors monitor their manager, which CAF 0.17 keeps on
  /// the manager, with each dead room's storage (~1.9 KB per room).
  bool keep_room_monitors = false;
};

/// Everything one rank needs: where it sits, the memory it registers, its data
/// plane, its timeouts and limits.
struct rank_config {
  role side = role::prefill;
  int32_t dp_rank = 0;
  /// DP groups of this side (0: not said; then the directory infers it from
  /// the highest DP rank listed, which is wrong until every group has
  /// registered). Say it where peers route by it (SGLang's DP attention).
  int32_t dp_size = 0;
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  /// Deployment-wide id; -1 picks `default_rank_id`.
  rank_id id = -1;
  /// KV buffers (one per layer and K/V, host or one GPU's memory) and aux
  /// buffers.
  memory_layout memory;
  /// What part of the model's KV cache those buffers hold (heads, head_dim,
  /// bytes per element, tokens per page, page order, MLA, PP stage): when
  /// set, registration refuses a peer whose layout cannot be mapped onto
  /// this one, with the reason. Its TP size and rank must be this rank's,
  /// and `memory.kv` its stage's K and V buffer of every layer.
  std::optional<parallel_layout> parallel;
  /// Data plane: "local" (this process only), "auto" (the nearest of what
  /// both ends offer and what moves the memory: local, shm, verbs, tcp for
  /// host memory; cuda, verbs for GPU memory) or a transport forced by name.
  std::string transport = "local";
  /// Offer endpoints other processes and hosts reach (tcp listener).
  bool network = false;
  /// IPv4 addresses the tcp listeners bind and advertise, comma-separated:
  /// one data path per address (each of a host's NICs); peers spread their
  /// batches over them and move a failed one to another.
  std::string tcp_host = "127.0.0.1";
  /// Bound on one batch's socket I/O and its acknowledgement on one path:
  /// a path silent for longer fails its batches, which move to another
  /// path. At most a quarter of the transferring timeout is used
  /// (`data_path_timeout`), so a batch stuck on a dead path moves well
  /// before its room's deadline.
  uint32_t data_timeout_ms = 30'000;
  /// Same-host copies (local, shm) of at least this many bytes at once go
  /// around the CPU's cache (streaming stores): a room's KV is larger than
  /// the cache and lands in another rank's pages, which this CPU never
  /// reads; smaller ones copy with memcpy. 0: always memcpy. See
  /// docs/performance.md for the crossover measured.
  uint64_t streaming_copy_bytes = uint64_t{16} << 20;
  /// How batches spread over several paths to a peer, and when a failing
  /// path rests (`path_options` above).
  path_options paths;
  /// End-to-end integrity check: with xxh3, prefill hashes each part it
  /// writes (in the room's logical order) and decode hashes what landed
  /// before it counts the part; a mismatch fails the room (cause
  /// `integrity`, the decode rank that found it the origin). Every rank of
  /// a deployment the same; host memory only.
  integrity_mode integrity = integrity_mode::off;
  /// Decode only: pull the KV (vLLM's NixlConnector's default direction).
  /// The prefill rank grants this rank reads of the pages of each chunk and
  /// says where they are; this rank's worker reads them into its own pages
  /// and answers. The room protocol is the push's: one decider, one origin,
  /// the fence (which also holds a terminal state while this rank's own
  /// reads are in flight). The prefill's hold is the read lease: its grants
  /// end when its room concludes (or its deadline passes). Needs a data
  /// plane that reads (local, shm, tcp, verbs).
  bool pull = false;
  /// With `network`: the address and port (0: any) the rank's manager is
  /// published on, for peers' direct links; advertised in the directory.
  std::string control_host = "127.0.0.1";
  uint16_t control_port = 0;
  /// Builds the rank's data plane in place of kvroom's backends: an
  /// embedder's own transfer engine behind the `backend` interface (its
  /// connection messages travel like verbs' do). Null: `make_backend`.
  std::function<caf::expected<backend_ptr>(const backend_config&)> data_plane;
  /// Faults to inject into this rank's data plane (stress tests, demo).
  fault_plan faults;
  /// Control-plane faults (stress runs only).
  control_chaos chaos;
  room_timeouts timeouts;
  rank_limits limits;

  /// The rank's position and id as messages carry it.
  rank_ref ref() const noexcept;
};

/// How long one batch may go unacknowledged on one path before it moves
/// to another: `data_timeout_ms`, but at most a quarter of the room's
/// transferring timeout (and at least 100 ms).
uint32_t data_path_timeout(const rank_config& cfg) noexcept;

/// The addresses of a comma-separated list (`rank_config::tcp_host`, "10.0.0.1,10.0.1.1"), blanks
/// trimmed, empty items dropped.
std::vector<std::string> split_hosts(const std::string& list);

/// Validates a rank configuration; the error names the first bad field.
caf::error validate(const rank_config& cfg);

} // namespace kvroom
