#pragma once

#include <cstddef>
#include <string>

#include "kvroom/transport/auth/secret.hpp"

namespace kvroom {

/// The membership proof at the door of a control endpoint, before CAF's
/// middleman reads a byte of the connection. CAF 0.17 trusts what a BASP
/// header announces (one 32-byte header from anyone made a rank allocate
/// and zero 4 GiB) and never closes a connection that stays silent, so a
/// connection reaches it only after both ends proved they hold the
/// deployment secret:
///
///   server -> client  "KVG1" server_nonce                         36 bytes
///   client -> server  "KVG1" client_nonce mac(client, sn, cn)     68 bytes
///   server -> client  mac(server, cn, sn)                         32 bytes
///
/// and then BASP starts on the same socket. Every read has an exact size, so
/// not one byte of CAF's own handshake is taken by the gate. The first
/// bytes a plain CAF client reads as a BASP header name no valid operation:
/// it gives up at once instead of waiting.
namespace gate_wire {

constexpr size_t magic_size = 4;
constexpr size_t hello_size = magic_size + 32;
constexpr size_t answer_size = magic_size + 32 + 32;
constexpr size_t proof_size = 32;

} // namespace gate_wire

/// The server's side, fed bytes as they arrive (no I/O here).
class gate_server {
public:
  gate_server(const deployment_secret& secret, nonce server_nonce);

  /// The first bytes to send.
  const std::string& hello() const noexcept {
    return hello_;
  }

  /// Bytes of the client's answer still missing.
  size_t missing() const noexcept {
    return gate_wire::answer_size - answer_.size();
  }

  /// Appends at most `missing()` bytes of the answer.
  void feed(const char* data, size_t size);

  /// True once what arrived cannot start a proof (a wrong magic): no need
  /// to wait for the rest.
  bool hopeless() const noexcept;

  /// Once `missing() == 0`: empty when the client proved membership (send
  /// `reply()`, then hand the socket over), else why it did not.
  std::string verdict() const;

  /// The server's proof, for a client that proved membership.
  std::string reply() const;

private:
  const deployment_secret* secret_;
  nonce server_nonce_;
  std::string hello_;
  std::string answer_;
};

/// The client's side.
class gate_client {
public:
  gate_client(const deployment_secret& secret, nonce client_nonce);

  /// The answer to the server's hello, or empty with `why` set.
  std::string answer(const std::string& hello, std::string& why);

  /// Checks the server's proof; empty when it proved membership.
  std::string check(const std::string& proof) const;

private:
  const deployment_secret* secret_;
  nonce client_nonce_;
  nonce server_nonce_;
};

} // namespace kvroom
