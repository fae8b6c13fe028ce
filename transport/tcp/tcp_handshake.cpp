#include "kvroom/transport/tcp/tcp_handshake.hpp"

#include <algorithm>
#include <cstring>

#include "kvroom/transport/socket_io.hpp"

namespace kvroom::detail {

namespace {

mac_tag tcp_proof(const deployment_secret& secret, const std::string& challenge, rank_id sender,
                  rank_id receiver) {
  return secret.mac("kvroom/tcp/v1", challenge, sender, receiver);
}

std::string magic_bytes(uint32_t magic) {
  std::string out(8, '\0'); // magic, then a reserved u32
  std::memcpy(out.data(), &magic, sizeof(magic));
  return out;
}

} // namespace

tcp_door::tcp_door(deployment_secret secret, rank_id receiver, nonce challenge)
  : secret_(std::move(secret)), receiver_(receiver), nonce_(std::move(challenge)) {
  hello_ = magic_bytes(tcp_wire::challenge_magic) + nonce_;
  proof_.reserve(tcp_wire::proof_size);
}

void tcp_door::feed(const char* data, size_t size) {
  proof_.append(data, std::min(size, missing()));
}

bool tcp_door::hopeless() const noexcept {
  auto want = magic_bytes(tcp_wire::proof_magic);
  auto n = std::min<size_t>(proof_.size(), 4);
  return !std::equal(proof_.begin(), proof_.begin() + static_cast<long>(n), want.begin());
}

rank_id tcp_door::sender() const noexcept {
  int64_t who = -1;
  if (proof_.size() >= 16)
    std::memcpy(&who, proof_.data() + 8, sizeof(who));
  return static_cast<rank_id>(who);
}

std::string tcp_door::verdict() const {
  if (missing() > 0)
    return "an incomplete membership proof";
  if (hopeless())
    return "not a kvroom rank (no membership proof)";
  if (!deployment_secret::equal(proof_.substr(16, 32),
                                tcp_proof(secret_, nonce_, sender(), receiver_)))
    return "rank " + std::to_string(sender())
           + " failed to prove membership (a different deployment secret?)";
  return {};
}

std::string tcp_prove(int fd, const deployment_secret& secret, rank_id sender, rank_id receiver,
                      uint64_t deadline_ms) {
  char challenge[tcp_wire::challenge_size];
  if (!recv_by(fd, challenge, sizeof(challenge), deadline_ms)
      || std::string(challenge, 8) != magic_bytes(tcp_wire::challenge_magic))
    return "sent no membership challenge (not a kvroom rank?)";
  auto proof = magic_bytes(tcp_wire::proof_magic);
  int64_t who = sender;
  proof.append(reinterpret_cast<const char*>(&who), sizeof(who));
  proof += tcp_proof(secret, std::string{challenge + 8, 32}, sender, receiver);
  if (!exchange_by(fd, proof.data(), proof.size(), deadline_ms, true))
    return "could not send its membership proof";
  return {};
}

} // namespace kvroom::detail
