#pragma once

#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/backend.hpp"

namespace kvroom {

struct backend_config;
struct backend_availability;

/// One data-plane transport as kvroom knows it: its name, what it can move
/// and how near a peer must be, how to make one and whether it runs here.
/// Each backend defines its row in its own folder (`<name>/<name>_row.cpp`,
/// compiled whether or not the backend itself is), and the build lists the
/// rows once (`KVROOM_TRANSPORTS` in transport/CMakeLists.txt); the factory,
/// endpoint selection, configuration checks, metrics, `kvroom doctor`, the
/// bandwidth bench and the hardware conformance suite all read this table
/// (UCX's `UCT_TL_DEFINE_ENTRY`; NIXL's plugin capability queries).
struct transport_row {
  const char* name = "";
  /// Moves transfers with host memory on both sides when asked to by name.
  bool moves_host = true;
  /// Preference among those for host memory on both sides, nearest first (0
  /// is tried first); negative: "auto" never picks it for such a transfer.
  int host_nearness = -1;
  /// Preference when GPU memory is on either side; negative: cannot move it.
  int device_nearness = -1;
  /// Reaches only peers of its own domain (process or host).
  bool domain_bound = false;
  /// "auto" makes it only for ranks that offer endpoints to other processes
  /// and hosts (`backend_config::network`: shm, verbs, tcp).
  bool needs_network = false;
  /// "auto" goes on without it when it cannot start here (hardware absent);
  /// otherwise its failure to start fails the rank.
  bool may_be_absent = false;
  /// Registers any host memory (local, tcp); false: only some (shm: shared
  /// segments), so "auto" lets it drop out of a region it cannot take.
  bool registers_any_host = true;
  /// Builds one for `cfg` (its name is this row's), or says why not.
  caf::expected<backend_ptr> (*make)(const backend_config& cfg) = nullptr;
  /// Whether it is compiled in and can run here, and why not.
  backend_availability (*probe)() = nullptr;

  bool moves_device() const noexcept {
    return device_nearness >= 0;
  }
};

/// Every transport, in the order "auto" assembles them.
const std::vector<const transport_row*>& transport_table();

/// The row named `name`, or null.
const transport_row* find_transport(const std::string& name);

/// The row's position in the table (metrics index by it), or -1.
int transport_position(const std::string& name);

/// "local, cuda, shm, verbs, tcp": the names, for messages.
std::string transport_names_text();

} // namespace kvroom
