#pragma once

#include <cstdint>
#include <vector>

#include "kvroom/api/descriptors.hpp"

namespace kvroom {

/// Bytes that land in each KV buffer: parallel lists, a buffer once.
struct buffer_bytes {
  std::vector<int32_t> buffers;
  std::vector<uint64_t> bytes;

  bool empty() const noexcept {
    return buffers.empty();
  }
};

/// The bytes `ops` put into each of `kv` (a rank's KV buffers), by
/// destination address: an op that spans two adjacent buffers counts in
/// each; bytes outside every KV buffer (aux, state) count nowhere.
buffer_bytes bytes_per_buffer(const std::vector<paged_buffer>& kv,
                              const std::vector<write_op>& ops);

/// Decode, layer by layer: which KV buffers of a room hold every byte the
/// room's pages will receive, from the bytes each landed chunk put in each
/// buffer (a scheduler starts a layer once its K and V landed: vLLM's
/// `wait_for_layer_load`). Each buffer is reported once, when its count
/// reaches what it expects. Plain logic: no actor, no memory touched.
class landing_ledger {
public:
  landing_ledger() = default;

  /// `expected[b]`: the bytes buffer `b` receives in this room.
  explicit landing_ledger(std::vector<uint64_t> expected);

  /// False for a ledger that counts nothing (a room whose buffers land only
  /// with the room: mapped, or checked for integrity).
  bool active() const noexcept {
    return !expected_.empty();
  }

  /// Counts what landed; appends the buffers that landed by it to `newly`.
  /// A buffer index out of range is ignored (the source's plan and this
  /// rank's layout disagree: the room's own checks fail it).
  void add(const buffer_bytes& landed, std::vector<int32_t>& newly);

  /// Every buffer landed (its one source's writes are over); appends those
  /// not reported yet.
  void all(std::vector<int32_t>& newly);

  bool landed(int32_t buffer) const noexcept;

private:
  void mark(size_t b, std::vector<int32_t>& newly);

  std::vector<uint64_t> expected_;
  std::vector<uint64_t> got_;
  std::vector<bool> done_;
};

} // namespace kvroom
