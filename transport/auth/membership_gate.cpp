#include "kvroom/transport/auth/membership_gate.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "kvroom/messages/clock.hpp"
#include "kvroom/transport/log.hpp"
#include "kvroom/transport/socket_io.hpp"

namespace kvroom {

namespace {

std::string peer_host(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return "?";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&sa)->sin_addr, buf, sizeof(buf));
  else if (sa.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&sa)->sin6_addr, buf, sizeof(buf));
  return buf[0] ? buf : "?";
}

void set_blocking(int fd, bool blocking) {
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

/// Accepts per wake-up before the held connections get their turn: a flood
/// cannot starve the handshakes in progress, and the queue still drains at
/// the kernel's pace (the listener stays readable, poll returns at once).
constexpr int accepts_per_round = 256;

} // namespace

struct membership_gate::conn {
  enum phase_t { hello, answer, reply };
  int fd;
  std::string host;
  int64_t deadline;
  std::unique_ptr<door_handshake> hs;
  pass_fn pass;
  phase_t phase = hello;
  std::string out; // what is being sent (hello, then the reply)
  size_t sent = 0;

  conn(int f, std::string h, int64_t d, std::unique_ptr<door_handshake> x, pass_fn p)
    : fd(f), host(std::move(h)), deadline(d), hs(std::move(x)), pass(std::move(p)) {
    out = hs->hello();
  }
};

membership_gate::membership_gate(handshake_factory make, limits lim)
  : membership_gate(std::move(make), lim, naming{}) {
  // nop
}

membership_gate::membership_gate(handshake_factory make, limits lim, naming names)
  : make_(std::move(make)), limits_(lim), names_(std::move(names)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  try {
    if (wake_fd_ >= 0)
      thread_ = std::thread{[this] { run(); }};
  } catch (const std::system_error& e) {
    // No thread, no gate: every connection is refused (and said so), the
    // process lives.
    detail::transport_warning(names_.label + ": cannot start its gate thread: " + e.what()
                              + "; every incoming connection is refused");
  }
}

membership_gate::~membership_gate() {
  stop();
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
}

void membership_gate::wake() {
  uint64_t one = 1;
  (void) !::write(wake_fd_, &one, sizeof(one));
}

membership_gate::conn* membership_gate::take(int fd, pass_fn pass, std::string& why) {
  auto host = peer_host(fd);
  std::lock_guard<std::mutex> guard{mtx_};
  if (stopped_ || !thread_.joinable())
    why = "its gate is closed";
  else if (held_ >= limits_.max_pending)
    why = "all " + std::to_string(limits_.max_pending) + " pending-proof slots are taken";
  else if (auto i = per_host_.find(host);
           i != per_host_.end() && i->second >= limits_.max_per_host)
    why = std::to_string(limits_.max_per_host) + " connections from " + host
          + " are already waiting for their proof";
  if (!why.empty()) {
    why = host + ": " + why;
    return nullptr;
  }
  ++held_;
  ++per_host_[host];
  set_blocking(fd, false);
  return new conn{fd, std::move(host),
                  static_cast<int64_t>(monotonic_ms()) + limits_.deadline_ms, make_(),
                  std::move(pass)};
}

void membership_gate::refuse_full(int fd, const std::string& why) {
  auto n = ++refused_full_;
  ::close(fd);
  detail::transport_warning_limited(names_.full_kind, names_.label + " refuses a connection from "
                                                        + why + " (" + std::to_string(n)
                                                        + " such so far)");
}

void membership_gate::admit(int fd, pass_fn pass) {
  std::string why;
  auto* c = take(fd, std::move(pass), why);
  if (c == nullptr) {
    refuse_full(fd, why);
    return;
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    incoming_.push_back(c);
  }
  wake();
}

void membership_gate::listen(int listener, pass_fn pass) {
  // accept4 must say EAGAIN once the queue is empty, not wait in it.
  set_blocking(listener, false);
  {
    std::lock_guard<std::mutex> guard{mtx_};
    listener_ = listener;
    on_listener_ = std::move(pass);
  }
  wake();
}

void membership_gate::accept_all(std::vector<conn*>& held) {
  for (int i = 0; i < accepts_per_round; ++i) {
    int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return; // EAGAIN: drained; anything else (a connection reset while
              // queued, out of fds) is retried on the next readiness
    std::string why;
    auto* c = take(fd, on_listener_, why);
    if (c == nullptr)
      refuse_full(fd, why);
    else if (auto now = static_cast<int64_t>(monotonic_ms());
             step(*c, POLLOUT, now) && step(*c, POLLIN, now))
      held.push_back(c); // hello sent, no answer yet
    else
      delete c; // passed, or refused: often a connect/close whose close is here already
  }
}

void membership_gate::release(const conn& c) {
  std::lock_guard<std::mutex> guard{mtx_};
  --held_;
  auto i = per_host_.find(c.host);
  if (i != per_host_.end() && --i->second == 0)
    per_host_.erase(i);
}

void membership_gate::refuse(conn& c, const std::string& why, std::atomic<uint64_t>& counter) {
  auto n = ++counter;
  // Its slot is free before the client can see the close.
  release(c);
  ::close(c.fd);
  detail::transport_warning_limited(names_.proof_kind, names_.label + " refuses a connection from "
                                                         + c.host + ": " + why + " ("
                                                         + std::to_string(n) + " such so far)");
}

void membership_gate::hand_over(conn& c) {
  // Back to blocking: the next owner sets what it needs.
  set_blocking(c.fd, true);
  release(c);
  ++passed_;
  c.pass(c.fd, *c.hs);
}

bool membership_gate::step(conn& c, short ev, int64_t now) {
  std::string why;
  if (ev & (POLLOUT | POLLIN | POLLERR | POLLHUP)) {
    if (c.phase != conn::answer) {
      auto n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        why = std::string{"send failed: "} + std::strerror(errno);
      } else if (n > 0 && (c.sent += static_cast<size_t>(n)) == c.out.size()) {
        if (c.phase == conn::reply) {
          hand_over(c);
          return false;
        }
        c.phase = conn::answer;
      }
    } else {
      char buf[256];
      auto n = ::recv(c.fd, buf, std::min(sizeof(buf), c.hs->missing()), 0);
      if (n == 0) {
        why = "no membership proof (it closed first)";
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        why = std::string{"no membership proof (recv failed: "} + std::strerror(errno) + ")";
      } else if (n > 0) {
        c.hs->feed(buf, static_cast<size_t>(n));
        if (c.hs->hopeless()) {
          why = "not a kvroom rank (no membership proof)";
        } else if (c.hs->missing() == 0) {
          why = c.hs->verdict();
          if (why.empty()) {
            c.phase = conn::reply;
            c.out = c.hs->reply();
            c.sent = 0;
            if (c.out.empty()) {
              hand_over(c);
              return false;
            }
          } else if (auto no = c.hs->refusal(); !no.empty()) {
            // Said, not just closed: the client tells a refused proof from
            // a slow or lost endpoint (and does not retry).
            (void) ::send(c.fd, no.data(), no.size(), MSG_NOSIGNAL);
          }
        }
      }
    }
  }
  if (!why.empty()) {
    refuse(c, why, refused_proof_);
    return false;
  }
  if (now >= c.deadline) {
    refuse(c, "no membership proof within " + std::to_string(limits_.deadline_ms) + " ms",
           timed_out_);
    return false;
  }
  return true;
}

void membership_gate::run() {
  std::vector<conn*> held;
  std::vector<pollfd> fds;
  for (;;) {
    int listener = -1;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (stopped_)
        break;
      held.insert(held.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
      listener = listener_;
    }
    auto now = static_cast<int64_t>(monotonic_ms());
    int64_t timeout = 1000;
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    fds.push_back(pollfd{listener, POLLIN, 0}); // fd -1: ignored by poll
    for (auto* c : held) {
      fds.push_back(
        pollfd{c->fd, static_cast<short>(c->phase == conn::answer ? POLLIN : POLLOUT), 0});
      timeout = std::min(timeout, std::max<int64_t>(0, c->deadline - now));
    }
    auto ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (ready < 0 && errno != EINTR)
      break;
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      uint64_t n;
      (void) !::read(wake_fd_, &n, sizeof(n));
    }
    now = static_cast<int64_t>(monotonic_ms());
    std::vector<conn*> still;
    still.reserve(held.size());
    for (size_t i = 0; i < held.size(); ++i) {
      auto* c = held[i];
      if (step(*c, ready > 0 ? fds[i + 2].revents : 0, now))
        still.push_back(c);
      else
        delete c;
    }
    held.swap(still);
    if (ready > 0 && (fds[1].revents & POLLIN))
      accept_all(held);
  }
  std::lock_guard<std::mutex> guard{mtx_};
  held.insert(held.end(), incoming_.begin(), incoming_.end());
  incoming_.clear();
  for (auto* c : held) {
    ::close(c->fd);
    delete c;
  }
  held_ = 0;
  per_host_.clear();
}

void membership_gate::stop() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopped_ = true;
  }
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
}

membership_gate::counters membership_gate::stats() const {
  counters out;
  out.passed = passed_;
  out.refused_full = refused_full_;
  out.refused_proof = refused_proof_;
  out.timed_out = timed_out_;
  return out;
}

size_t membership_gate::pending() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return held_;
}

} // namespace kvroom
