#include "kvroom/transport/select.hpp"

#include <algorithm>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/transport_table.hpp"

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

} // namespace

bool moves(const std::string& name, memory_kinds kinds) {
  auto* row = find_transport(name);
  if (!row)
    return false;
  return kinds.any_device() ? row->moves_device() : row->moves_host;
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
  // Nearest first, by the table's nearness for these memory kinds (host:
  // local, shm, verbs, tcp; GPU memory: cuda on one host, verbs across).
  std::vector<const transport_row*> order;
  for (auto* row : transport_table())
    if ((kinds.any_device() ? row->device_nearness : row->host_nearness) >= 0)
      order.push_back(row);
  std::stable_sort(order.begin(), order.end(), [&](const transport_row* a, const transport_row* b) {
    return kinds.any_device() ? a->device_nearness < b->device_nearness
                              : a->host_nearness < b->host_nearness;
  });
  const endpoint_desc* x = nullptr;
  for (auto* row : order) {
    auto* theirs = find(peer, row->name);
    auto* ours = find(mine, row->name);
    if (!theirs || !ours)
      continue;
    // An endpoint of a domain-bound transport is reachable only from the
    // same process or host: its domain must equal ours.
    if (row->domain_bound && theirs->domain != ours->domain)
      continue;
    x = theirs;
    break;
  }
  if (x)
    return *x;
  return make_error(errc::unavailable, "no transport moves " + describe_kinds(kinds)
                                         + " to the peer (it offers " + offered(peer)
                                         + ", this rank has " + offered(mine) + ")");
}

caf::expected<std::vector<endpoint_desc>> choose_paths(const std::vector<endpoint_desc>& peer,
                                                       const std::vector<endpoint_desc>& mine,
                                                       const std::string& forced,
                                                       memory_kinds kinds) {
  auto first = choose_endpoint(peer, mine, forced, kinds);
  if (!first)
    return first.error();
  std::vector<endpoint_desc> out{*first};
  auto same_transport = [&](const std::string& name) {
    for (auto& x : peer)
      if (x.transport == name && x.address != first->address)
        out.push_back(x);
  };
  same_transport(first->transport);
  auto* row = find_transport(first->transport);
  if (forced != "auto" || row == nullptr || row->domain_bound)
    return out;
  auto nearness = [&](const transport_row* r) {
    return kinds.any_device() ? r->device_nearness : r->host_nearness;
  };
  std::vector<const transport_row*> farther;
  for (auto* r : transport_table())
    if (!r->domain_bound && r != row && nearness(r) > nearness(row) && find(mine, r->name))
      farther.push_back(r);
  std::stable_sort(farther.begin(), farther.end(), [&](const transport_row* a,
                                                       const transport_row* b) {
    return nearness(a) < nearness(b);
  });
  for (auto* r : farther)
    for (auto& x : peer)
      if (x.transport == r->name)
        out.push_back(x);
  return out;
}

} // namespace kvroom
