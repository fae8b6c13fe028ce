#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvroom/api/ids.hpp"

namespace kvroom {

/// What a probe of a rank's control endpoint found (endpoint_probe.hpp).
enum class probe_outcome : uint8_t {
  refused,  ///< nothing listens there: the process that held it is gone
  answered, ///< something accepted the connection: the rank, perhaps frozen
  unknown,  ///< no answer before the probe's deadline (a host or network gone)
};

const char* to_string(probe_outcome x);

/// Ranks the bootstrap registry said it lost that this rank never linked
/// to, as one plain class: believed only once checked.
///
/// The registry's word is all a rank has of a peer it never linked to, and
/// the registry can be wrong: a registry stalled past its connection
/// timeout drops the connections of live ranks and reports each one lost
/// (seen: `process_tls_test`, 2 of 5 runs with a sanitizer build compiling
/// beside it; d0 failed its 200 rooms on p0's "loss"). So a rank it reports
/// lost is a suspect:
/// - its control endpoint refuses a connection: the process is gone (a
///   SIGKILL, a crash), and it is lost at once, as fast as before;
/// - it links to us as the incarnation reported lost, or the registry
///   lists that incarnation again (it registered again): it lives, and
///   nothing fails;
/// - another incarnation appears under its id: the one reported is gone;
/// - none of these within the window (a frozen process, a host gone): lost.
/// A rank that left in order, or one a final directory (etcd) reports, is
/// never a suspect: that word is the rank's own or the lease's.
class registry_suspects {
public:
  struct suspect {
    rank_ref rank;
    uint64_t incarnation = 0;
    std::string reason;       ///< the registry's
    uint64_t deadline_ms = 0; ///< lost if nothing cleared it by then
  };

  explicit registry_suspects(uint64_t window_ms) : window_ms_(window_ms) {
    // nop
  }

  /// The registry reports `rank` of `incarnation` (not 0) lost: true when
  /// it became a suspect now (probe it, want a link); false when it is one
  /// already (the first report's window holds).
  bool reported(const rank_ref& rank, uint64_t incarnation, std::string reason, uint64_t now_ms);

  /// A probe of the suspect's endpoint came back: the suspect to count lost
  /// now (refused), else nothing (wait for a link, a listing or the window).
  std::optional<suspect> probed(rank_id id, uint64_t incarnation, probe_outcome outcome);

  /// Rank `id` showed itself as `incarnation` (linked to us, or listed
  /// again): true when that incarnation was a suspect, which it no longer is.
  bool answered(rank_id id, uint64_t incarnation);

  /// Rank `id` showed itself as another incarnation than the suspect's: the
  /// suspect is gone for good (a replacement holds its id), returned to be
  /// counted lost.
  std::optional<suspect> replaced(rank_id id, uint64_t incarnation);

  /// The suspects whose window ended with no answer: lost.
  std::vector<suspect> expired(uint64_t now_ms);

  /// The earliest deadline, if any suspect is held.
  std::optional<uint64_t> next_deadline() const;

  bool contains(rank_id id) const {
    return by_id_.count(id) > 0;
  }

  size_t size() const noexcept {
    return by_id_.size();
  }

  uint64_t window_ms() const noexcept {
    return window_ms_;
  }

private:
  uint64_t window_ms_;
  /// One per rank id: bounded by the ranks the registry lists.
  std::unordered_map<rank_id, suspect> by_id_;
};

} // namespace kvroom
