#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "caf/stateful_actor.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include "kvroom/actors/room/landing_ledger.hpp"
#include "kvroom/actors/room/room_core.hpp"
#include "kvroom/transport/rank_mapping.hpp"

namespace kvroom {

/// State of the receiver side of one room on one decode rank.
struct decode_room_state {
  room_core core;
  /// The prefill ranks that write into this decode rank: the one of its TP
  /// slot, or with declared parallel layouts every rank the rank mapping
  /// names (head slices from several, or one MLA sender). Empty until the
  /// group is resolved.
  std::vector<std::shared_ptr<const rank_entry>> sources;
  /// The room's decider (`is_decider`): parts go straight to its manager.
  std::shared_ptr<const rank_entry> decider;
  bool resolving = false;
  bool initialized = false;
  receiver_init init;
  bool dst_sent = false;
  bool started = false;
  /// Mapped by layouts (the prefill group's declared ones, and this rank's
  /// own or the one they imply at its TP size): what each source writes here.
  bool mapped = false;
  /// Shared with the rank's other rooms of the same layouts.
  std::shared_ptr<const decode_mapping> mapping;
  parallel_layout layout;
  /// The deployment checks integrity: each part is hashed as it completes.
  bool hashing = false;
  /// Pull: the bytes this room's pages span (what a source may ask this
  /// rank to read into), and the reads at the worker, by this room's job id.
  struct pending_read {
    rank_id source = -1;
    uint64_t source_job = 0;
    caf::actor source_room;
    /// What it puts in each KV buffer (while `landing` counts).
    buffer_bytes lands;
  };
  struct pull_state {
    std::vector<byte_range> own_ranges;
    std::unordered_map<uint64_t, pending_read> reads;
    uint64_t next_read = 1;
    /// Bytes this rank read, and over which transport (its metrics).
    uint64_t bytes_read = 0;
    std::string read_transport;
  };
  /// Made by a pulling room only. Kept apart so that a pushing room's actor
  /// fits CAF's allocation in a smaller size class (1,792 bytes with its
  /// control block, not 2,048: 256 bytes a room on every decode rank).
  std::unique_ptr<pull_state> pull;

  pull_state& pulling() {
    if (!pull)
      pull = std::make_unique<pull_state>();
    return *pull;
  }
  /// Which KV buffers hold every byte of the room so far, for a scheduler
  /// that starts a layer once it landed: made by the room's first chunk of
  /// some buffers (a layer's; a room sent whole lands with its Success).
  landing_ledger landing;

  /// The source with this rank id (null: not one of this room's).
  const rank_entry* source_of(rank_id id) const {
    for (auto& s : sources)
      if (s->rank.id == id)
        return s.get();
    return nullptr;
  }

  bool is_source(rank_id id) const {
    return source_of(id) != nullptr;
  }

  /// Whether the room counts what lands layer by layer: its one source
  /// writes whole pages (not mapped), and its part is not checked for
  /// integrity (a part is whole only once checked, at its end).
  bool counts_landing() const {
    return !mapped && !hashing && sources.size() == 1 && dst_sent;
  }

  static inline const char* name = "kvroom.decode_room";
};

/// The receiver room actor: resolves the prefill ranks of its room through
/// the manager's copy of the bootstrap registry, sends them its destination
/// pages, reports its part to the room's decider once every one of them
/// wrote its last byte, and concludes Success on the decider's commit. A
/// pulling room reads each chunk its sources offer (`source_ready`) on the
/// rank's worker and answers each (`reads_done`); the rest is the same.
caf::behavior decode_room(counted_actor<decode_room_state>* self,
                          room_params params);

} // namespace kvroom
