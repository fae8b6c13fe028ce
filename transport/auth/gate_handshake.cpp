#include "kvroom/transport/auth/gate_handshake.hpp"

#include <algorithm>

#include "kvroom/transport/socket_io.hpp"

namespace kvroom {

namespace {

constexpr char magic[gate_wire::magic_size] = {'K', 'V', 'G', '1'};

std::string client_mac(const deployment_secret& s, const nonce& sn, const nonce& cn) {
  return s.mac("kvroom/control-client/v1", sn, cn);
}

std::string server_mac(const deployment_secret& s, const nonce& cn, const nonce& sn) {
  return s.mac("kvroom/control-server/v1", cn, sn);
}

bool has_magic(const std::string& x) {
  return x.size() >= gate_wire::magic_size
         && std::equal(magic, magic + gate_wire::magic_size, x.begin());
}

} // namespace

gate_server::gate_server(deployment_secret secret, nonce server_nonce)
  : secret_(std::move(secret)), server_nonce_(std::move(server_nonce)) {
  hello_.assign(magic, gate_wire::magic_size);
  hello_ += server_nonce_;
  answer_.reserve(gate_wire::answer_size);
}

void gate_server::feed(const char* data, size_t size) {
  answer_.append(data, std::min(size, missing()));
}

bool gate_server::hopeless() const noexcept {
  auto n = std::min(answer_.size(), gate_wire::magic_size);
  return !std::equal(answer_.begin(), answer_.begin() + static_cast<long>(n), magic);
}

std::string gate_server::verdict() const {
  if (missing() > 0)
    return "an incomplete membership proof";
  if (!has_magic(answer_))
    return "not a kvroom rank (no membership proof)";
  auto cn = answer_.substr(gate_wire::magic_size, 32);
  auto tag = answer_.substr(gate_wire::magic_size + 32, 32);
  if (!deployment_secret::equal(tag, client_mac(secret_, server_nonce_, cn)))
    return "a failed membership proof (a different deployment secret?)";
  return {};
}

std::string gate_server::reply() const {
  return server_mac(secret_, answer_.substr(gate_wire::magic_size, 32), server_nonce_);
}

gate_client::gate_client(const deployment_secret& secret, nonce client_nonce)
  : secret_(&secret), client_nonce_(std::move(client_nonce)) {
  // nop
}

std::string gate_client::answer(const std::string& hello, std::string& why) {
  if (hello.size() != gate_wire::hello_size || !has_magic(hello)) {
    why = "the endpoint is not a kvroom control endpoint (no gate hello)";
    return {};
  }
  server_nonce_ = hello.substr(gate_wire::magic_size);
  std::string out(magic, gate_wire::magic_size);
  out += client_nonce_;
  out += client_mac(*secret_, server_nonce_, client_nonce_);
  return out;
}

std::string gate_client::check(const std::string& proof) const {
  if (!deployment_secret::equal(proof, server_mac(*secret_, client_nonce_, server_nonce_)))
    return "the endpoint failed to prove membership (a different deployment secret?)";
  return {};
}

gate_outcome pass_gate(int fd, const deployment_secret& secret, uint32_t deadline_ms) {
  using detail::exchange_by;
  auto deadline = monotonic_ms() + deadline_ms;
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
