#pragma once

#include <cstddef>
#include <cstdint>

namespace kvroom::detail {

/// Milliseconds on the steady clock.
uint64_t steady_ms();

/// Receives exactly `len` bytes, or sends them (`sending`), by `deadline_ms`
/// (steady_ms): a peer that trickles bytes does not restart the clock.
/// False on an error, a closed peer or the deadline. Works on blocking and
/// non-blocking sockets alike.
bool exchange_by(int fd, void* buf, size_t len, uint64_t deadline_ms, bool sending);

inline bool recv_by(int fd, void* buf, size_t len, uint64_t deadline_ms) {
  return exchange_by(fd, buf, len, deadline_ms, false);
}

} // namespace kvroom::detail
