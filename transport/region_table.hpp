#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/grace_period.hpp"

namespace kvroom::detail {

/// The memory one backend registered, shared between the thread that
/// registers and the threads that validate and copy (rooms posting inline,
/// the transfer worker, a TCP receiver thread). Copies read it through a
/// `view`, with no lock; `remove` returns only once no view that could see
/// the removed region is open, so memory is never deregistered under a
/// running copy.
class region_table {
  struct entry {
    region_id id;
    mem_desc mem;
  };
  /// By address (they never overlap): `covers` is a binary search, not a
  /// scan of a rank's 64 and more buffers per write.
  using list = std::vector<entry>;

public:
  /// The registrations as they were when it was taken, read inside a
  /// section the caller holds (`section` is the proof) and valid until it
  /// ends: for a copy that reads several tables under one section.
  class snapshot {
  public:
    snapshot(const region_table& table, const grace_period::reader&) noexcept
      : list_(&table.regions_.read()) {
      // nop
    }

    /// True when `[addr, addr + len)` lies inside one registered region.
    bool covers(uint64_t addr, uint64_t len) const noexcept {
      size_t hint = 0;
      return covers(addr, len, hint);
    }

    /// The same, asking region `hint` first and leaving there the region
    /// that held the range: a batch's ops run through one buffer after
    /// another (a head-sliced page is 16 ops of 512 B in one buffer), and
    /// a binary search of a rank's 64 and more buffers per op cost as much
    /// as a small op's copy.
    bool covers(uint64_t addr, uint64_t len, size_t& hint) const noexcept {
      auto& xs = *list_;
      if (hint < xs.size() && xs[hint].mem.covers(addr, len, -1))
        return true;
      // The last region starting at or below `addr` is the only one that
      // can hold the range (regions never overlap).
      auto after = std::upper_bound(xs.begin(), xs.end(), addr,
                                    [](uint64_t a, const entry& e) { return a < e.mem.addr; });
      if (after == xs.begin() || !std::prev(after)->mem.covers(addr, len, -1))
        return false;
      hint = static_cast<size_t>(std::prev(after) - xs.begin());
      return true;
    }

  private:
    const list* list_;
  };

  /// A snapshot with its own section: keep it open for as long as a range
  /// it covered is used. Never register or deregister while one is open on
  /// the same thread (the call would wait for it).
  class view {
  public:
    explicit view(const region_table& table) : snapshot_(table, section_) {
      // nop
    }

    /// True when `[addr, addr + len)` lies inside one registered region.
    bool covers(uint64_t addr, uint64_t len) const noexcept {
      return snapshot_.covers(addr, len);
    }

    /// The same, asking region `hint` first (`snapshot::covers`).
    bool covers(uint64_t addr, uint64_t len, size_t& hint) const noexcept {
      return snapshot_.covers(addr, len, hint);
    }

  private:
    grace_period::reader section_;
    snapshot snapshot_;
  };

  /// Adds a host range; refuses empty, wrapping and overlapping ones.
  caf::expected<region_id> add(const mem_desc& mem);

  /// Removes a registration, once no copy can be writing into it.
  caf::error remove(region_id id);

  view read() const {
    return view{*this};
  }

  /// "[0x..., +N)" for reasons.
  static std::string range(uint64_t addr, uint64_t len);

private:
  /// Serialises writers; readers never take it.
  std::mutex write_mtx_;
  published<list> regions_;
  region_id next_ = 1;
};

} // namespace kvroom::detail
