#include "kvroom/actors/room/landing_ledger.hpp"

#include <algorithm>
#include <numeric>

namespace kvroom {

buffer_bytes bytes_per_buffer(const std::vector<paged_buffer>& kv,
                              const std::vector<write_op>& ops) {
  // Buffers by address: each op finds its buffer in log(buffers).
  std::vector<size_t> order(kv.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return kv[a].mem.addr < kv[b].mem.addr; });
  std::vector<uint64_t> sums(kv.size(), 0);
  for (auto& op : ops) {
    auto at = op.dst_addr;
    auto end = op.dst_addr + op.size_bytes;
    if (end < at)
      continue; // wraps: no buffer holds it
    while (at < end) {
      // The last buffer starting at or before `at`.
      auto i = std::upper_bound(order.begin(), order.end(), at,
                                [&](uint64_t a, size_t b) { return a < kv[b].mem.addr; });
      if (i == order.begin())
        break;
      auto& mem = kv[*(i - 1)].mem;
      auto mem_end = mem.addr + mem.size_bytes;
      if (at >= mem_end)
        break; // between buffers
      auto upto = std::min(end, mem_end);
      sums[*(i - 1)] += upto - at;
      at = upto;
    }
  }
  buffer_bytes out;
  for (size_t b = 0; b < sums.size(); ++b)
    if (sums[b] > 0) {
      out.buffers.push_back(static_cast<int32_t>(b));
      out.bytes.push_back(sums[b]);
    }
  return out;
}

landing_ledger::landing_ledger(std::vector<uint64_t> expected)
  : expected_(std::move(expected)), got_(expected_.size(), 0), done_(expected_.size(), false) {
  // nop
}

void landing_ledger::mark(size_t b, std::vector<int32_t>& newly) {
  if (done_[b])
    return;
  done_[b] = true;
  newly.push_back(static_cast<int32_t>(b));
}

void landing_ledger::add(const buffer_bytes& landed, std::vector<int32_t>& newly) {
  auto n = std::min(landed.buffers.size(), landed.bytes.size());
  for (size_t i = 0; i < n; ++i) {
    auto b = landed.buffers[i];
    if (b < 0 || static_cast<size_t>(b) >= expected_.size())
      continue;
    auto& got = got_[static_cast<size_t>(b)];
    got += landed.bytes[i];
    if (got >= expected_[static_cast<size_t>(b)])
      mark(static_cast<size_t>(b), newly);
  }
}

void landing_ledger::all(std::vector<int32_t>& newly) {
  for (size_t b = 0; b < expected_.size(); ++b)
    mark(b, newly);
}

bool landing_ledger::landed(int32_t buffer) const noexcept {
  return buffer >= 0 && static_cast<size_t>(buffer) < done_.size()
         && done_[static_cast<size_t>(buffer)];
}

} // namespace kvroom
