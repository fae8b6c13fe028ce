#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "caf/meta/type_name.hpp"

#include "kvroom/api/ids.hpp"

namespace kvroom {

/// Where a range of memory lives: host RAM or one GPU.
enum class mem_kind : uint8_t {
  host = 0,
  device = 1,
};

std::string to_string(mem_kind x);

/// One contiguous range of memory, NIXL-style `{addr, size_bytes, device_id}`.
/// `device_id` is -1 for host memory; `from_pointer` (in a rank's
/// configuration only) asks kvroom to tell host from device memory by the
/// pointer itself when the rank starts (CUDA's pointer attributes where CUDA
/// is compiled in, host otherwise). A GPU id says where the scheduler runs,
/// not where each buffer lives: SGLang's aux buffers are host memory beside
/// GPU KV pools.
struct mem_desc {
  static constexpr int32_t from_pointer = -2;

  uint64_t addr = 0;
  uint64_t size_bytes = 0;
  int32_t device_id = -1;

  mem_kind kind() const noexcept {
    return device_id < 0 ? mem_kind::host : mem_kind::device;
  }

  /// True when `[addr, addr + len)` lies wholly inside this range (and on
  /// the same device). Overflow-safe: a wrapping range is never covered.
  /// Inline: every op of every post asks it (a call was 1-2 % of a 4 KiB
  /// post's samples).
  bool covers(uint64_t other_addr, uint64_t len, int32_t other_device_id) const noexcept {
    if (other_device_id != device_id)
      return false;
    // Written so that no sum can wrap: a huge `len` is simply not covered.
    return other_addr >= addr && len <= size_bytes && other_addr - addr <= size_bytes - len;
  }

  /// True when the two ranges share at least one byte on the same device.
  bool overlaps(const mem_desc& other) const noexcept;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, mem_desc& x) {
  return f(caf::meta::type_name("kvroom.mem_desc"), x.addr, x.size_bytes,
           x.device_id);
}

/// One registered buffer cut into equal pages: a layer's K or V buffer, or an
/// aux buffer whose "pages" are per-request slots.
struct paged_buffer {
  mem_desc mem;
  uint64_t page_size_bytes = 0;

  uint64_t num_pages() const noexcept {
    return page_size_bytes == 0 ? 0 : mem.size_bytes / page_size_bytes;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, paged_buffer& x) {
  return f(caf::meta::type_name("kvroom.paged_buffer"), x.mem,
           x.page_size_bytes);
}

/// A rank's registered KV, aux and state memory, as it tells its
/// counterpart. `kv` holds one entry per buffer (SGLang's `kv_data_ptrs`: K
/// and V of every layer); `aux` one per aux buffer (`aux_data_ptrs`);
/// `state` one per state buffer of a hybrid model (`state_data_ptrs`: Mamba
/// conv and SSM state, whose "pages" are per-request slots, or the pages of
/// sliding-window layers): a room's `state_indices` name the same pages in
/// every state buffer.
struct memory_layout {
  std::vector<paged_buffer> kv;
  std::vector<paged_buffer> aux;
  std::vector<paged_buffer> state;
};

/// The GPU holding a layout's KV buffers, or -1 for host memory (a rank's
/// KV cache lives on one device).
int32_t kv_device_id(const memory_layout& x) noexcept;

/// The device holding its aux buffers (-1: host), the KV's where it has
/// none. SGLang on GPUs keeps KV on the GPU and its metadata (aux) on the
/// host: the aux writes then move in a batch of their own.
int32_t aux_device_id(const memory_layout& x) noexcept;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, memory_layout& x) {
  return f(caf::meta::type_name("kvroom.memory_layout"), x.kv, x.aux, x.state);
}

/// A registered range that lives in a named shared-memory segment: where it
/// is in its owner's address space and where in the segment.
struct shm_region {
  uint64_t addr = 0;
  uint64_t size_bytes = 0;
  std::string segment;  ///< POSIX shm name, e.g. "/kvroom-1234-0"
  uint64_t offset = 0;  ///< byte offset of `addr` inside the segment
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shm_region& x) {
  return f(caf::meta::type_name("kvroom.shm_region"), x.addr, x.size_bytes,
           x.segment, x.offset);
}

/// A registered GPU range as a peer on the same host reaches it: its address
/// in the owner's process and the CUDA IPC handle of the allocation it lies
/// in, `offset` bytes from that allocation's base.
struct device_region {
  uint64_t addr = 0;
  uint64_t size_bytes = 0;
  int32_t device_id = 0;
  std::string ipc_handle;  ///< cudaIpcMemHandle_t bytes; empty: same process only
  uint64_t offset = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_region& x) {
  return f(caf::meta::type_name("kvroom.device_region"), x.addr, x.size_bytes,
           x.device_id, x.ipc_handle, x.offset);
}

/// How a peer reaches a rank's data plane: which backend, where, and the
/// rank that owns the memory behind it.
struct endpoint_desc {
  std::string transport;  ///< backend name: "local", "shm", "tcp", ...
  std::string address;    ///< backend-specific: host:port, process token
  uint64_t domain = 0;    ///< scope where it works: the process, the host
  rank_id owner = -1;     ///< the rank whose registered memory it exposes
  std::vector<shm_region> shared = {};     ///< shm only: the exposed segments
  std::vector<device_region> device = {};  ///< cuda only: the exposed GPU ranges
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, endpoint_desc& x) {
  return f(caf::meta::type_name("kvroom.endpoint_desc"), x.transport,
           x.address, x.domain, x.owner, x.shared, x.device);
}

/// Connection set-up between two ranks' backends of one transport (verbs
/// queue-pair data), carried between ranks as an actor message: the data
/// plane has no side channel of its own. `payload` is the backend's own
/// encoding, versioned and validated by it.
struct transport_control {
  std::string transport;
  rank_id from = -1;
  rank_id to = -1;
  std::string payload;
  /// With several endpoints of one transport per rank (verbs: one per
  /// active port): the receiver's endpoint the message is for, and the
  /// sender's it comes from (empty: the rank's only one).
  std::string to_address = {};
  std::string from_address = {};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transport_control& x) {
  return f(caf::meta::type_name("kvroom.transport_control"), x.transport,
           x.from, x.to, x.payload, x.to_address, x.from_address);
}

/// One contiguous copy from local memory into a peer's registered memory.
struct write_op {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t size_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, write_op& x) {
  return f(caf::meta::type_name("kvroom.write_op"), x.src_addr, x.dst_addr,
           x.size_bytes);
}

/// `count` writes of `size_bytes` each at fixed strides: write k copies
/// [src_addr + k * src_stride, +size_bytes) to [dst_addr + k * dst_stride,
/// +size_bytes). Head slicing of token-major (NHD) pages moves each token's
/// row of heads on its own: 16,384 writes of 512 B a decode rank for a
/// realistic room's chunk, which as plain writes cost more to plan, carry
/// and check than to copy. One of these stands for a buffer's pages' rows.
struct strided_write {
  uint64_t src_addr = 0;
  uint64_t dst_addr = 0;
  uint64_t size_bytes = 0;
  uint64_t count = 0;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;

  /// Bytes it moves (overflow is refused where it is checked: a span).
  uint64_t total_bytes() const noexcept {
    return size_bytes * count;
  }

  /// From its first write's start to its last one's end, on the source
  /// (`src`) or destination side; false when that overflows, or when
  /// `count` or `size_bytes` is 0 (a strided write moves something).
  bool span(bool src, uint64_t& out) const noexcept;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, strided_write& x) {
  return f(caf::meta::type_name("kvroom.strided_write"), x.src_addr, x.dst_addr, x.size_bytes,
           x.count, x.src_stride, x.dst_stride);
}

/// What a data-plane backend posts at once: every write of one chunk of one
/// room to one peer. `room` names it for diagnostics, grants and fault plans.
struct write_batch {
  room_id room = 0;
  endpoint_desc peer;
  /// Other paths to the same peer, after `peer` in the sender's preference
  /// (the nearest transport first): the rank's path layer spreads the batch
  /// over them and moves it to another when one fails. Empty: one path.
  std::vector<endpoint_desc> alternates = {};
  /// Names this batch (or slice of one) among its sender's for the
  /// receiver, which applies a keyed batch of a room at most once however
  /// many paths carried it; 0: unkeyed.
  uint64_t key = 0;
  std::vector<write_op> ops;
  /// Device of the source memory (-1: host); one kind per batch.
  int32_t src_device_id = -1;
  /// Device of the destination memory (-1: host).
  int32_t dst_device_id = -1;
  /// How many of the last `ops` carry aux data rather than KV pages.
  uint32_t aux_ops = 0;
  /// KV writes in runs at fixed strides, beside `ops` (aux and state stay
  /// in `ops`). A rank plans them only for a data plane whose caps say
  /// `strided_writes`; a backend that does not move them itself posts
  /// `expand_strided(batch)`.
  std::vector<strided_write> strided = {};

  uint64_t total_bytes() const noexcept;

  /// Descriptors it carries: its writes and its strided writes.
  size_t descriptors() const noexcept {
    return ops.size() + strided.size();
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, write_batch& x) {
  return f(caf::meta::type_name("kvroom.write_batch"), x.room, x.peer, x.alternates, x.key,
           x.ops, x.src_device_id, x.dst_device_id, x.aux_ops, x.strided);
}

/// `batch` with each strided write as its plain writes, before its own
/// (so its last `aux_ops` writes stay last) and nothing strided left.
write_batch expand_strided(const write_batch& batch);

/// One read of a pull: `size_bytes` of the peer's registered memory at
/// `remote_addr` into this rank's registered memory at `local_addr`.
struct read_op {
  uint64_t remote_addr = 0;
  uint64_t local_addr = 0;
  uint64_t size_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_op& x) {
  return f(caf::meta::type_name("kvroom.read_op"), x.remote_addr, x.local_addr, x.size_bytes);
}

/// What a data-plane backend reads at once (a pull: the decode rank reads
/// what its prefill granted it): every read of one chunk of one room from
/// one peer. `room` names it: a peer that serves reads itself admits
/// them only inside what it granted this rank for that room.
struct read_batch {
  room_id room = 0;
  endpoint_desc peer;
  std::vector<read_op> ops;
  /// Device of the peer's memory (-1: host); one kind per batch.
  int32_t remote_device_id = -1;
  /// Device of this rank's memory (-1: host).
  int32_t local_device_id = -1;

  uint64_t total_bytes() const noexcept;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, read_batch& x) {
  return f(caf::meta::type_name("kvroom.read_batch"), x.room, x.peer, x.ops, x.remote_device_id,
           x.local_device_id);
}

/// A byte range of registered memory: [addr, addr + size).
struct byte_range {
  uint64_t addr = 0;
  uint64_t size = 0;
};

} // namespace kvroom
