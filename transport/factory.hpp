#pragma once

#include "kvroom/transport/auth/secret.hpp"

#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/transport/backend.hpp"
#include "kvroom/transport/fault_plan.hpp"

namespace kvroom {

/// What a rank asks the factory for.
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
  /// verbs: the RDMA device to use; empty takes the first with an active port.
  std::string verbs_device = {};
  /// tcp: peers prove membership with it before a byte of theirs is read
  /// as a batch (empty: the insecure deployment's public key).
  deployment_secret secret = {};
};

/// The addresses of a comma-separated list ("10.0.0.1,10.0.1.1"), blanks
/// trimmed, empty items dropped.
std::vector<std::string> split_hosts(const std::string& list);

/// Builds the backend named in `cfg` from its row of the transport table
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
