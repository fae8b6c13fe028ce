#include "kvroom/transport/shm/shm_backend.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>
#include <vector>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/bulk_copy.hpp"
#include "kvroom/transport/host_id.hpp"

namespace kvroom::detail {

namespace {

/// The /dev/shm segment backing `[addr, addr + len)`, from /proc/self/maps.
bool find_segment(uint64_t addr, uint64_t len, shm_region& out) {
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in{line};
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    auto dash = range.find('-');
    if (dash == std::string::npos || path.rfind("/dev/shm/", 0) != 0)
      continue;
    auto start = std::stoull(range.substr(0, dash), nullptr, 16);
    auto end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr < start || len > end - start || addr - start > end - start - len)
      continue;
    if (perms.size() < 4 || perms[3] != 's')
      return false; // a private mapping of the file: writes would not show
    out.addr = addr;
    out.size_bytes = len;
    out.segment = path.substr(8); // "/dev/shm/x" -> "/x"
    out.offset = std::stoull(offset, nullptr, 16) + (addr - start);
    return true;
  }
  return false;
}

} // namespace

shm_backend::shm_backend(rank_id owner, uint64_t streaming_copy_bytes)
  : owner_(owner), streaming_(streaming_copy_bytes), domain_(host_domain()) {
  // nop
}

shm_backend::~shm_backend() {
  for (auto& kvp : mapped_.latest())
    ::munmap(kvp.second.base, kvp.second.size);
}

std::string shm_backend::name() const {
  return "shm";
}

backend_caps shm_backend::caps() const {
  backend_caps out;
  out.max_batch_ops = 1u << 20;
  out.reads = true;
  out.strided_writes = true;
  return out;
}

endpoint_desc shm_backend::endpoint() const {
  endpoint_desc out{"shm", std::to_string(::getpid()), domain_, owner_, {}, {}};
  for (auto& kvp : exposed_)
    out.shared.push_back(kvp.second);
  return out;
}

caf::expected<region_id> shm_backend::register_memory(const mem_desc& mem) {
  shm_region seg;
  if (!find_segment(mem.addr, mem.size_bytes, seg))
    return make_error(errc::unsupported,
                      "memory at " + region_table::range(mem.addr, mem.size_bytes)
                        + " is not in a shared /dev/shm mapping (allocate it with "
                          "shm_open, e.g. host_kv_cache with shared = true)");
  auto id = regions_.add(mem);
  if (id)
    exposed_.emplace(*id, seg);
  return id;
}

caf::error shm_backend::deregister_memory(region_id id) {
  exposed_.erase(id);
  return regions_.remove(id);
}

caf::error shm_backend::map_segment(const std::string& name) {
  std::lock_guard<std::mutex> guard{map_mtx_};
  if (mapped_.latest().count(name) != 0)
    return caf::none; // another thread mapped it meanwhile
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos)
    return make_error(errc::invalid_argument, "malformed shm segment name '" + name + "'");
  int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    return make_error(errc::unavailable, "shm_open " + name + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    return make_error(errc::unavailable, "shm segment " + name + " is empty");
  }
  auto size = static_cast<uint64_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED)
    return make_error(errc::unavailable, "mmap " + name + ": " + std::strerror(errno));
  auto next = mapped_.latest();
  // Segments whose owner unlinked them (it ended) or whose name is another
  // file now: only our mapping still holds their pages. Checked here, on a
  // new segment (a peer that replaced one that ended), not per post.
  std::vector<mapping> stale;
  for (auto i = next.begin(); i != next.end();) {
    struct stat now {};
    bool gone = ::stat(("/dev/shm" + i->first).c_str(), &now) != 0
                || static_cast<uint64_t>(now.st_dev) != i->second.device
                || static_cast<uint64_t>(now.st_ino) != i->second.inode;
    if (gone) {
      stale.push_back(i->second);
      i = next.erase(i);
    } else {
      ++i;
    }
  }
  next.emplace(name, mapping{static_cast<uint8_t*>(base), size,
                             static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)});
  // Returns once no copy can be using a mapping the new table lacks.
  mapped_.replace(std::move(next));
  for (auto& m : stale)
    ::munmap(m.base, m.size);
  return caf::none;
}

post_result shm_backend::post(const write_batch& batch) {
  if (!batch.strided.empty())
    return std::move(post_group({&batch}).front()); // where they are resolved
  if (!reachable(batch.peer, batch.src_device_id, batch.dst_device_id))
    return post_result::failed(check_peer(batch.peer, batch.src_device_id, batch.dst_device_id));
  return copy(batch);
}

bool shm_backend::completes_inline(const write_batch&) const {
  return true;
}

post_result shm_backend::post_read(const read_batch& batch) {
  if (!reachable(batch.peer, batch.remote_device_id, batch.local_device_id))
    return post_result::failed(
      check_peer(batch.peer, batch.remote_device_id, batch.local_device_id));
  return copy_in(batch);
}

bool shm_backend::reads_inline(const read_batch&) const {
  return true;
}

bool shm_backend::reachable(const endpoint_desc& peer, int32_t device_a,
                            int32_t device_b) const noexcept {
  // Compared without building a string or an error: posts are the hot path.
  return std::string_view{peer.transport} == std::string_view{"shm"} && peer.domain == domain_
         && device_a < 0 && device_b < 0;
}

caf::error shm_backend::check_peer(const endpoint_desc& peer, int32_t device_a,
                                   int32_t device_b) const {
  if (peer.transport != "shm")
    return make_error(errc::invalid_argument,
                      "shm backend cannot reach a '" + peer.transport + "' endpoint");
  if (peer.domain != domain_)
    return make_error(errc::unavailable,
                      "peer rank " + std::to_string(peer.owner) + " is on another host");
  if (device_a >= 0 || device_b >= 0)
    return make_error(errc::unsupported, "shm backend moves host memory only");
  return caf::none;
}

uint8_t* shm_backend::resolve(const mappings& maps, const endpoint_desc& peer, uint64_t addr,
                              uint64_t len, peer_hint& hint,
                              const std::string*& missing) const noexcept {
  hint.region = nullptr;
  for (auto& x : peer.shared)
    if (mem_desc{x.addr, x.size_bytes, -1}.covers(addr, len, -1)) {
      hint.region = &x;
      break;
    }
  if (!hint.region)
    return nullptr;
  auto m = maps.find(hint.region->segment);
  if (m == maps.end()) {
    missing = &hint.region->segment;
    return nullptr;
  }
  hint.map = m->second;
  return hinted(hint, addr, len);
}

caf::error shm_backend::unresolved(const endpoint_desc& peer, uint64_t addr, uint64_t len,
                                   const peer_hint& hint, const char* kind, size_t i,
                                   const char* side) {
  auto what = std::string{kind} + " " + std::to_string(i) + ": " + side;
  if (!hint.region)
    return make_error(errc::out_of_range,
                      what + " range " + region_table::range(addr, len) + " is outside rank "
                        + std::to_string(peer.owner) + "'s registered memory");
  return make_error(errc::out_of_range,
                    what + " runs past the end of shm segment " + hint.region->segment);
}

namespace {

/// Small batches (a room's pages one layer at a time) keep their resolved
/// addresses on the stack; larger ones take a vector.
class shm_targets {
public:
  explicit shm_targets(size_t n) {
    if (n > inline_ops) {
      heap_.resize(n);
      at_ = heap_.data();
    }
  }

  uint8_t*& operator[](size_t i) noexcept {
    return at_[i];
  }

private:
  static constexpr size_t inline_ops = 32;
  uint8_t* inline_[inline_ops];
  std::vector<uint8_t*> heap_;
  uint8_t** at_ = inline_;
};

} // namespace

template <class Op, class Own, class Theirs>
caf::error shm_backend::resolve_all(const region_table::view& regions, const mappings& maps,
                                    const std::vector<Op>& ops, const endpoint_desc& peer,
                                    const copy_names& names, Own own, Theirs theirs,
                                    uint8_t** at_peer, const std::string*& missing) const {
  peer_hint hint;
  size_t own_hint = 0;
  for (size_t i = 0; i < ops.size() && !missing; ++i) {
    auto len = ops[i].size_bytes;
    if (!regions.covers(own(ops[i]), len, own_hint))
      return make_error(names.own_code, std::string{names.kind} + " " + std::to_string(i) + ": "
                                          + names.own_side + " range "
                                          + region_table::range(own(ops[i]), len) + " is outside "
                                          + names.own_rank + "'s registered memory");
    at_peer[i] = hinted(hint, theirs(ops[i]), len);
    if (!at_peer[i])
      at_peer[i] = resolve(maps, peer, theirs(ops[i]), len, hint, missing);
    if (!at_peer[i] && !missing)
      return unresolved(peer, theirs(ops[i]), len, hint, names.kind, i, names.peer_side);
  }
  return caf::none;
}

template <class Op, class Own, class Theirs>
post_result shm_backend::checked_copy(const std::vector<Op>& ops, const endpoint_desc& peer,
                                      const copy_names& names, Own own, Theirs theirs) {
  // Resolve and check every op before the first byte moves; the view stays
  // open over the copies, so no range of ours is deregistered under them.
  // A segment not mapped yet is mapped outside the section (mapping
  // publishes a new table and waits out its readers), then the batch is
  // resolved again: at most once per segment of the peer.
  shm_targets at_peer{ops.size()};
  for (;;) {
    const std::string* missing = nullptr;
    {
      auto regions = regions_.read();
      if (auto err = resolve_all(regions, mapped_.read(), ops, peer, names, own, theirs,
                                 &at_peer[0], missing))
        return post_result::failed(std::move(err));
      if (!missing) {
        uint64_t bytes = 0;
        for (auto& op : ops)
          bytes += op.size_bytes;
        auto copier = bulk_copier::for_post(bytes, streaming_);
        for (size_t i = 0; i < ops.size(); ++i) {
          auto* mine = reinterpret_cast<uint8_t*>(own(ops[i]));
          if (names.into_peer)
            copier(at_peer[i], mine, ops[i].size_bytes);
          else
            copier(mine, at_peer[i], ops[i].size_bytes);
        }
        return post_result::done();
      }
    }
    if (auto err = map_segment(*missing))
      return post_result::failed(std::move(err));
  }
}

caf::error shm_backend::resolve_strided(const region_table::view& regions, const mappings& maps,
                                        const write_batch& batch, std::vector<strided_write>& out,
                                        const std::string*& missing) const {
  out.clear();
  peer_hint hint;
  size_t own_hint = 0;
  for (size_t i = 0; i < batch.strided.size(); ++i) {
    auto w = batch.strided[i];
    uint64_t src_span = 0, dst_span = 0;
    if (auto err = strided_spans(w, i, src_span, dst_span))
      return err;
    if (!regions.covers(w.src_addr, src_span, own_hint))
      return make_error(errc::not_registered, "strided write " + std::to_string(i)
                                                + ": source span "
                                                + region_table::range(w.src_addr, src_span)
                                                + " is outside the sender's registered memory");
    auto* at = hinted(hint, w.dst_addr, dst_span);
    if (!at)
      at = resolve(maps, batch.peer, w.dst_addr, dst_span, hint, missing);
    if (!at)
      return missing ? caf::none
                     : unresolved(batch.peer, w.dst_addr, dst_span, hint, "strided write", i,
                                  "destination");
    w.dst_addr = reinterpret_cast<uint64_t>(at);
    out.push_back(w);
  }
  return caf::none;
}

std::vector<post_result> shm_backend::post_group(const std::vector<const write_batch*>& batches) {
  static const copy_names names{"write", "source", "the sender", "destination",
                                errc::not_registered, true};
  auto src = [](const write_op& op) { return op.src_addr; };
  auto dst = [](const write_op& op) { return op.dst_addr; };
  // As `checked_copy`, for every batch at once: each checked on its own
  // (a refusal is that batch's alone), the ones that pass copied op by op
  // in turn under one view.
  std::vector<post_result> out(batches.size(), post_result::done());
  std::vector<std::vector<uint8_t*>> at_peer(batches.size());
  // Strided writes with their destinations where they are mapped here.
  std::vector<std::vector<strided_write>> rows_at_peer(batches.size());
  for (size_t b = 0; b < batches.size(); ++b) {
    auto& batch = *batches[b];
    if (!reachable(batch.peer, batch.src_device_id, batch.dst_device_id))
      out[b] = post_result::failed(
        check_peer(batch.peer, batch.src_device_id, batch.dst_device_id));
    else
      at_peer[b].resize(batch.ops.size());
  }
  for (;;) {
    const std::string* missing = nullptr;
    size_t missing_for = 0;
    {
      auto regions = regions_.read();
      auto& maps = mapped_.read();
      std::vector<size_t> passed;
      uint64_t bytes = 0;
      for (size_t b = 0; b < batches.size() && !missing; ++b) {
        if (out[b].status != xfer_status::done)
          continue;
        auto& batch = *batches[b];
        auto err = resolve_all(regions, maps, batch.ops, batch.peer, names, src, dst,
                               at_peer[b].data(), missing);
        if (!err && !missing && !batch.strided.empty())
          err = resolve_strided(regions, maps, batch, rows_at_peer[b], missing);
        if (err)
          out[b] = post_result::failed(std::move(err));
        else if (missing)
          missing_for = b;
        else {
          passed.push_back(b);
          bytes += batch.total_bytes();
        }
      }
      if (!missing) {
        std::vector<size_t> sizes;
        for (auto b : passed)
          sizes.push_back(batches[b]->ops.size());
        auto copier = bulk_copier::for_post(bytes, streaming_);
        std::vector<const std::vector<strided_write>*> lists;
        for (auto b : passed)
          if (!rows_at_peer[b].empty())
            lists.push_back(&rows_at_peer[b]);
        interleave_rows(lists, [&](uint64_t from, uint64_t to, uint64_t len) {
          copier(reinterpret_cast<uint8_t*>(to), reinterpret_cast<const uint8_t*>(from), len);
        });
        interleave(sizes, [&](size_t p, size_t i) {
          auto& op = batches[passed[p]]->ops[i];
          copier(at_peer[passed[p]][i], reinterpret_cast<const uint8_t*>(op.src_addr),
                 op.size_bytes);
        });
        return out;
      }
    }
    // Outside the section; a segment that cannot be mapped fails the batch
    // that needed it, and the others are resolved again.
    if (auto err = map_segment(*missing))
      out[missing_for] = post_result::failed(std::move(err));
  }
}

post_result shm_backend::copy(const write_batch& batch) {
  static const copy_names names{"write", "source", "the sender", "destination",
                                errc::not_registered, true};
  return checked_copy(
    batch.ops, batch.peer, names, [](const write_op& op) { return op.src_addr; },
    [](const write_op& op) { return op.dst_addr; });
}

post_result shm_backend::copy_in(const read_batch& batch) {
  static const copy_names names{"read", "destination", "the reader", "source",
                                errc::out_of_range, false};
  return checked_copy(
    batch.ops, batch.peer, names, [](const read_op& op) { return op.local_addr; },
    [](const read_op& op) { return op.remote_addr; });
}

} // namespace kvroom::detail
