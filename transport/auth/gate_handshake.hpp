#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvroom/transport/auth/door_handshake.hpp"
#include "kvroom/api/secret.hpp"

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
class gate_server final : public door_handshake {
public:
  gate_server(deployment_secret secret, nonce server_nonce);

  const std::string& hello() const noexcept override {
    return hello_;
  }

  size_t missing() const noexcept override {
    return gate_wire::answer_size - answer_.size();
  }

  void feed(const char* data, size_t size) override;

  bool hopeless() const noexcept override;

  std::string verdict() const override;

  /// The server's proof.
  std::string reply() const override;

  /// A proof of all zeros: the client reads "refused", not "lost".
  std::string refusal() const override {
    return std::string(gate_wire::proof_size, '\0');
  }

private:
  deployment_secret secret_;
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

/// What became of a connection at a peer's control gate.
struct gate_outcome {
  enum kind_t {
    passed,  ///< both proofs held; the socket is at CAF's first byte
    refused, ///< a proof failed (ours or the endpoint's): another secret
    failed,  ///< no answer in time, closed, not a gate: worth a retry
  };
  kind_t kind = failed;
  std::string why;
};

/// The client's side on a connected socket: answers the gate and checks
/// the server's proof, all by `deadline_ms` from now.
gate_outcome pass_gate(int fd, const deployment_secret& secret, uint32_t deadline_ms);

} // namespace kvroom
