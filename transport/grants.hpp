#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/ids.hpp"

namespace kvroom {

/// Per-room write grants on a receiving rank: which sender may write which
/// bytes, for which live room. A receiver whose data plane reads remote
/// writes itself (tcp) admits a batch only when every write lies inside
/// what its authenticated sender was granted for the batch's room; the
/// grant ends when the room concludes, so nothing lands after `poll()`
/// returned Success or Failed.
///
/// Thread-safe: rooms grant and revoke from actor threads, connection
/// threads admit. `revoke` waits for the batches of that room being received
/// at that moment (never for other rooms'), so once it returns no byte of
/// the room is written again.
class grant_table {
public:
  /// `what`: the operation it admits, for its refusals ("write", "read":
  /// the same table serves a pull's read grants on the serving side).
  explicit grant_table(size_t max_grants = 1u << 20, const char* what = "write")
    : max_grants_(max_grants), what_(what) {
    // nop
  }

  /// `sender` may write `ranges` for `room` (merged with what it had).
  /// False when the table is full.
  bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges);

  /// No sender writes `room` again. Waits for batches of it in progress.
  void revoke(room_id room);

  /// While alive, the batch it admitted may write; then `revoke` may go on.
  class permit {
  public:
    permit() = default;
    permit(permit&& other) noexcept : table_(other.table_), room_(other.room_) {
      other.table_ = nullptr;
    }
    permit& operator=(permit&& other) noexcept {
      if (this != &other) {
        release();
        table_ = other.table_;
        room_ = other.room_;
        other.table_ = nullptr;
      }
      return *this;
    }
    ~permit() {
      release();
    }

    explicit operator bool() const noexcept {
      return table_ != nullptr;
    }

    /// The room was revoked while this batch was admitted: write no more
    /// (the caller reads what is left of the batch into a scratch buffer).
    bool revoked() const;

  private:
    friend class grant_table;
    void release() noexcept;
    permit(grant_table* t, room_id r) : table_(t), room_(r) {
      // nop
    }
    grant_table* table_ = nullptr;
    room_id room_ = 0;
  };

  /// Admits a batch of `ops` (destination address, size) from `sender` for
  /// `room`, or says why not in `why` and returns an empty permit.
  permit admit(room_id room, rank_id sender,
               const std::vector<std::pair<uint64_t, uint64_t>>& ops, std::string& why);

  /// True when `sender` already landed the batch keyed `key` (nonzero) of
  /// `room`: a copy that came over another path is read and dropped.
  bool applied_before(room_id room, rank_id sender, uint64_t key) const;

  /// Every byte of `sender`'s batch `key` of `room` landed. At most
  /// `max_keys_per_room` keys are kept per room (beyond them a copy would
  /// be applied again: the same bytes into the same pages).
  void mark_applied(room_id room, rank_id sender, uint64_t key);

  static constexpr size_t max_keys_per_room = 1u << 16;

  size_t size() const;

private:
  struct entry {
    std::unordered_map<rank_id, std::vector<byte_range>> by_sender;
    /// Keys of batches that landed, per sender (gone with the grant).
    std::unordered_map<rank_id, std::unordered_set<uint64_t>> applied;
    size_t applied_count = 0;
    uint32_t active = 0;
    bool revoked = false;
  };

  size_t max_grants_;
  const char* what_;
  mutable std::mutex mtx_;
  std::condition_variable idle_;
  std::unordered_map<room_id, entry> rooms_;
};

/// Sorts and merges touching or overlapping ranges.
std::vector<byte_range> merge_ranges(std::vector<byte_range> xs);

/// Whether [addr, addr + size) lies inside one of `merged` (merge_ranges'
/// output): a write a receiver granted, a read a pull's reader expects.
bool ranges_cover(const std::vector<byte_range>& merged, uint64_t addr, uint64_t size);

} // namespace kvroom
