#include "kvroom/transport/region_table.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <mutex>

#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

caf::expected<region_id> region_table::add(const mem_desc& mem) {
  if (mem.device_id >= 0)
    return make_error(errc::unsupported, "host memory only (device "
                                           + std::to_string(mem.device_id) + ")");
  if (mem.addr == 0 || mem.size_bytes == 0)
    return make_error(errc::invalid_argument,
                      "cannot register an empty or null range");
  if (mem.addr + mem.size_bytes < mem.addr)
    return make_error(errc::invalid_argument, "range wraps the address space");
  std::lock_guard<std::mutex> guard{write_mtx_};
  auto next = regions_.latest();
  for (auto& e : next)
    if (e.mem.overlaps(mem))
      return make_error(errc::invalid_argument,
                        "range overlaps memory this rank registered already");
  auto id = next_++;
  auto at = std::upper_bound(next.begin(), next.end(), mem.addr,
                             [](uint64_t a, const entry& e) { return a < e.mem.addr; });
  next.insert(at, entry{id, mem});
  regions_.replace(std::move(next));
  return id;
}

caf::error region_table::remove(region_id id) {
  std::lock_guard<std::mutex> guard{write_mtx_};
  auto next = regions_.latest();
  for (auto i = next.begin(); i != next.end(); ++i)
    if (i->id == id) {
      next.erase(i);
      // Returns once every copy that could write into the region is done.
      regions_.replace(std::move(next));
      return caf::none;
    }
  return make_error(errc::not_registered, "no registration " + std::to_string(id));
}

std::string region_table::range(uint64_t addr, uint64_t len) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[0x%llx, +%llu)",
                static_cast<unsigned long long>(addr),
                static_cast<unsigned long long>(len));
  return buf;
}

} // namespace kvroom::detail
