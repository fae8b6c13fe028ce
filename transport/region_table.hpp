#pragma once

#include <cstdint>
#include <shared_mutex>
#include <string>
#include <vector>

#include "caf/error.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/backend.hpp"

namespace kvroom::detail {

/// The memory one backend registered, shared between the thread that
/// registers and the threads that validate writes (a TCP receiver thread).
/// Readers hold the shared lock while they write into a region, so memory
/// cannot be deregistered under a running copy.
class region_table {
public:
  /// Adds a host range; refuses empty, wrapping and overlapping ones.
  caf::expected<region_id> add(const mem_desc& mem);

  caf::error remove(region_id id);

  /// True when `[addr, addr + len)` lies inside one registered region.
  /// Call with `lock()` held for as long as the range is used.
  bool covers(uint64_t addr, uint64_t len) const;

  std::shared_lock<std::shared_mutex> lock() const {
    return std::shared_lock<std::shared_mutex>{mtx_};
  }

  /// "[0x..., +N)" for reasons.
  static std::string range(uint64_t addr, uint64_t len);

private:
  struct entry {
    region_id id;
    mem_desc mem;
  };
  mutable std::shared_mutex mtx_;
  /// By address (they never overlap): `covers` is a binary search, not a
  /// scan of a rank's 64 and more buffers per write.
  std::vector<entry> regions_;
  region_id next_ = 1;
};

} // namespace kvroom::detail
