#include "kvroom/transport/local/local_backend.hpp"

#include <atomic>
#include <cstring>
#include <random>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include <unistd.h>

#include "kvroom/api/errors.hpp"

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
  caf::error copy(uint64_t src_instance, uint64_t dst_instance, const write_batch& batch) {
    // Names are made only for an error: posts are the hot path.
    auto owner = batch.peer.owner;
    return checked_copy(
      src_instance, dst_instance, batch.peer, batch.ops, "write",
      [](const write_op& op) { return std::make_pair(op.src_addr, op.dst_addr); },
      [owner](bool src) { return src ? std::string{"the sender"} : "rank " + std::to_string(owner); });
  }

  /// The same for a pull: from the peer's memory into `local_instance`'s.
  caf::error read(uint64_t local_instance, uint64_t peer_instance, const read_batch& batch) {
    auto owner = batch.peer.owner;
    return checked_copy(
      peer_instance, local_instance, batch.peer, batch.ops, "read",
      [](const read_op& op) { return std::make_pair(op.remote_addr, op.local_addr); },
      [owner](bool src) { return src ? "rank " + std::to_string(owner) : std::string{"the reader"}; });
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

  /// Copies every op (`ends(op)`: its source and destination addresses)
  /// once all of them lie in registered memory: sources in `src_instance`'s,
  /// destinations in `dst_instance`'s (`who(true)`, `who(false)` name them).
  template <class Op, class Ends, class Who>
  caf::error checked_copy(uint64_t src_instance, uint64_t dst_instance, const endpoint_desc& peer,
                          const std::vector<Op>& ops, const char* what, Ends ends, Who who) {
    std::shared_lock<std::shared_mutex> guard{mtx_};
    auto src = regions_.find(src_instance);
    auto dst = regions_.find(dst_instance);
    if (src == regions_.end() || dst == regions_.end())
      return make_error(errc::not_registered,
                        who(src == regions_.end())
                          + " has no registered memory on local endpoint " + peer.address);
    size_t src_hint = 0, dst_hint = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      auto [from, to] = ends(ops[i]);
      auto len = ops[i].size_bytes;
      if (!covered(src->second, from, len, src_hint))
        return make_error(errc::not_registered,
                          std::string{what} + " " + std::to_string(i) + ": source range "
                            + range(from, len) + " is outside " + who(true)
                            + "'s registered memory");
      if (!covered(dst->second, to, len, dst_hint))
        return make_error(errc::out_of_range,
                          std::string{what} + " " + std::to_string(i) + ": destination range "
                            + range(to, len) + " is outside " + who(false)
                            + "'s registered memory");
    }
    for (auto& op : ops) {
      auto [from, to] = ends(op);
      std::memcpy(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from),
                  op.size_bytes);
    }
    return caf::none;
  }

  /// Whether [addr, addr + len) lies in one of `xs`, asking `hint` (the
  /// region the last write fell in) first: a batch's writes run through
  /// one buffer after another, and a rank registers a buffer per layer and
  /// K/V (64 and more), so a scan per write cost more than a small page's
  /// copy.
  static bool covered(const std::vector<entry>& xs, uint64_t addr, uint64_t len,
                      size_t& hint) {
    if (hint < xs.size() && xs[hint].mem.covers(addr, len, -1))
      return true;
    for (size_t i = 0; i < xs.size(); ++i)
      if (xs[i].mem.covers(addr, len, -1)) {
        hint = i;
        return true;
      }
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
  out.max_batch_ops = 1u << 20;
  out.reads = true;
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

namespace {

/// The peer's instance in this process, or why it cannot be reached.
caf::expected<uint64_t> peer_instance(const endpoint_desc& peer, int32_t device_a,
                                      int32_t device_b) {
  if (peer.transport != "local")
    return make_error(errc::invalid_argument,
                      "local backend cannot reach a '" + peer.transport + "' endpoint");
  if (peer.domain != local_domain::get().token())
    return make_error(errc::unavailable,
                      "peer rank " + std::to_string(peer.owner) + " is not in this process");
  if (device_a >= 0 || device_b >= 0)
    return make_error(errc::unsupported, "local backend moves host memory only");
  try {
    return std::stoull(peer.address);
  } catch (...) {
    return make_error(errc::invalid_argument,
                      "malformed local endpoint address '" + peer.address + "'");
  }
}

} // namespace

// Thread-safe: reads only this instance's immutable fields and the domain,
// which locks its own table.
post_result local_backend::post(const write_batch& batch) {
  auto peer = peer_instance(batch.peer, batch.src_device_id, batch.dst_device_id);
  if (!peer)
    return post_result::failed(std::move(peer.error()));
  if (auto err = local_domain::get().copy(instance_, *peer, batch))
    return post_result::failed(std::move(err));
  return post_result::done();
}

post_result local_backend::post_read(const read_batch& batch) {
  auto peer = peer_instance(batch.peer, batch.remote_device_id, batch.local_device_id);
  if (!peer)
    return post_result::failed(std::move(peer.error()));
  if (auto err = local_domain::get().read(instance_, *peer, batch))
    return post_result::failed(std::move(err));
  return post_result::done();
}

bool local_backend::reads_inline(const read_batch&) const {
  return true;
}

bool local_backend::completes_inline(const write_batch&) const {
  return true;
}

} // namespace kvroom::detail
