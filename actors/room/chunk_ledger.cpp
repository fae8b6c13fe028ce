#include "kvroom/actors/room/chunk_ledger.hpp"

#include <algorithm>

namespace kvroom {

chunk_ledger::chunk_ledger(size_t buffers, uint64_t declared)
  : declared_(declared), buffers_(std::max<size_t>(buffers, 1)) {
  // nop
}

uint64_t chunk_ledger::complete_pages() const noexcept {
  if (received_.empty())
    return uniform_;
  return *std::min_element(received_.begin(), received_.end());
}

chunk_ledger::admitted chunk_ledger::admit(uint64_t pages, const std::vector<int32_t>& buffers,
                                           bool is_last) {
  admitted out;
  auto n = buffers_;
  if (buffers.empty() && received_.empty()) {
    // Every buffer at once, as every chunk so far (the common case: no
    // allocation, one counter).
    out.offset = uniform_;
    if (out.offset + pages > declared_) {
      out.error = "too many KV indices: " + std::to_string(out.offset + pages) + " sent, "
                  + std::to_string(declared_) + " declared by init";
      return out;
    }
    if (is_last && out.offset + pages != declared_) {
      out.error = "last chunk leaves " + std::to_string(declared_ - out.offset - pages) + " of "
                  + std::to_string(declared_) + " declared pages unsent";
      return out;
    }
    uniform_ += pages;
    return out;
  }
  // From here on each buffer counts for itself (nothing changes if this
  // chunk is refused: the counts start where the uniform one stood).
  if (received_.empty())
    received_.assign(n, uniform_);
  std::vector<size_t> mine;
  if (buffers.empty()) {
    for (size_t b = 0; b < n; ++b)
      mine.push_back(b);
  } else {
    std::vector<bool> seen(n, false);
    for (auto b : buffers) {
      if (b < 0 || static_cast<size_t>(b) >= n) {
        out.error = "KV buffer " + std::to_string(b) + " out of range [0, " + std::to_string(n)
                    + ")";
        return out;
      }
      if (seen[static_cast<size_t>(b)]) {
        out.error = "KV buffer " + std::to_string(b) + " named twice in one chunk";
        return out;
      }
      seen[static_cast<size_t>(b)] = true;
      mine.push_back(static_cast<size_t>(b));
    }
  }
  auto where = [&](size_t b) {
    return buffers.empty() ? std::string{} : " of KV buffer " + std::to_string(b);
  };
  out.offset = received_[mine.front()];
  for (auto b : mine) {
    if (received_[b] != out.offset) {
      out.error = "a chunk's KV buffers stand at different pages (buffer "
                  + std::to_string(mine.front()) + " at " + std::to_string(out.offset)
                  + ", buffer " + std::to_string(b) + " at " + std::to_string(received_[b]) + ")";
      return out;
    }
  }
  if (out.offset + pages > declared_) {
    out.error = "too many KV indices" + where(mine.front()) + ": "
                + std::to_string(out.offset + pages) + " sent, " + std::to_string(declared_)
                + " declared by init";
    return out;
  }
  if (is_last) {
    for (size_t b = 0; b < n; ++b) {
      auto after = received_[b]
                   + (std::find(mine.begin(), mine.end(), b) != mine.end() ? pages : 0);
      if (after != declared_) {
        out.error = "last chunk leaves " + std::to_string(declared_ - after) + " of "
                    + std::to_string(declared_) + " declared pages"
                    + where(b) + " unsent";
        return out;
      }
    }
  }
  for (auto b : mine)
    received_[b] += pages;
  return out;
}

} // namespace kvroom
