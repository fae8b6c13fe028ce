// The read side of every host backend's tables: no lock on a post, and a
// writer that frees (or deregisters) only once no reader can still use what
// it replaced. The invariant is checked on every iteration of a fixed count,
// never by timing: a reader that sees a region its writer already reported
// removed is a broken grace period, however fast or slow the machine.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "kvroom/transport/grace_period.hpp"
#include "kvroom/transport/region_table.hpp"

using kvroom::detail::grace_period;
using kvroom::detail::published;
using kvroom::detail::region_table;

TEST_CASE("grace period: with no reader, synchronize returns; sections nest") {
  grace_period::synchronize();
  {
    grace_period::reader outer;
    grace_period::reader inner;
  }
  grace_period::synchronize(); // both closed: nothing to wait for
  SUCCEED("synchronize returned with the calling thread's nested sections closed");
}

// Each round: a reader opens a view, sees the region and says so, then
// stays inside until it sees the writer report the region removed or a
// bound of polls passes (yielding, so a writer on the same core runs). The
// writer removes as soon as the reader is inside, and reports it once
// `remove` returned. A correct remove waits for
// the reader to leave (the bound) first, so the reader never sees the
// report while inside; a remove that did not wait is caught in every round
// it overlaps, whatever the machine's speed.
TEST_CASE("grace period: a removed region is never seen after remove returns") {
  constexpr int rounds = 100;
  constexpr int linger_polls = 2000;
  constexpr uint64_t base = 0x100000, size = 0x1000;
  region_table t;
  // The round whose remove returned last (rounds only grow: the reader of
  // round r never misses round r's report).
  std::atomic<int> round{-1}, inside{-1}, removed{-1};
  std::atomic<int> violations{0}, rounds_seen{0};
  std::thread reader{[&] {
    for (int r = 0; r < rounds; ++r) {
      while (round.load(std::memory_order_acquire) < r)
        std::this_thread::yield();
      auto v = t.read();
      if (!v.covers(base, size))
        continue;
      rounds_seen.fetch_add(1);
      inside.store(r, std::memory_order_release);
      for (int i = 0; i < linger_polls; ++i)
        if (removed.load(std::memory_order_acquire) >= r) {
          violations.fetch_add(1);
          break;
        } else {
          std::this_thread::yield(); // the writer may share this core
        }
    }
  }};
  for (int r = 0; r < rounds; ++r) {
    auto id = t.add({base, size, -1});
    REQUIRE(id);
    round.store(r, std::memory_order_release);
    while (inside.load(std::memory_order_acquire) < r)
      std::this_thread::yield();
    REQUIRE_FALSE(t.remove(*id));
    removed.store(r, std::memory_order_release);
  }
  reader.join();
  CHECK(rounds_seen.load() == rounds);
  CHECK(violations.load() == 0);
}

// The same handshake for `published`: a value's number is poisoned when it
// is freed (and a freed block is soon reused for the next value), so a
// reader sees its value's number change only if it was freed while read.
TEST_CASE("grace period: a replaced value is freed only after its readers are done") {
  constexpr int rounds = 100;
  constexpr int linger_polls = 2000;
  struct value {
    std::atomic<uint64_t> n{0};
    value() = default;
    value(const value& other) : n(other.n.load()) {
      // nop
    }
    ~value() {
      n.store(~uint64_t{0}, std::memory_order_relaxed);
    }
  };
  published<value> cell;
  std::atomic<int> round{-1}, inside{-1};
  std::atomic<int> changed{0};
  std::thread reader{[&] {
    for (int r = 0; r < rounds; ++r) {
      while (round.load(std::memory_order_acquire) < r)
        std::this_thread::yield();
      grace_period::reader section;
      auto& v = cell.read();
      auto first = v.n.load(std::memory_order_relaxed);
      inside.store(r, std::memory_order_release);
      for (int i = 0; i < linger_polls; ++i)
        if (v.n.load(std::memory_order_relaxed) != first) {
          changed.fetch_add(1);
          break;
        } else {
          std::this_thread::yield(); // the writer may share this core
        }
    }
  }};
  for (int r = 0; r < rounds; ++r) {
    round.store(r, std::memory_order_release);
    while (inside.load(std::memory_order_acquire) < r)
      std::this_thread::yield();
    value next{cell.latest()};
    next.n.store(static_cast<uint64_t>(r) + 1);
    cell.replace(std::move(next));
  }
  reader.join();
  CHECK(changed.load() == 0);
  CHECK(cell.latest().n == rounds);
}

TEST_CASE("grace period: threads that exit hand their slot back") {
  // A thread per round, one after another: the slots in use stay at the
  // threads alive at once, not the threads ever run.
  auto before = grace_period::slots_in_use();
  for (int i = 0; i < 200; ++i)
    std::thread{[] { grace_period::reader section; }}.join();
  CHECK(grace_period::slots_in_use() <= before + 1);
  grace_period::synchronize(); // no exited thread is waited for
}

TEST_CASE("grace period: a forked child does not wait for the parent's readers") {
  // A thread is inside a section when the process forks; the child has no
  // such thread, so its grace periods must not wait for it. The child
  // bounds itself with an alarm: a hang fails the test, it never stalls it.
  std::atomic<bool> inside{false}, release{false};
  std::thread reader{[&] {
    grace_period::reader section;
    inside.store(true);
    while (!release.load())
      std::this_thread::yield();
  }};
  while (!inside.load())
    std::this_thread::yield();
  auto pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(10);
    grace_period::synchronize();
    { grace_period::reader section; } // and readers still work
    grace_period::synchronize();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  release.store(true);
  reader.join();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
