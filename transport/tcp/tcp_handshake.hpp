#pragma once

#include <cstdint>
#include <string>

#include "kvroom/api/ids.hpp"
#include "kvroom/transport/auth/door_handshake.hpp"
#include "kvroom/api/secret.hpp"

namespace kvroom::detail {

/// The tcp data plane's membership proof, before a batch is read:
///
///   receiver -> sender  "KVCH" (u32) 0 (u32) nonce (32)            40 bytes
///   sender -> receiver  "KVPR" (u32) 0 (u32) sender (i64) mac (32) 48 bytes
///
/// mac = HMAC(secret, "kvroom/tcp/v1", nonce, sender, receiver): it names
/// both ranks, so a proof for one receiver is worth nothing at another.
namespace tcp_wire {

constexpr uint32_t challenge_magic = 0x4b564348; // "KVCH"
constexpr uint32_t proof_magic = 0x4b565052;     // "KVPR"
constexpr size_t challenge_size = 40;
constexpr size_t proof_size = 48;

} // namespace tcp_wire

/// The receiver's side, fed bytes as they arrive (no I/O here).
class tcp_door final : public door_handshake {
public:
  tcp_door(deployment_secret secret, rank_id receiver, nonce challenge);

  const std::string& hello() const noexcept override {
    return hello_;
  }

  size_t missing() const noexcept override {
    return tcp_wire::proof_size - proof_.size();
  }

  void feed(const char* data, size_t size) override;

  bool hopeless() const noexcept override;

  std::string verdict() const override;

  /// Nothing: the sender's first batch follows its proof.
  std::string reply() const override {
    return {};
  }

  /// The rank the proof names; meaningful once `verdict()` is empty.
  rank_id sender() const noexcept;

private:
  deployment_secret secret_;
  rank_id receiver_;
  nonce nonce_;
  std::string hello_;
  std::string proof_;
};

/// The sender's side on a connected socket: reads the challenge and
/// answers it as `sender`, by `deadline_ms` (monotonic_ms). Empty when the
/// proof was sent, else why not.
std::string tcp_prove(int fd, const deployment_secret& secret, rank_id sender, rank_id receiver,
                      uint64_t deadline_ms);

} // namespace kvroom::detail
