#pragma once

#include <chrono>
#include <vector>

#include "kvroom/kit/testkit.hpp"

namespace kvroom::bench {

using clock_type = std::chrono::steady_clock;

/// Seconds since `t0`.
double since(clock_type::time_point t0);

/// Llama-3-8B-like: 32 layers x K/V, pages of 16 tokens x 8 KV heads / tp x
/// 128 dims x bf16; `slots` rooms of `pages_per_room` pages.
kv_shape realistic_shape(int tp, int64_t slots, int64_t pages_per_room);

/// `layers` x K/V buffers of 256-byte pages, one page per room, 64 B aux.
kv_shape tiny_shape(int64_t slots, int64_t layers = 1);

/// How many repetitions of `bytes` to move between two reads of the clock:
/// enough for about 1 MiB. Measured on these VMs: a clock read costs 30-40
/// ns, more than a cache-warm 4 KiB memcpy (about 14 ns), so a loop that
/// read it every 4 KiB measured mostly the clock, on both sides of a ratio.
uint64_t clock_stride(uint64_t bytes);

/// Mean seconds of one single-thread memcpy of `ops`' bytes, repeated for
/// `seconds` (the same method the transports are measured with).
double memcpy_seconds(const std::vector<write_op>& ops, double seconds);

} // namespace kvroom::bench
