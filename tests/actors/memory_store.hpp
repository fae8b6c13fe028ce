#pragma once

// A directory store in memory: the second implementation of store_client
// (directory/store_client.hpp) beside etcd's, so the directory core is
// tested without etcd and with nothing of etcd's in it. One `memory_store`
// is the store (several processes' directories may share it, as they share
// an etcd cluster); `connector()` makes its clients. Leases expire only when
// a test says so (`expire`): time plays no part.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kvroom/actors/control/directory/store_client.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::test {

class memory_store : public std::enable_shared_from_this<memory_store> {
public:
  store_connector connector();

  /// The lease is gone (its process died and its TTL passed): its keys go
  /// with it, each a deletion the watches see.
  void expire(int64_t lease) {
    std::lock_guard<std::mutex> guard{mtx_};
    leases_.erase(lease);
    for (auto i = kvs_.begin(); i != kvs_.end();)
      if (i->second.lease == lease)
        i = erase_locked(i);
      else
        ++i;
  }

  /// Writes a key as any client of the store may (a stranger without the
  /// deployment's secret, a tool).
  void put(const std::string& key, const std::string& value, int64_t lease = 0) {
    std::lock_guard<std::mutex> guard{mtx_};
    put_locked(key, value, lease);
  }

  /// Prefix reads so far (a registration's admission begins with one).
  uint64_t reads() {
    std::lock_guard<std::mutex> guard{mtx_};
    return reads_;
  }

  /// The leases alive now.
  std::vector<int64_t> leases() {
    std::lock_guard<std::mutex> guard{mtx_};
    std::vector<int64_t> out;
    for (auto& kvp : leases_)
      out.push_back(kvp.first);
    return out;
  }

private:
  friend class memory_client;

  using table = std::map<std::string, store_kv>;

  void put_locked(const std::string& key, const std::string& value, int64_t lease) {
    store_event ev;
    auto i = kvs_.find(key);
    if (i != kvs_.end())
      ev.prev = i->second;
    auto& kv = kvs_[key];
    kv.key = key;
    kv.value = value;
    kv.lease = lease;
    kv.mod_revision = ++revision_;
    if (!ev.prev)
      kv.create_revision = kv.mod_revision;
    ev.kv = kv;
    history_.push_back(std::move(ev));
    cv_.notify_all();
  }

  table::iterator erase_locked(table::iterator i) {
    store_event ev;
    ev.deleted = true;
    ev.prev = i->second;
    ev.kv.key = i->first;
    ev.kv.mod_revision = ++revision_;
    history_.push_back(std::move(ev));
    cv_.notify_all();
    return kvs_.erase(i);
  }

  std::mutex mtx_;
  std::condition_variable cv_;
  table kvs_;
  int64_t revision_ = 1;
  /// Every change, in order: event i has revision history_[i].kv.mod_revision.
  std::vector<store_event> history_;
  std::map<int64_t, int64_t> leases_; ///< id -> TTL in seconds
  int64_t next_lease_ = 0x100;
  uint64_t reads_ = 0;
};

class memory_client final : public store_client {
public:
  explicit memory_client(std::shared_ptr<memory_store> store) : store_(std::move(store)) {
    // nop
  }

  caf::expected<int64_t> grant(int64_t ttl_s) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    auto id = store_->next_lease_++;
    store_->leases_[id] = ttl_s;
    return id;
  }

  caf::expected<int64_t> keep_alive(int64_t lease, uint32_t) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    auto i = store_->leases_.find(lease);
    return i == store_->leases_.end() ? int64_t{0} : i->second;
  }

  caf::expected<int64_t> time_to_live(int64_t lease, uint32_t) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    auto i = store_->leases_.find(lease);
    return i == store_->leases_.end() ? int64_t{-1} : i->second;
  }

  caf::error revoke(int64_t lease) override {
    store_->expire(lease);
    return caf::none;
  }

  caf::expected<store_snapshot> range_prefix(const std::string& prefix) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    ++store_->reads_;
    store_snapshot out;
    for (auto& kvp : store_->kvs_)
      if (kvp.first.compare(0, prefix.size(), prefix) == 0)
        out.kvs.push_back(kvp.second);
    out.revision = store_->revision_;
    return out;
  }

  caf::expected<bool> put_if_unchanged(const std::string& prefix, int64_t revision,
                                       const std::string& key, const std::string& value,
                                       int64_t lease) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    for (auto& ev : store_->history_)
      if (ev.kv.mod_revision > revision && ev.kv.key.compare(0, prefix.size(), prefix) == 0)
        return false;
    if (lease != 0 && store_->leases_.count(lease) == 0)
      return make_error(errc::invalid_argument, "lease not found");
    store_->put_locked(key, value, lease);
    return true;
  }

  caf::error delete_if_lease(const std::string& key, int64_t lease) override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    auto i = store_->kvs_.find(key);
    if (i != store_->kvs_.end() && i->second.lease == lease)
      store_->erase_locked(i);
    return caf::none;
  }

  caf::expected<int64_t>
  watch(const std::string& prefix, int64_t start_revision, uint32_t idle_ms,
        const std::function<void(std::vector<store_event>&)>& on_events) override {
    std::unique_lock<std::mutex> guard{store_->mtx_};
    auto next = start_revision;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(idle_ms);
    while (!cancelled_) {
      std::vector<store_event> batch;
      for (auto& ev : store_->history_)
        if (ev.kv.mod_revision >= next && ev.kv.key.compare(0, prefix.size(), prefix) == 0)
          batch.push_back(ev);
      next = store_->revision_ + 1;
      if (!batch.empty()) {
        guard.unlock();
        on_events(batch);
        guard.lock();
        continue;
      }
      if (store_->cv_.wait_until(guard, until) == std::cv_status::timeout)
        return next;
    }
    return make_error(errc::unavailable, "watch cancelled");
  }

  void cancel() override {
    std::lock_guard<std::mutex> guard{store_->mtx_};
    cancelled_ = true;
    store_->cv_.notify_all();
  }

  const std::string& current_endpoint() const override {
    return where_;
  }

private:
  std::shared_ptr<memory_store> store_;
  bool cancelled_ = false; ///< guarded by the store's mutex
  std::string where_ = "memory";
};

inline store_connector memory_store::connector() {
  auto self = shared_from_this();
  return [self](uint32_t) -> std::unique_ptr<store_client> {
    return std::make_unique<memory_client>(self);
  };
}

} // namespace kvroom::test
