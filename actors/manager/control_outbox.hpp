#pragma once

// Control messages for other processes, held for the rest of one drain of
// the manager's mailbox and sent as one bundle per peer. Part of the
// kv_manager actor; not an API.

#include <cstddef>
#include <utility>
#include <vector>

#include "caf/actor.hpp"
#include "caf/message.hpp"

namespace kvroom::detail {

/// Why: CAF 0.17's BASP reads every message with two `recvfrom` calls
/// (its header, then its payload) and hands each to the receiving actor on
/// its own. With many rooms in flight a manager sends several messages to
/// the same peer in one drain (commits, failures, parts); one bundle costs
/// the wire one frame for all of them. Bounded: at most `max_bundle`
/// messages per peer before they leave, and one entry per peer.
class control_outbox {
public:
  static constexpr size_t max_bundle = 64;
  static_assert(max_bundle > 1);

  /// Holds `msg` for `dest`; true when `dest` holds `max_bundle` messages
  /// now (the caller sends them at once, with `take(dest)`).
  bool add(const caf::actor& dest, caf::message msg) {
    for (auto& e : peers_)
      if (e.first == dest) {
        e.second.push_back(std::move(msg));
        return e.second.size() >= max_bundle;
      }
    peers_.emplace_back(dest, std::vector<caf::message>{});
    peers_.back().second.reserve(8);
    peers_.back().second.push_back(std::move(msg));
    return false; // one message: max_bundle > 1
  }

  /// The messages held for `dest`, in order; none are held for it after.
  std::vector<caf::message> take(const caf::actor& dest) {
    for (auto i = peers_.begin(); i != peers_.end(); ++i)
      if (i->first == dest) {
        auto out = std::move(i->second);
        peers_.erase(i);
        return out;
      }
    return {};
  }

  /// Every peer's messages, in order per peer; none are held after.
  std::vector<std::pair<caf::actor, std::vector<caf::message>>> take_all() {
    return std::exchange(peers_, {});
  }

  /// Messages held for all peers (a few peers: counted, not kept).
  size_t held() const noexcept {
    size_t n = 0;
    for (auto& e : peers_)
      n += e.second.size();
    return n;
  }

private:
  std::vector<std::pair<caf::actor, std::vector<caf::message>>> peers_;
};

} // namespace kvroom::detail
