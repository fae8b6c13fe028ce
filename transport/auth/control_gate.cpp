#include "kvroom/transport/auth/control_gate.hpp"

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

#include "kvroom/transport/log.hpp"
#include "kvroom/transport/socket_io.hpp"

namespace kvroom {

namespace {

int64_t now_ms() {
  return static_cast<int64_t>(detail::steady_ms());
}

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

void warn(const std::string& text) {
  detail::transport_warning_limited("control-gate", "control endpoint: " + text);
}

} // namespace

struct control_gate::conn {
  enum phase_t { hello, answer, reply };
  int fd;
  std::string host;
  int64_t deadline;
  gate_server hs;
  pass_fn pass;
  phase_t phase = hello;
  std::string out; // what is being sent (hello, then the reply)
  size_t sent = 0;

  conn(int f, std::string h, int64_t d, const deployment_secret& s, pass_fn p)
    : fd(f), host(std::move(h)), deadline(d), hs(s, make_nonce()), pass(std::move(p)) {
    out = hs.hello();
  }
};

control_gate::control_gate(deployment_secret secret)
  : control_gate(std::move(secret), limits{}) {
  // nop
}

control_gate::control_gate(deployment_secret secret, limits lim)
  : secret_(std::move(secret)), limits_(lim) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  try {
    if (wake_fd_ >= 0)
      thread_ = std::thread{[this] { run(); }};
  } catch (const std::system_error& e) {
    // No thread, no gate: every connection is refused (and said so), the
    // process lives.
    detail::transport_warning(std::string{"control endpoint: cannot start its gate thread: "}
                      + e.what() + "; every incoming control connection is refused");
  }
}

control_gate::~control_gate() {
  stop();
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
}

void control_gate::wake() {
  uint64_t one = 1;
  (void) !::write(wake_fd_, &one, sizeof(one));
}

void control_gate::admit(int fd, pass_fn pass) {
  auto host = peer_host(fd);
  std::string why;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (stopped_ || !thread_.joinable())
      why = "its gate is closed";
    else if (held_ >= limits_.max_pending)
      why = "all " + std::to_string(limits_.max_pending) + " pending-proof slots are taken";
    else if (per_host_[host] >= limits_.max_per_host)
      why = std::to_string(limits_.max_per_host) + " connections from " + host
            + " are already waiting for their proof";
    if (why.empty()) {
      ++held_;
      ++per_host_[host];
      int flags = ::fcntl(fd, F_GETFL);
      ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      incoming_.push_back(new conn{fd, host, now_ms() + limits_.deadline_ms, secret_,
                                   std::move(pass)});
    } else if (per_host_[host] == 0) {
      per_host_.erase(host);
    }
  }
  if (!why.empty()) {
    ++refused_full_;
    ::close(fd);
    warn("refused a connection from " + host + ": " + why + " (" + std::to_string(refused_full_)
         + " such so far)");
    return;
  }
  wake();
}

void control_gate::release(const conn& c) {
  std::lock_guard<std::mutex> guard{mtx_};
  --held_;
  auto i = per_host_.find(c.host);
  if (i != per_host_.end() && --i->second == 0)
    per_host_.erase(i);
}

void control_gate::refuse(conn& c, const std::string& why, std::atomic<uint64_t>& counter) {
  auto n = ++counter;
  // Its slot is free before the client can see the close.
  release(c);
  ::close(c.fd);
  warn("closed a connection from " + c.host + " before CAF read a byte: " + why + " ("
       + std::to_string(n) + " such so far)");
}

void control_gate::run() {
  std::vector<conn*> held;
  std::vector<pollfd> fds;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (stopped_)
        break;
      held.insert(held.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    auto now = now_ms();
    int64_t timeout = 1000;
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    for (auto* c : held) {
      fds.push_back(pollfd{c->fd, static_cast<short>(c->phase == conn::answer ? POLLIN : POLLOUT), 0});
      timeout = std::min(timeout, std::max<int64_t>(0, c->deadline - now));
    }
    auto ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout));
    if (ready < 0 && errno != EINTR)
      break;
    if (fds[0].revents & POLLIN) {
      uint64_t n;
      (void) !::read(wake_fd_, &n, sizeof(n));
    }
    now = now_ms();
    std::vector<conn*> still;
    for (size_t i = 0; i < held.size(); ++i) {
      auto* c = held[i];
      auto ev = ready > 0 ? fds[i + 1].revents : 0;
      std::string why;
      bool done = false;
      if (ev & (POLLOUT | POLLIN | POLLERR | POLLHUP)) {
        if (c->phase != conn::answer) {
          auto n = ::send(c->fd, c->out.data() + c->sent, c->out.size() - c->sent, MSG_NOSIGNAL);
          if (n < 0 && errno != EAGAIN && errno != EINTR)
            why = std::string{"send failed: "} + std::strerror(errno);
          else if (n > 0 && (c->sent += static_cast<size_t>(n)) == c->out.size()) {
            if (c->phase == conn::hello) {
              c->phase = conn::answer;
            } else {
              done = true;
            }
          }
        } else {
          char buf[gate_wire::answer_size];
          auto n = ::recv(c->fd, buf, c->hs.missing(), 0);
          if (n == 0)
            why = "it closed without a membership proof";
          else if (n < 0 && errno != EAGAIN && errno != EINTR)
            why = std::string{"recv failed: "} + std::strerror(errno);
          else if (n > 0) {
            c->hs.feed(buf, static_cast<size_t>(n));
            if (c->hs.hopeless()) {
              refuse(*c, "not a kvroom rank (no membership proof)", refused_proof_);
              delete c;
              continue;
            }
            if (c->hs.missing() == 0) {
              why = c->hs.verdict();
              if (why.empty()) {
                c->phase = conn::reply;
                c->out = c->hs.reply();
                c->sent = 0;
              } else {
                // Said, not just closed: the client tells a refused proof
                // from a slow or lost endpoint (and does not retry).
                std::string no(gate_wire::proof_size, '\0');
                (void) ::send(c->fd, no.data(), no.size(), MSG_NOSIGNAL);
                refuse(*c, why, refused_proof_);
                delete c;
                continue;
              }
            }
          }
        }
      }
      if (done) {
        // Back to blocking: CAF sets what it needs on the socket it gets.
        int flags = ::fcntl(c->fd, F_GETFL);
        ::fcntl(c->fd, F_SETFL, flags & ~O_NONBLOCK);
        release(*c);
        ++passed_;
        c->pass(c->fd);
        delete c;
      } else if (!why.empty()) {
        refuse(*c, why, refused_proof_);
        delete c;
      } else if (now >= c->deadline) {
        refuse(*c, "no membership proof within " + std::to_string(limits_.deadline_ms) + " ms",
               timed_out_);
        delete c;
      } else {
        still.push_back(c);
      }
    }
    held.swap(still);
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

void control_gate::stop() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stopped_ = true;
  }
  if (thread_.joinable()) {
    wake();
    thread_.join();
  }
}

control_gate::counters control_gate::stats() const {
  counters out;
  out.passed = passed_;
  out.refused_full = refused_full_;
  out.refused_proof = refused_proof_;
  out.timed_out = timed_out_;
  return out;
}

size_t control_gate::pending() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return held_;
}

gate_outcome pass_gate(int fd, const deployment_secret& secret, uint32_t deadline_ms) {
  using detail::exchange_by;
  auto deadline = detail::steady_ms() + deadline_ms;
  auto late = "no answer from the endpoint's gate within " + std::to_string(deadline_ms)
              + " ms, or it closed";
  std::string hello(gate_wire::hello_size, '\0');
  if (!exchange_by(fd, hello.data(), hello.size(), deadline, false))
    return {gate_outcome::failed, late + " (not a kvroom control endpoint, or one with TLS?)"};
  gate_client client{secret, make_nonce()};
  std::string why;
  auto answer = client.answer(hello, why);
  if (answer.empty())
    return {gate_outcome::failed, why};
  if (!exchange_by(fd, answer.data(), answer.size(), deadline, true))
    return {gate_outcome::failed, late};
  std::string proof(gate_wire::proof_size, '\0');
  if (!exchange_by(fd, proof.data(), proof.size(), deadline, false))
    return {gate_outcome::failed, late};
  if (proof == std::string(gate_wire::proof_size, '\0'))
    return {gate_outcome::refused, "the endpoint refused our membership proof: we failed to "
                                   "prove membership (a different deployment secret?)"};
  why = client.check(proof);
  if (!why.empty())
    return {gate_outcome::refused, why};
  return {gate_outcome::passed, {}};
}

} // namespace kvroom
