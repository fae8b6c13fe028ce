#include "kvroom/transport/socket_io.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstring>

#include "kvroom/messages/clock.hpp"

namespace kvroom::detail {

namespace {

/// What a failed non-blocking call means: go on (`again`: try once more at
/// once, or wait for the socket), or stop (`false`: closed or an error).
bool transient(ssize_t n, bool& wait) {
  if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
    return false;
  wait = errno != EINTR;
  return true;
}

/// Waits for `fd` to be ready to read (or write) until `deadline_ms`. Every
/// wait checks the one deadline: a peer that trickles bytes does not restart
/// the clock. False at the deadline or on an error.
bool wait_by(int fd, bool sending, uint64_t deadline_ms) {
  auto now = monotonic_ms();
  if (now >= deadline_ms)
    return false;
  pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
  auto ready = ::poll(&pfd, 1, static_cast<int>(std::min<uint64_t>(deadline_ms - now, 1000)));
  return ready >= 0 || errno == EINTR;
}

} // namespace

bool exchange_by(int fd, void* buf, size_t len, uint64_t deadline_ms, bool sending) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    // Try first, wait only when the socket has nothing (or no room): in a
    // stream the bytes are usually there, and a poll before every read
    // doubled the system calls of each small batch.
    auto n = sending ? ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                     : ::recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    bool wait = false;
    if (!transient(n, wait) || (wait && !wait_by(fd, sending, deadline_ms)))
      return false;
  }
  return true;
}

stream_reader::stream_reader(int fd, size_t capacity) : fd_(fd), buf_(capacity, '\0') {
  // nop
}

bool stream_reader::wait() {
  if (end_ > begin_)
    return true;
  begin_ = end_ = 0;
  for (;;) {
    auto n = ::recv(fd_, buf_.data(), buf_.size(), 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    end_ = static_cast<size_t>(n);
    return true;
  }
}

bool stream_reader::fill_by(uint64_t deadline_ms) {
  begin_ = end_ = 0;
  for (;;) {
    auto n = ::recv(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n > 0) {
      end_ = static_cast<size_t>(n);
      return true;
    }
    bool wait = false;
    if (!transient(n, wait) || (wait && !wait_by(fd_, false, deadline_ms)))
      return false;
  }
}

bool stream_reader::read_by(void* dst, size_t len, uint64_t deadline_ms) {
  auto* p = static_cast<char*>(dst);
  for (;;) {
    auto take = std::min(len, end_ - begin_);
    std::memcpy(p, buf_.data() + begin_, take);
    begin_ += take;
    p += take;
    len -= take;
    if (len == 0)
      return true;
    // The buffer is empty: a large rest goes straight to its place.
    if (len >= buf_.size()) {
      begin_ = end_ = 0;
      return exchange_by(fd_, p, len, deadline_ms, false);
    }
    if (!fill_by(deadline_ms))
      return false;
  }
}

bool stream_reader::read_into_by(iovec* parts, size_t n, uint64_t deadline_ms) {
  // Moves `parts` on by `got` bytes, dropping the parts filled.
  auto advance = [&](size_t got) {
    while (got > 0 && n > 0) {
      auto take = std::min(got, parts->iov_len);
      parts->iov_base = static_cast<char*>(parts->iov_base) + take;
      parts->iov_len -= take;
      got -= take;
      if (parts->iov_len == 0)
        ++parts, --n;
    }
    while (n > 0 && parts->iov_len == 0)
      ++parts, --n;
  };
  advance(0);
  while (n > 0 && end_ > begin_) {
    auto take = std::min(parts->iov_len, end_ - begin_);
    std::memcpy(parts->iov_base, buf_.data() + begin_, take);
    begin_ += take;
    advance(take);
  }
  while (n > 0) {
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = std::min<size_t>(n, IOV_MAX);
    auto got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (got > 0) {
      advance(static_cast<size_t>(got));
      continue;
    }
    bool wait = false;
    if (!transient(got, wait) || (wait && !wait_by(fd_, false, deadline_ms)))
      return false;
  }
  return true;
}

namespace {

/// Connects `fd` (non-blocking) to `addr` by the deadline: 0, or an errno.
int connect_one(int fd, const addrinfo& addr, uint64_t deadline_ms) {
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) == 0)
    return 0;
  if (errno != EINPROGRESS && errno != EINTR)
    return errno;
  for (;;) {
    auto now = monotonic_ms();
    if (now >= deadline_ms)
      return ETIMEDOUT;
    pollfd pfd{fd, POLLOUT, 0};
    auto ready = ::poll(&pfd, 1, static_cast<int>(std::min<uint64_t>(deadline_ms - now, 1000)));
    if (ready < 0 && errno != EINTR)
      return errno;
    if (ready <= 0)
      continue;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      return errno;
    return err;
  }
}

} // namespace

int connect_by(const std::string& host, uint16_t port, uint64_t deadline_ms, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  auto target = host + ":" + std::to_string(port);
  if (auto rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    why = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int err = EHOSTUNREACH;
  int fd = -1;
  for (auto* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    int s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    err = connect_one(s, *a, deadline_ms);
    if (err == 0 && ::fcntl(s, F_SETFL, ::fcntl(s, F_GETFL) & ~O_NONBLOCK) != 0)
      err = errno;
    if (err == 0)
      fd = s;
    else
      ::close(s);
    if (err == ETIMEDOUT)
      break; // the deadline is spent for every address
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    why = err == ETIMEDOUT ? "connect to " + target + ": no answer by the deadline"
                           : "connect to " + target + ": " + std::strerror(err);
  return fd;
}

} // namespace kvroom::detail
