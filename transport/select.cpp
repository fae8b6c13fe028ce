#include "transport/select.hpp"

#include "messages/error.hpp"

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

} // namespace

caf::expected<endpoint_desc> choose_endpoint(const std::vector<endpoint_desc>& peer,
                                             const std::vector<endpoint_desc>& mine,
                                             const std::string& forced) {
  if (forced != "auto") {
    auto* x = find(peer, forced);
    if (!x)
      return make_error(errc::unavailable,
                        "peer offers no " + forced + " endpoint (it offers " + offered(peer) + ")");
    if (!find(mine, forced))
      return make_error(errc::unavailable, "this rank has no " + forced + " backend");
    return *x;
  }
  // Nearest first: a memcpy beats a shared mapping beats a socket.
  for (auto* name : {"local", "shm"}) {
    auto* theirs = find(peer, name);
    auto* ours = find(mine, name);
    if (theirs && ours && theirs->domain == ours->domain)
      return *theirs;
  }
  if (auto* x = find(peer, "tcp"); x && find(mine, "tcp"))
    return *x;
  return make_error(errc::unavailable, "no transport reaches the peer (it offers "
                                         + offered(peer) + ", this rank has " + offered(mine)
                                         + ")");
}

} // namespace kvroom
