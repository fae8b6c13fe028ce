#pragma once

#include <cstddef>
#include <string>

namespace kvroom {

/// The server's side of a membership handshake, fed bytes as they arrive.
/// It does no I/O, so one gate thread holds any number of them at once
/// (membership_gate.hpp) and a stranger costs no thread of its own. The
/// control endpoints' handshake (gate_handshake.hpp) and the tcp data
/// plane's (tcp/tcp_handshake.hpp) are the two kinds.
class door_handshake {
public:
  virtual ~door_handshake() = default;

  /// The first bytes to send.
  virtual const std::string& hello() const noexcept = 0;

  /// Bytes of the client's answer still missing.
  virtual size_t missing() const noexcept = 0;

  /// Appends at most `missing()` bytes of the answer.
  virtual void feed(const char* data, size_t size) = 0;

  /// True once what arrived cannot start a proof (a wrong magic): no need
  /// to wait for the rest.
  virtual bool hopeless() const noexcept = 0;

  /// Once `missing() == 0`: empty when the client proved membership, else
  /// why it did not.
  virtual std::string verdict() const = 0;

  /// Sent to a client that proved membership before its socket is passed
  /// on; may be empty.
  virtual std::string reply() const = 0;

  /// Sent to a client whose proof failed before it is closed, so that it
  /// can tell a refusal from a lost endpoint (and not retry); may be empty.
  virtual std::string refusal() const {
    return {};
  }
};

} // namespace kvroom
