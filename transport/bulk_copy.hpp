#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "caf/error.hpp"

#include "kvroom/api/descriptors.hpp"

namespace kvroom::detail {

/// How the memcpy backends (local, shm) copy a batch: with the cache, as
/// memcpy does, or around it.
///
/// Why around it: the bytes a prefill rank copies land in another rank's
/// pages, which this CPU does not read again, and a room's KV (tens of MiB)
/// is larger than the cache it would pass through. A plain store first
/// reads the destination's line into the cache (read for ownership), so a
/// copy costs three trips to memory for every two it needs, and it evicts
/// what the rank itself uses. A non-temporal store writes the line whole,
/// straight to memory. Measured on this project's 2-core machines (AMD
/// EPYC, 1 MiB L2; a stand-alone loop copying one buffer again and again,
/// best of 5): streaming copies of 16 MiB and 64 MiB ran at 116 % and 130 %
/// of memcpy; of 1 MiB and 4 MiB, which the cache holds, at 82 % and 78 %;
/// of 4 KiB, at 15 %. glibc would
/// make the same choice itself above its `x86_non_temporal_threshold`, but
/// derives it from the L3 the CPU reports, which a VM reports for the whole
/// socket (508 MiB here: a threshold of 127 MiB that no batch reaches).
///
/// So a post streams when the bytes it moves in all reach a threshold
/// (`backend_config::streaming_copy_bytes`), and a batch under it copies
/// with memcpy, as before.
class bulk_copier {
public:
  explicit bulk_copier(bool streaming) noexcept : streaming_(streaming) {
  }

  /// A copier for a post moving `bytes` in all, streaming from `threshold`
  /// bytes on (0: never; `backend_config::streaming_copy_bytes`).
  static bulk_copier for_post(uint64_t bytes, uint64_t threshold) noexcept {
    return bulk_copier{threshold > 0 && bytes >= threshold};
  }

  bulk_copier(const bulk_copier&) = delete;
  bulk_copier& operator=(const bulk_copier&) = delete;

  /// Streaming stores are weakly ordered: they are fenced before whoever
  /// copied reports the batch done (a message another thread or process
  /// acts on), which happens after this object is gone.
  ~bulk_copier() {
    if (streamed_)
      fence();
  }

  void operator()(void* dst, const void* src, size_t n) noexcept {
    if (streaming_ && n >= min_streamed && n < max_streamed) {
      stream(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
      streamed_ = true;
    } else {
      std::memcpy(dst, src, n);
    }
  }

  /// Below this, one op is copied with memcpy even in a streaming batch:
  /// aligning its destination and its 64-byte blocks would cost more than
  /// the few lines it writes.
  static constexpr size_t min_streamed = 256;
  /// From this on, too: glibc copies such an op with `rep movsb`, which
  /// this CPU already runs without reading the destination first. Measured
  /// (rooms of 32 MiB in runs of 512 KiB, 1P x 1D, 5 alternations): 12.7-14.6
  /// GB/s streamed against 12.9-16.7 with memcpy; the ops that gain are the
  /// small ones of head slicing (512 B and 8 KiB slices: NHD 54-67 % of
  /// whole pages with memcpy, 84-94 % streamed, in a stand-alone loop).
  static constexpr size_t max_streamed = 64 * 1024;

private:
  static void stream(uint8_t* dst, const uint8_t* src, size_t n) noexcept;
  static void fence() noexcept;

  bool streaming_;
  bool streamed_ = false;
};

/// Calls `copy(list, i)` for op `i` of each of the lists whose sizes
/// `sizes` holds, round robin: op 0 of every list, then op 1, and so on.
/// Batches of one chunk for several decode ranks under head slicing take
/// the slices of the same source tokens at the same index, so the source
/// is read once, in order, instead of once per decode rank with holes (see
/// `backend::post_group`).
template <class Copy>
void interleave(const std::vector<size_t>& sizes, Copy copy) {
  size_t longest = 0;
  for (auto n : sizes)
    longest = n > longest ? n : longest;
  auto lists = sizes.size();
  for (size_t i = 0; i < longest; ++i)
    for (size_t l = 0; l < lists; ++l)
      if (i < sizes[l])
        copy(l, i);
}

/// Both spans of strided write `i` of a batch (`strided_write::span`), or
/// the error that refuses the batch: a strided write that moves nothing or
/// whose span overflows.
caf::error strided_spans(const strided_write& w, size_t i, uint64_t& src_span,
                         uint64_t& dst_span);

/// The writes of a list of strided writes, one after another (each
/// strided write's rows in order).
class strided_rows {
public:
  explicit strided_rows(const std::vector<strided_write>& ws) noexcept
    : at_(ws.data()), end_(ws.data() + ws.size()) {
  }

  /// The next write, false after the last.
  bool next(uint64_t& src, uint64_t& dst, uint64_t& len) noexcept {
    while (at_ != end_ && k_ == at_->count) {
      ++at_;
      k_ = 0;
    }
    if (at_ == end_)
      return false;
    src = at_->src_addr + k_ * at_->src_stride;
    dst = at_->dst_addr + k_ * at_->dst_stride;
    len = at_->size_bytes;
    ++k_;
    return true;
  }

private:
  const strided_write* at_;
  const strided_write* end_;
  uint64_t k_ = 0;
};

/// Calls `copy(src, dst, len)` for every write of the strided lists, one
/// write of each list in turn (as `interleave` does for plain writes): the
/// decode ranks sharing a token-major page take their heads of each token
/// row in turn, so the source is read once, in order.
template <class Copy>
void interleave_rows(const std::vector<const std::vector<strided_write>*>& lists, Copy copy) {
  std::vector<strided_rows> rows;
  rows.reserve(lists.size());
  for (auto* l : lists)
    rows.emplace_back(*l);
  uint64_t src = 0, dst = 0, len = 0;
  for (bool any = true; any;) {
    any = false;
    for (auto& r : rows)
      if (r.next(src, dst, len)) {
        copy(src, dst, len);
        any = true;
      }
  }
}

} // namespace kvroom::detail
