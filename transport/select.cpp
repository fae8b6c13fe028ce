#include "kvroom/transport/select.hpp"

#include "kvroom/messages/error.hpp"

namespace kvroom {

namespace {

const endpoint_desc* find(const std::vector<endpoint_desc>& xs, const std::string& name) {
  for (auto& x : xs)
    if (x.transport == name)
      return &x;
  return nullptr;
}

std::string offered(const std::vector<endpoint_desc>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ", ") + x.transport;
  return out.empty() ? "nothing" : out;
}

std::string describe_kinds(memory_kinds k) {
  return to_string(k.src) + " -> " + to_string(k.dst) + " memory";
}

/// Transports that only work inside one domain (process or host).
bool domain_bound(const std::string& name) {
  return name == "local" || name == "shm" || name == "cuda";
}

} // namespace

bool moves(const std::string& name, memory_kinds kinds) {
  if (name == "cuda" || name == "verbs")
    return true;
  return !kinds.any_device();
}

caf::expected<endpoint_desc> choose_endpoint(const std::vector<endpoint_desc>& peer,
                                             const std::vector<endpoint_desc>& mine,
                                             const std::string& forced, memory_kinds kinds) {
  if (forced != "auto") {
    auto* x = find(peer, forced);
    if (!x)
      return make_error(errc::unavailable,
                        "peer offers no " + forced + " endpoint (it offers " + offered(peer) + ")");
    if (!find(mine, forced))
      return make_error(errc::unavailable, "this rank has no " + forced + " backend");
    if (!moves(forced, kinds))
      return make_error(errc::unsupported, forced + " cannot move " + describe_kinds(kinds));
    return *x;
  }
  // Nearest first: a memcpy beats a shared mapping beats the NIC beats a
  // socket. GPU memory goes through CUDA on one host, GPUDirect otherwise.
  static const char* host_order[] = {"local", "shm", "verbs", "tcp"};
  static const char* device_order[] = {"cuda", "verbs"};
  auto try_all = [&](const char* const* names, size_t n) -> const endpoint_desc* {
    for (size_t i = 0; i < n; ++i) {
      auto* theirs = find(peer, names[i]);
      auto* ours = find(mine, names[i]);
      if (!theirs || !ours)
        continue;
      if (domain_bound(names[i]) && theirs->domain != ours->domain)
        continue;
      return theirs;
    }
    return nullptr;
  };
  auto* x = kinds.any_device() ? try_all(device_order, 2) : try_all(host_order, 4);
  if (x)
    return *x;
  return make_error(errc::unavailable, "no transport moves " + describe_kinds(kinds)
                                         + " to the peer (it offers " + offered(peer)
                                         + ", this rank has " + offered(mine) + ")");
}

} // namespace kvroom
