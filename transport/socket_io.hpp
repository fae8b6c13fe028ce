#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

/// Receives exactly `len` bytes, or sends them (`sending`), by `deadline_ms`
/// (monotonic_ms): a peer that trickles bytes does not restart the clock.
/// False on an error, a closed peer or the deadline. Works on blocking and
/// non-blocking sockets alike.
bool exchange_by(int fd, void* buf, size_t len, uint64_t deadline_ms, bool sending);

inline bool recv_by(int fd, void* buf, size_t len, uint64_t deadline_ms) {
  return exchange_by(fd, buf, len, deadline_ms, false);
}

/// A blocking TCP socket connected to `host:port` by `deadline_ms`
/// (monotonic_ms), or -1 with the reason in `why`. Each address `host` resolves
/// to is tried in turn within the one deadline. A plain blocking connect to
/// a host that drops SYNs (powered off, firewalled) waits out the kernel's
/// SYN retries, about two minutes; whoever connects here waits at most
/// until the deadline.
int connect_by(const std::string& host, uint16_t port, uint64_t deadline_ms, std::string& why);

} // namespace kvroom::detail
