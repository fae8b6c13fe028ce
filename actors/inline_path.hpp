#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "caf/error.hpp"

#include "kvroom/api/errors.hpp"
#include "kvroom/api/backend.hpp"

namespace kvroom {

/// A rank's shortcut for small batches: a prefill room posts them itself,
/// on its own scheduler thread, instead of a round trip through the
/// transfer worker's thread (two messages and a cross-thread wake-up per
/// room). Only batches whose post completes inside the call and may run on
/// any thread (`backend::completes_inline`: memcpy backends) go this way;
/// anything else, and anything larger than the limit, takes the worker.
///
/// The rank closes it before its memory goes away: `close` waits for copies
/// in progress and refuses new ones, so no room reads or writes memory of a
/// rank that is gone. Rooms hold it weakly through the backend, so it never
/// keeps a backend (and its registrations) alive.
class inline_path {
public:
  inline_path(std::weak_ptr<backend> data_plane, uint64_t max_bytes)
    : data_plane_(std::move(data_plane)), max_bytes_(max_bytes) {
  }

  /// The outcome of a post done now (no error: every byte landed), or
  /// nullopt: post through the worker.
  std::optional<caf::error> try_post(const write_batch& batch) {
    if (max_bytes_ == 0 || larger_than(batch, max_bytes_))
      return std::nullopt;
    busy_.fetch_add(1);
    std::optional<caf::error> result;
    if (open_.load())
      if (auto be = data_plane_.lock(); be && be->completes_inline(batch)) {
        auto res = be->post(batch);
        result = res.status == xfer_status::done ? caf::error{} : std::move(res.error);
        if (!*result && res.status != xfer_status::done)
          result = make_error(errc::transport_error, "a post that completes inline returned "
                                                       + to_string(res.status));
      }
    busy_.fetch_sub(1);
    return result;
  }

  /// No copy starts after this returns, and none is still running.
  void close() {
    open_.store(false);
    while (busy_.load() != 0)
      std::this_thread::yield();
  }

private:
  /// Whether `batch` moves more than `limit` bytes, counting no further: a
  /// head-sliced batch is 16,384 writes, and summing them all only to learn
  /// that it is not small showed in profiles.
  static bool larger_than(const write_batch& batch, uint64_t limit) noexcept {
    uint64_t sum = 0;
    for (auto& op : batch.ops)
      if ((sum += op.size_bytes) > limit)
        return true;
    for (auto& w : batch.strided)
      if ((sum += w.total_bytes()) > limit)
        return true;
    return false;
  }

  std::weak_ptr<backend> data_plane_;
  uint64_t max_bytes_;
  // Sequentially consistent on purpose: `try_post` raises busy then reads
  // open, `close` clears open then reads busy; one of them sees the other.
  std::atomic<bool> open_{true};
  std::atomic<int> busy_{0};
};

} // namespace kvroom
