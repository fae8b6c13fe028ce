#pragma once

#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "caf/actor_addr.hpp"
#include "caf/node_id.hpp"

#include "kvroom/api/ids.hpp"
#include "kvroom/api/secret.hpp"

namespace kvroom {

/// The proofs of kvroom's two membership handshakes, as one plain class.
/// Each proof binds a label, the nonces of both sides (so no answer can be
/// replayed) and the identities in a fixed order (so no answer can be
/// reflected back at its sender).
///
/// Registration: rank -> `registry_hello{nR}`; registry ->
/// `registry_challenge{nG, registry_proof(nR, nG)}`; rank ->
/// `register_rank{entry, nR, rank_proof(nG, nR, id, incarnation)}`.
///
/// Direct link, A joins B: `link_hello{A, incarnation, nA}`; `link_reply{B, nB,
/// accept_proof(nA, nB, B, A)}` (A trusts B); `link_finish{A,
/// join_proof(nB, nA, A, incarnation, B)}` (B trusts A); `link_ack{B}`. A hands B to its
/// rooms only after the ack, B only after the finish, so no room message
/// reaches a side that does not trust its sender yet.
class membership {
public:
  membership() = default;

  explicit membership(deployment_secret secret) : secret_(std::move(secret)) {
    // nop
  }

  bool insecure() const noexcept {
    return secret_.insecure();
  }

  mac_tag registry_proof(const nonce& rank_nonce, const nonce& registry_nonce) const {
    return secret_.mac("kvroom/registry/v1", rank_nonce, registry_nonce);
  }

  mac_tag rank_proof(const nonce& registry_nonce, const nonce& rank_nonce, rank_id id,
                     uint64_t incarnation) const {
    return secret_.mac("kvroom/register/v1", registry_nonce, rank_nonce, id, incarnation);
  }

  mac_tag accept_proof(const nonce& joiner_nonce, const nonce& acceptor_nonce,
                       rank_id acceptor, rank_id joiner) const {
    return secret_.mac("kvroom/link-accept/v1", joiner_nonce, acceptor_nonce, acceptor,
                       joiner);
  }

  mac_tag join_proof(const nonce& acceptor_nonce, const nonce& joiner_nonce, rank_id joiner,
                     uint64_t joiner_incarnation, rank_id acceptor) const {
    return secret_.mac("kvroom/link-join/v1", acceptor_nonce, joiner_nonce, joiner,
                       joiner_incarnation, acceptor);
  }

  /// A rank's entry in an external directory (etcd): its key, the lease it
  /// lives on (so a copy cannot outlive the rank) and its bytes.
  mac_tag directory_proof(const std::string& key, int64_t lease, const std::string& entry) const {
    return secret_.mac("kvroom/directory/v1", key, lease, entry);
  }

  static bool matches(const mac_tag& got, const mac_tag& want) noexcept {
    return deployment_secret::equal(got, want);
  }

  const deployment_secret& secret() const noexcept {
    return secret_;
  }

private:
  deployment_secret secret_;
};

/// Handshakes in progress, each until its deadline, at most `capacity` at
/// once: what a stranger can make us hold by starting handshakes it never
/// finishes.
template <class Key, class Value>
class pending_table {
public:
  pending_table(size_t capacity, uint64_t ttl_ms) : capacity_(capacity), ttl_ms_(ttl_ms) {
    // nop
  }

  /// False when full (after dropping what expired).
  bool put(const Key& k, Value v, uint64_t now_ms) {
    if (xs_.count(k) == 0 && xs_.size() >= capacity_) {
      expire(now_ms);
      if (xs_.size() >= capacity_)
        return false;
    }
    xs_[k] = item{std::move(v), now_ms + ttl_ms_};
    return true;
  }

  /// Removes and returns the entry of `k` unless it expired.
  std::optional<Value> take(const Key& k, uint64_t now_ms) {
    auto i = xs_.find(k);
    if (i == xs_.end())
      return std::nullopt;
    auto out = std::move(i->second);
    xs_.erase(i);
    if (now_ms > out.deadline_ms)
      return std::nullopt;
    return std::move(out.value);
  }

  Value* find(const Key& k) {
    auto i = xs_.find(k);
    return i == xs_.end() ? nullptr : &i->second.value;
  }

  void expire(uint64_t now_ms) {
    for (auto i = xs_.begin(); i != xs_.end();)
      i = now_ms > i->second.deadline_ms ? xs_.erase(i) : std::next(i);
  }

  size_t size() const noexcept {
    return xs_.size();
  }

private:
  struct item {
    Value value;
    uint64_t deadline_ms = 0;
  };
  size_t capacity_;
  uint64_t ttl_ms_;
  std::unordered_map<Key, item> xs_;
};

/// The nodes (processes) whose ranks proved membership to this rank. Only
/// the rank's control actor writes it (rarely: once per peer process); the
/// manager and the rooms read it on every message from another node. Copy
/// on write: a reader takes the current immutable set, a write publishes a
/// new one, so neither side waits for the other and the control actor stays
/// the table's one owner.
/// Messages from this process need no lookup.
class trust_table {
public:
  using node_set = std::unordered_set<caf::node_id>;

  trust_table() : nodes_(std::make_shared<const node_set>()) {
    // nop
  }

  /// The control actor only.
  void add(const caf::node_id& node) {
    auto cur = std::atomic_load(&nodes_);
    if (cur->count(node) > 0)
      return;
    auto next = std::make_shared<node_set>(*cur);
    next->insert(node);
    std::atomic_store(&nodes_, std::shared_ptr<const node_set>{std::move(next)});
  }

  /// The control actor only.
  void remove(const caf::node_id& node) {
    auto cur = std::atomic_load(&nodes_);
    if (cur->count(node) == 0)
      return;
    auto next = std::make_shared<node_set>(*cur);
    next->erase(node);
    std::atomic_store(&nodes_, std::shared_ptr<const node_set>{std::move(next)});
  }

  bool contains(const caf::node_id& node) const {
    return std::atomic_load(&nodes_)->count(node) > 0;
  }

private:
  std::shared_ptr<const node_set> nodes_;
};

} // namespace kvroom
