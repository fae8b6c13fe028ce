#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/uio.h>

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

/// Reads a stream through a small buffer: one system call takes whatever
/// has arrived (several small batches at once, where each header,
/// descriptor list and payload cost a call of its own), and a read as large
/// as the buffer goes straight into its destination. It holds at most its
/// capacity beyond what was asked for, so memory follows what the peer sent.
class stream_reader {
public:
  explicit stream_reader(int fd, size_t capacity = 64 * 1024);

  /// Waits until at least one byte has arrived, blocking under the socket's
  /// own receive timeout (an idle peer's limit). False: closed, idle past
  /// the timeout, or an error.
  bool wait();

  /// Exactly `len` bytes into `dst` by `deadline_ms` (monotonic_ms), as
  /// `recv_by`.
  bool read_by(void* dst, size_t len, uint64_t deadline_ms);

  /// Exactly the bytes of `parts` into their places by `deadline_ms`: what
  /// is buffered first, then the rest straight into the places, up to
  /// IOV_MAX of them in one system call (pages scattered over a cache each
  /// cost a copy through the buffer and a call per buffer-full otherwise).
  /// Reads nothing beyond the last part. `parts` is consumed (advanced).
  bool read_into_by(iovec* parts, size_t n, uint64_t deadline_ms);

  size_t capacity() const noexcept {
    return buf_.size();
  }

private:
  /// At least one more byte into the (empty) buffer by the deadline.
  bool fill_by(uint64_t deadline_ms);

  int fd_;
  std::string buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

/// A blocking TCP socket connected to `host:port` by `deadline_ms`
/// (monotonic_ms), or -1 with the reason in `why`. Each address `host` resolves
/// to is tried in turn within the one deadline. A plain blocking connect to
/// a host that drops SYNs (powered off, firewalled) waits out the kernel's
/// SYN retries, about two minutes; whoever connects here waits at most
/// until the deadline.
int connect_by(const std::string& host, uint16_t port, uint64_t deadline_ms, std::string& why);

} // namespace kvroom::detail
