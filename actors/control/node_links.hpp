#pragma once

#include <mutex>
#include <unordered_map>

#include "caf/node_id.hpp"

namespace kvroom {

/// How many links this process's ranks hold to each peer process: one CAF
/// connection carries them all, so it may close only when the last one
/// went. Shared by the process's managers (each writes its own links).
class node_links {
public:
  void add(const caf::node_id& node) {
    std::lock_guard<std::mutex> guard{mtx_};
    ++counts_[node];
  }

  /// True when that was the last link to `node`.
  bool remove(const caf::node_id& node) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = counts_.find(node);
    if (i == counts_.end())
      return false;
    if (--i->second > 0)
      return false;
    counts_.erase(i);
    return true;
  }

  size_t count(const caf::node_id& node) const {
    std::lock_guard<std::mutex> guard{mtx_};
    auto i = counts_.find(node);
    return i == counts_.end() ? 0 : i->second;
  }

private:
  mutable std::mutex mtx_;
  std::unordered_map<caf::node_id, size_t> counts_;
};

} // namespace kvroom
