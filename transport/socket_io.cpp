#include "kvroom/transport/socket_io.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

namespace kvroom::detail {

uint64_t steady_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(
    duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
}

bool exchange_by(int fd, void* buf, size_t len, uint64_t deadline_ms, bool sending) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    auto now = steady_ms();
    if (now >= deadline_ms)
      return false;
    pollfd pfd{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    auto ready = ::poll(&pfd, 1, static_cast<int>(std::min<uint64_t>(deadline_ms - now, 1000)));
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready < 0)
      return false;
    if (ready == 0)
      continue;
    auto n = sending ? ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                     : ::recv(fd, p, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (n <= 0)
      return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

} // namespace kvroom::detail
