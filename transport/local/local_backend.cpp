#include "kvroom/transport/local/local_backend.hpp"

#include <atomic>
#include <cstring>
#include <random>
#include <shared_mutex>
#include <mutex>
#include <vector>

#include <unistd.h>

#include "kvroom/messages/error.hpp"

namespace kvroom::detail {

namespace {

/// Every local backend's registrations in this process. Writers (register,
/// deregister) are rare; copies hold the shared lock so memory cannot be
/// deregistered under a running memcpy.
class local_domain {
public:
  static local_domain& get() {
    static local_domain instance;
    return instance;
  }

  uint64_t token() const noexcept {
    return token_;
  }

  uint64_t new_instance() {
    return next_instance_.fetch_add(1);
  }

  region_id add(uint64_t instance, const mem_desc& mem) {
    std::unique_lock<std::shared_mutex> guard{mtx_};
    auto id = next_region_++;
    regions_[instance].push_back(entry{id, mem});
    return id;
  }

  bool remove(uint64_t instance, region_id id) {
    std::unique_lock<std::shared_mutex> guard{mtx_};
    auto i = regions_.find(instance);
    if (i == regions_.end())
      return false;
    auto& xs = i->second;
    for (auto j = xs.begin(); j != xs.end(); ++j) {
      if (j->id == id) {
        xs.erase(j);
        return true;
      }
    }
    return false;
  }

  void drop(uint64_t instance) {
    std::unique_lock<std::shared_mutex> guard{mtx_};
    regions_.erase(instance);
  }

  bool overlaps_any(uint64_t instance, const mem_desc& mem) {
    std::shared_lock<std::shared_mutex> guard{mtx_};
    auto i = regions_.find(instance);
    if (i == regions_.end())
      return false;
    for (auto& e : i->second)
      if (e.mem.overlaps(mem))
        return true;
    return false;
  }

  /// Validates every op against both instances' registrations, then copies.
  caf::error copy(uint64_t src_instance, uint64_t dst_instance,
                  const write_batch& batch) {
    std::shared_lock<std::shared_mutex> guard{mtx_};
    auto src = regions_.find(src_instance);
    auto dst = regions_.find(dst_instance);
    if (dst == regions_.end())
      return make_error(errc::not_registered,
                        "peer rank " + std::to_string(batch.peer.owner)
                          + " has no registered memory on local endpoint "
                          + batch.peer.address);
    if (src == regions_.end())
      return make_error(errc::not_registered,
                        "sender has no registered memory");
    for (size_t i = 0; i < batch.ops.size(); ++i) {
      auto& op = batch.ops[i];
      if (!covered(src->second, op.src_addr, op.size_bytes))
        return make_error(errc::not_registered,
                          "write " + std::to_string(i) + ": source range "
                            + range(op.src_addr, op.size_bytes)
                            + " is outside the sender's registered memory");
      if (!covered(dst->second, op.dst_addr, op.size_bytes))
        return make_error(errc::out_of_range,
                          "write " + std::to_string(i) + ": destination range "
                            + range(op.dst_addr, op.size_bytes)
                            + " is outside rank "
                            + std::to_string(batch.peer.owner)
                            + "'s registered memory");
    }
    for (auto& op : batch.ops)
      std::memcpy(reinterpret_cast<void*>(op.dst_addr),
                  reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
    return caf::none;
  }

private:
  struct entry {
    region_id id;
    mem_desc mem;
  };

  local_domain() {
    std::random_device rd;
    token_ = (static_cast<uint64_t>(::getpid()) << 32) ^ rd();
  }

  static bool covered(const std::vector<entry>& xs, uint64_t addr,
                      uint64_t len) {
    for (auto& e : xs)
      if (e.mem.covers(addr, len, -1))
        return true;
    return false;
  }

  static std::string range(uint64_t addr, uint64_t len) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "[0x%llx, +%llu)",
                  static_cast<unsigned long long>(addr),
                  static_cast<unsigned long long>(len));
    return buf;
  }

  std::shared_mutex mtx_;
  std::unordered_map<uint64_t, std::vector<entry>> regions_;
  std::atomic<uint64_t> next_instance_{1};
  region_id next_region_ = 1;
  uint64_t token_ = 0;
};

} // namespace

local_backend::local_backend(rank_id owner)
  : owner_(owner), instance_(local_domain::get().new_instance()) {
  // nop
}

local_backend::~local_backend() {
  local_domain::get().drop(instance_);
}

std::string local_backend::name() const {
  return "local";
}

backend_caps local_backend::caps() const {
  backend_caps out;
  out.host_memory = true;
  out.same_process = true;
  out.max_batch_ops = 1u << 20;
  return out;
}

endpoint_desc local_backend::endpoint() const {
  return endpoint_desc{"local", std::to_string(instance_),
                       local_domain::get().token(), owner_, {}, {}};
}

caf::expected<region_id> local_backend::register_memory(const mem_desc& mem) {
  if (mem.device_id >= 0)
    return make_error(errc::unsupported,
                      "local backend moves host memory only (device "
                        + std::to_string(mem.device_id) + ")");
  if (mem.addr == 0 || mem.size_bytes == 0)
    return make_error(errc::invalid_argument,
                      "cannot register an empty or null range");
  if (mem.addr + mem.size_bytes < mem.addr)
    return make_error(errc::invalid_argument, "range wraps the address space");
  if (local_domain::get().overlaps_any(instance_, mem))
    return make_error(errc::invalid_argument,
                      "range overlaps memory this rank registered already");
  return local_domain::get().add(instance_, mem);
}

caf::error local_backend::deregister_memory(region_id id) {
  if (!local_domain::get().remove(instance_, id))
    return make_error(errc::not_registered,
                      "no registration " + std::to_string(id));
  return caf::none;
}

// Thread-safe: reads only this instance's immutable fields and the domain,
// which locks its own table.
post_result local_backend::post(const write_batch& batch) {
  if (batch.peer.transport != "local")
    return post_result::failed(make_error(errc::invalid_argument,
                                          "local backend cannot reach a '"
                                            + batch.peer.transport + "' endpoint"));
  if (batch.peer.domain != local_domain::get().token())
    return post_result::failed(make_error(errc::unavailable,
                                          "peer rank " + std::to_string(batch.peer.owner)
                                            + " is not in this process"));
  if (batch.src_device_id >= 0 || batch.dst_device_id >= 0)
    return post_result::failed(
      make_error(errc::unsupported, "local backend moves host memory only"));
  uint64_t peer_instance = 0;
  try {
    peer_instance = std::stoull(batch.peer.address);
  } catch (...) {
    return post_result::failed(make_error(errc::invalid_argument,
                                          "malformed local endpoint address '"
                                            + batch.peer.address + "'"));
  }
  if (auto err = local_domain::get().copy(instance_, peer_instance, batch))
    return post_result::failed(std::move(err));
  return post_result::done();
}

bool local_backend::completes_inline(const write_batch&) const {
  return true;
}

} // namespace kvroom::detail
