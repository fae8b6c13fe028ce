#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kvroom::detail {

/// Whether readers run with a compiler barrier only (membarrier works): set
/// once, before the first slot is attached.
struct grace_period_mode {
  static bool light;
};

/// Lets the threads that copy into registered memory read the tables of
/// that memory with no lock and no atomic read-modify-write, while the rare
/// thread that deregisters waits until no copy that could have seen the old
/// table still runs (read-copy-update's grace period).
///
/// Why not a lock: a 4 KiB post on local or shm copies in ~35 ns, and a
/// shared_mutex's lock and unlock cost 13 ns of it (23 % of a post's
/// samples under `perf`). Why not liburcu: without `_LGPL_SOURCE` its read
/// lock is a library call and measured 8-11 ns; inlined it is 1.4 ns, which
/// is what this does, with a smaller rule (below).
///
/// How: each thread has a slot with a counter, odd while it reads. A reader
/// bumps it with a plain store and a compiler barrier only; `synchronize()`
/// makes every running thread of the process pass a full barrier (Linux's
/// membarrier, private expedited) and then waits for each slot that was odd
/// to change. A reader that went odd before that barrier is waited for; one
/// that goes odd after it loads the table after the writer published the new
/// one. Where membarrier is missing (old kernels, some sandboxes) readers
/// fence themselves, and the same wait holds.
class grace_period {
public:
  /// One thread's part in the protocol, on its own cache line.
  struct alignas(64) slot {
    /// Odd while the thread is inside a section.
    std::atomic<uint64_t> seq{0};
    /// Nesting, touched by the owning thread only.
    uint32_t depth = 0;
  };

  /// Marks the calling thread as reading until it leaves (nests).
  class reader {
  public:
    reader() noexcept {
      slot_ = current_slot_;
      if (!slot_)
        slot_ = attach();
      if (slot_->depth++ == 0) {
        slot_->seq.store(slot_->seq.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
        if (grace_period_mode::light)
          std::atomic_signal_fence(std::memory_order_seq_cst);
        else
          std::atomic_thread_fence(std::memory_order_seq_cst);
      }
    }

    ~reader() {
      // Release: what the section read and copied is done before the slot
      // says so, for the writer that frees or unmaps next.
      if (--slot_->depth == 0)
        slot_->seq.store(slot_->seq.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);
    }

    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;

  private:
    slot* slot_;
  };

  /// Returns once every reader section that began before the call has
  /// ended. Call after publishing a new table and before freeing the old one
  /// (or the memory it named). Never from inside a reader section: it would
  /// wait for itself (asserted).
  static void synchronize();

  /// Slots held by live threads (the rest wait for reuse).
  static size_t slots_in_use();

  /// Whether readers run with a compiler barrier only (membarrier works).
  static bool light() noexcept {
    return grace_period_mode::light;
  }

private:
  friend struct grace_period_slot_owner;

  /// The calling thread's slot, registered on its first section and
  /// removed when it exits.
  static slot* attach();

  /// Picks the mode once and installs the fork handlers.
  static void probe();
  static void fork_prepare();
  static void fork_parent();
  /// In a forked child: frees the slots of the threads it does not have.
  static void fork_child();

  /// Inline, so every reader sees its constant initialisation: declared
  /// `extern`, each access called a TLS init function first.
  inline static thread_local slot* current_slot_ = nullptr;
};

/// A value of type `T` published for readers under `grace_period`: a writer
/// (serialised by the owner) replaces it whole; readers see the old or the
/// new one, never a half-written one, and the old one is freed only after
/// every reader that could hold it is done.
template <class T>
class published {
public:
  published() : current_(new T{}) {
    // nop
  }

  ~published() {
    delete current_.load(std::memory_order_relaxed);
  }

  published(const published&) = delete;
  published& operator=(const published&) = delete;

  /// The current value; only inside a `grace_period::reader` section, and
  /// valid until it ends.
  const T& read() const noexcept {
    return *current_.load(std::memory_order_acquire);
  }

  /// The current value for the (serialised) writer to copy and change.
  const T& latest() const noexcept {
    return *current_.load(std::memory_order_relaxed);
  }

  /// Publishes `next`, waits out the readers of the old value and frees it.
  void replace(T next) {
    auto* old = current_.exchange(new T(std::move(next)), std::memory_order_acq_rel);
    grace_period::synchronize();
    delete old;
  }

private:
  std::atomic<T*> current_;
};

} // namespace kvroom::detail
