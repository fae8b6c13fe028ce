#include "kvroom/transport/local/local_backend.hpp"

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/bulk_copy.hpp"
#include "kvroom/transport/grace_period.hpp"

namespace kvroom::detail {

namespace {

/// Every local backend of this process, by instance: where a post finds its
/// peer's registrations. Backends join when made and leave when destroyed
/// (rare); posts read it with no lock, under `grace_period`, so a backend
/// leaves only once no copy can be using its table.
class local_domain {
public:
  /// Instance -> its table, sorted by instance (a process holds a few).
  using directory = std::vector<std::pair<uint64_t, const region_table*>>;

  static local_domain& get() {
    static local_domain instance;
    return instance;
  }

  uint64_t token() const noexcept {
    return token_;
  }

  uint64_t join(const region_table* table) {
    std::lock_guard<std::mutex> guard{write_mtx_};
    auto id = next_instance_++;
    auto next = backends_.latest();
    next.emplace_back(id, table); // ids only grow: stays sorted
    backends_.replace(std::move(next));
    return id;
  }

  void leave(uint64_t instance) {
    std::lock_guard<std::mutex> guard{write_mtx_};
    auto next = backends_.latest();
    for (auto i = next.begin(); i != next.end(); ++i)
      if (i->first == instance) {
        next.erase(i);
        break;
      }
    backends_.replace(std::move(next));
  }

  /// Validates every op against both instances' registrations, then copies
  /// (around the cache from `streaming` bytes on, bulk_copy.hpp).
  post_result copy(uint64_t src_instance, uint64_t dst_instance, const write_batch& batch,
                   uint64_t streaming) {
    // One section over the look-up, the checks and the copies: neither
    // backend leaves, nor is a range deregistered, until they are done.
    grace_period::reader section;
    if (auto err = check_write(section, src_instance, dst_instance, batch))
      return post_result::failed(std::move(err));
    bulk_copier copier = bulk_copier::for_post(batch.total_bytes(), streaming);
    strided_rows rows{batch.strided};
    uint64_t from = 0, to = 0, len = 0;
    while (rows.next(from, to, len))
      copier(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), len);
    copy_ops(batch.ops, copier,
             [](const write_op& op) { return std::make_pair(op.src_addr, op.dst_addr); });
    return post_result::done();
  }

  /// Several writes from `src_instance`, each batch checked on its own and
  /// those that pass copied op by op in turn (`interleave`), streaming when
  /// they move `streaming` bytes together. `dst_instances[i]` is batch i's
  /// peer, or its error when its endpoint named none.
  std::vector<post_result> copy_group(uint64_t src_instance,
                                      std::vector<caf::expected<uint64_t>>& dst_instances,
                                      const std::vector<const write_batch*>& batches,
                                      uint64_t streaming) {
    std::vector<post_result> out;
    out.reserve(batches.size());
    std::vector<const write_op*> passed;
    std::vector<size_t> sizes;
    std::vector<const std::vector<strided_write>*> strided;
    uint64_t bytes = 0;
    grace_period::reader section;
    for (size_t i = 0; i < batches.size(); ++i) {
      auto err = dst_instances[i] ? check_write(section, src_instance, *dst_instances[i], *batches[i])
                                  : std::move(dst_instances[i].error());
      if (err) {
        out.push_back(post_result::failed(std::move(err)));
        continue;
      }
      out.push_back(post_result::done());
      passed.push_back(batches[i]->ops.data());
      sizes.push_back(batches[i]->ops.size());
      if (!batches[i]->strided.empty())
        strided.push_back(&batches[i]->strided);
      bytes += batches[i]->total_bytes();
    }
    auto copier = bulk_copier::for_post(bytes, streaming);
    interleave_rows(strided, [&](uint64_t from, uint64_t to, uint64_t len) {
      copier(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), len);
    });
    interleave(sizes, [&](size_t b, size_t i) {
      auto& op = passed[b][i];
      copier(reinterpret_cast<void*>(op.dst_addr), reinterpret_cast<const void*>(op.src_addr),
             op.size_bytes);
    });
    return out;
  }

  /// The same for a pull: from the peer's memory into `local_instance`'s.
  post_result read(uint64_t local_instance, uint64_t peer_instance, const read_batch& batch,
                   uint64_t streaming) {
    auto owner = batch.peer.owner;
    grace_period::reader section;
    if (auto err = check(
          section, peer_instance, local_instance, batch.peer, batch.ops, "read",
          [](const read_op& op) { return std::make_pair(op.remote_addr, op.local_addr); },
          [owner](bool src) {
            return src ? "rank " + std::to_string(owner) : std::string{"the reader"};
          }))
      return post_result::failed(std::move(err));
    bulk_copier copier = bulk_copier::for_post(batch.total_bytes(), streaming);
    copy_ops(batch.ops, copier,
             [](const read_op& op) { return std::make_pair(op.remote_addr, op.local_addr); });
    return post_result::done();
  }

private:
  local_domain() {
    std::random_device rd;
    token_ = (static_cast<uint64_t>(::getpid()) << 32) ^ rd();
  }

  static const region_table* find(const directory& dir, uint64_t instance) {
    for (auto& [id, table] : dir)
      if (id == instance)
        return table;
    return nullptr;
  }

  caf::error check_write(const grace_period::reader& section, uint64_t src_instance,
                         uint64_t dst_instance, const write_batch& batch) {
    // Names are made only for an error: posts are the hot path.
    auto owner = batch.peer.owner;
    return check(
      section, src_instance, dst_instance, batch.peer, batch.ops, "write",
      [](const write_op& op) { return std::make_pair(op.src_addr, op.dst_addr); },
      [owner](bool src) { return src ? std::string{"the sender"} : "rank " + std::to_string(owner); },
      &batch.strided);
  }

  /// Whether every op (`ends(op)`: its source and destination addresses)
  /// lies in registered memory: sources in `src_instance`'s, destinations
  /// in `dst_instance`'s (`who(true)`, `who(false)` name them). Called inside
  /// `section`, which stays open over the copies that follow.
  /// `strided` (writes only): each strided write's whole span must lie in
  /// registered memory on its side, its rows being inside that span.
  template <class Op, class Ends, class Who>
  caf::error check(const grace_period::reader& section, uint64_t src_instance,
                   uint64_t dst_instance, const endpoint_desc& peer, const std::vector<Op>& ops,
                   const char* what, Ends ends, Who who,
                   const std::vector<strided_write>* strided = nullptr) {
    auto& dir = backends_.read();
    auto* src_table = find(dir, src_instance);
    auto* dst_table = find(dir, dst_instance);
    if (!src_table || !dst_table)
      return make_error(errc::not_registered, who(!src_table) + " has no local backend at endpoint "
                                                + peer.address + " (destroyed, or never made)");
    region_table::snapshot src{*src_table, section};
    region_table::snapshot dst{*dst_table, section};
    size_t src_hint = 0, dst_hint = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      auto [from, to] = ends(ops[i]);
      auto len = ops[i].size_bytes;
      if (!src.covers(from, len, src_hint))
        return make_error(errc::not_registered,
                          std::string{what} + " " + std::to_string(i) + ": source range "
                            + region_table::range(from, len) + " is outside " + who(true)
                            + "'s registered memory");
      if (!dst.covers(to, len, dst_hint))
        return make_error(errc::out_of_range,
                          std::string{what} + " " + std::to_string(i) + ": destination range "
                            + region_table::range(to, len) + " is outside " + who(false)
                            + "'s registered memory");
    }
    for (size_t i = 0; strided != nullptr && i < strided->size(); ++i) {
      auto& w = (*strided)[i];
      uint64_t src_span = 0, dst_span = 0;
      if (auto err = strided_spans(w, i, src_span, dst_span))
        return err;
      if (!src.covers(w.src_addr, src_span, src_hint))
        return make_error(errc::not_registered,
                          "strided write " + std::to_string(i) + ": source span "
                            + region_table::range(w.src_addr, src_span) + " is outside "
                            + who(true) + "'s registered memory");
      if (!dst.covers(w.dst_addr, dst_span, dst_hint))
        return make_error(errc::out_of_range,
                          "strided write " + std::to_string(i) + ": destination span "
                            + region_table::range(w.dst_addr, dst_span) + " is outside "
                            + who(false) + "'s registered memory");
    }
    return caf::none;
  }

  template <class Op, class Ends>
  static void copy_ops(const std::vector<Op>& ops, bulk_copier& copier, Ends ends) {
    for (auto& op : ops) {
      auto [from, to] = ends(op);
      copier(reinterpret_cast<void*>(to), reinterpret_cast<const void*>(from), op.size_bytes);
    }
  }

  /// Serialises joins and leaves; posts never take it.
  std::mutex write_mtx_;
  published<directory> backends_;
  uint64_t next_instance_ = 1;
  uint64_t token_ = 0;
};

} // namespace

local_backend::local_backend(rank_id owner, uint64_t streaming_copy_bytes)
  : owner_(owner), streaming_(streaming_copy_bytes),
    instance_(local_domain::get().join(&regions_)) {
  // nop
}

local_backend::~local_backend() {
  // Before `regions_` goes: returns once no copy can be reading it.
  local_domain::get().leave(instance_);
}

std::string local_backend::name() const {
  return "local";
}

backend_caps local_backend::caps() const {
  backend_caps out;
  out.max_batch_ops = 1u << 20;
  out.reads = true;
  out.strided_writes = true;
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
  return regions_.add(mem);
}

caf::error local_backend::deregister_memory(region_id id) {
  return regions_.remove(id);
}

namespace {

/// The peer's instance in this process, or why it cannot be reached.
caf::expected<uint64_t> peer_instance(const endpoint_desc& peer, int32_t device_a,
                                      int32_t device_b) {
  // Compared without building a string: posts are the hot path.
  constexpr std::string_view local{"local"};
  if (std::string_view{peer.transport} != local)
    return make_error(errc::invalid_argument,
                      "local backend cannot reach a '" + peer.transport + "' endpoint");
  if (peer.domain != local_domain::get().token())
    return make_error(errc::unavailable,
                      "peer rank " + std::to_string(peer.owner) + " is not in this process");
  if (device_a >= 0 || device_b >= 0)
    return make_error(errc::unsupported, "local backend moves host memory only");
  uint64_t instance = 0;
  auto* first = peer.address.data();
  auto* last = first + peer.address.size();
  auto [end, ec] = std::from_chars(first, last, instance);
  if (ec != std::errc{} || end != last || first == last)
    return make_error(errc::invalid_argument,
                      "malformed local endpoint address '" + peer.address + "'");
  return instance;
}

} // namespace

// Thread-safe: reads only this instance's immutable fields and the domain,
// whose tables are published under `grace_period`.
post_result local_backend::post(const write_batch& batch) {
  auto peer = peer_instance(batch.peer, batch.src_device_id, batch.dst_device_id);
  if (!peer)
    return post_result::failed(std::move(peer.error()));
  return local_domain::get().copy(instance_, *peer, batch, streaming_);
}

std::vector<post_result> local_backend::post_group(const std::vector<const write_batch*>& batches) {
  std::vector<caf::expected<uint64_t>> peers;
  peers.reserve(batches.size());
  for (auto* b : batches)
    peers.push_back(peer_instance(b->peer, b->src_device_id, b->dst_device_id));
  return local_domain::get().copy_group(instance_, peers, batches, streaming_);
}

post_result local_backend::post_read(const read_batch& batch) {
  auto peer = peer_instance(batch.peer, batch.remote_device_id, batch.local_device_id);
  if (!peer)
    return post_result::failed(std::move(peer.error()));
  return local_domain::get().read(instance_, *peer, batch, streaming_);
}

bool local_backend::reads_inline(const read_batch&) const {
  return true;
}

bool local_backend::completes_inline(const write_batch&) const {
  return true;
}

} // namespace kvroom::detail
