#include "kvroom/transport/transfer_plan.hpp"

#include <string>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/grants.hpp"

namespace kvroom {

namespace {

caf::error check_layouts(const std::vector<paged_buffer>& src,
                         const std::vector<paged_buffer>& dst,
                         const char* what) {
  if (src.size() != dst.size())
    return make_error(errc::invalid_argument,
                      std::string{what} + " layout mismatch: sender has "
                        + std::to_string(src.size()) + " buffers, receiver "
                        + std::to_string(dst.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i].page_size_bytes == 0
        || src[i].page_size_bytes != dst[i].page_size_bytes)
      return make_error(errc::invalid_argument,
                        std::string{what} + " buffer " + std::to_string(i)
                          + " page size mismatch: sender "
                          + std::to_string(src[i].page_size_bytes)
                          + " bytes, receiver "
                          + std::to_string(dst[i].page_size_bytes));
  }
  return caf::none;
}

caf::error check_index(int64_t index, uint64_t num_pages, const char* side,
                       const char* what, size_t buffer) {
  if (index >= 0 && static_cast<uint64_t>(index) < num_pages)
    return caf::none;
  return make_error(errc::out_of_range,
                    std::string{side} + " " + what + " index "
                      + std::to_string(index) + " out of range [0, "
                      + std::to_string(num_pages) + ") in buffer "
                      + std::to_string(buffer));
}

} // namespace

caf::expected<std::vector<write_op>>
plan_writes(const memory_layout& src, const memory_layout& dst,
            const std::vector<int64_t>& src_pages,
            const std::vector<int64_t>& dst_pages) {
  if (src_pages.size() != dst_pages.size())
    return make_error(errc::invalid_argument,
                      "chunk has " + std::to_string(src_pages.size())
                        + " source pages but " + std::to_string(dst_pages.size())
                        + " destination pages");
  if (auto err = check_layouts(src.kv, dst.kv, "kv"))
    return err;
  // Validate every index of every buffer before planning anything, so a bad
  // chunk produces no writes at all.
  for (size_t b = 0; b < src.kv.size(); ++b) {
    auto src_n = src.kv[b].num_pages();
    auto dst_n = dst.kv[b].num_pages();
    for (size_t i = 0; i < src_pages.size(); ++i) {
      if (auto err = check_index(src_pages[i], src_n, "source", "page", b))
        return err;
      if (auto err = check_index(dst_pages[i], dst_n, "destination", "page", b))
        return err;
    }
  }
  std::vector<write_op> ops;
  if (src_pages.empty())
    return ops;
  for (size_t b = 0; b < src.kv.size(); ++b) {
    auto page = src.kv[b].page_size_bytes;
    auto src_base = src.kv[b].mem.addr;
    auto dst_base = dst.kv[b].mem.addr;
    size_t run_start = 0;
    for (size_t i = 1; i <= src_pages.size(); ++i) {
      bool extends = i < src_pages.size()
                     && src_pages[i] == src_pages[i - 1] + 1
                     && dst_pages[i] == dst_pages[i - 1] + 1;
      if (extends)
        continue;
      auto len = static_cast<uint64_t>(i - run_start);
      ops.push_back(write_op{
        src_base + static_cast<uint64_t>(src_pages[run_start]) * page,
        dst_base + static_cast<uint64_t>(dst_pages[run_start]) * page,
        len * page});
      if (ops.size() > max_planned_writes)
        return make_error(errc::limit_reached,
                          "chunk needs more than "
                            + std::to_string(max_planned_writes) + " writes");
      run_start = i;
    }
  }
  return ops;
}

caf::expected<std::vector<write_op>>
plan_aux_writes(const memory_layout& src, const memory_layout& dst,
                int64_t src_index, int64_t dst_index) {
  if (auto err = check_layouts(src.aux, dst.aux, "aux"))
    return err;
  for (size_t b = 0; b < src.aux.size(); ++b) {
    if (auto err = check_index(src_index, src.aux[b].num_pages(), "source",
                               "aux", b))
      return err;
    if (auto err = check_index(dst_index, dst.aux[b].num_pages(),
                               "destination", "aux", b))
      return err;
  }
  std::vector<write_op> ops;
  ops.reserve(src.aux.size());
  for (size_t b = 0; b < src.aux.size(); ++b) {
    auto item = src.aux[b].page_size_bytes;
    ops.push_back(
      write_op{src.aux[b].mem.addr + static_cast<uint64_t>(src_index) * item,
               dst.aux[b].mem.addr + static_cast<uint64_t>(dst_index) * item,
               item});
  }
  return ops;
}

caf::expected<std::vector<write_op>>
plan_state_writes(const memory_layout& src, const memory_layout& dst,
                  const std::vector<int64_t>& src_indices,
                  const std::vector<int64_t>& dst_indices) {
  if (auto err = check_layouts(src.state, dst.state, "state"))
    return err;
  if (src_indices.size() != dst_indices.size())
    return make_error(errc::invalid_argument,
                      "prefill sent " + std::to_string(src_indices.size())
                        + " state indices, decode allocated " + std::to_string(dst_indices.size()));
  for (size_t b = 0; b < src.state.size(); ++b)
    for (size_t i = 0; i < src_indices.size(); ++i) {
      if (auto err = check_index(src_indices[i], src.state[b].num_pages(), "source", "state", b))
        return err;
      if (auto err = check_index(dst_indices[i], dst.state[b].num_pages(), "destination",
                                 "state", b))
        return err;
    }
  std::vector<write_op> ops;
  ops.reserve(src.state.size() * src_indices.size());
  for (size_t b = 0; b < src.state.size(); ++b) {
    auto item = src.state[b].page_size_bytes;
    for (size_t i = 0; i < src_indices.size(); ++i) {
      write_op op{src.state[b].mem.addr + static_cast<uint64_t>(src_indices[i]) * item,
                  dst.state[b].mem.addr + static_cast<uint64_t>(dst_indices[i]) * item, item};
      // Consecutive window pages on both sides are one write.
      if (!ops.empty() && ops.back().src_addr + ops.back().size_bytes == op.src_addr
          && ops.back().dst_addr + ops.back().size_bytes == op.dst_addr)
        ops.back().size_bytes += item;
      else
        ops.push_back(op);
    }
  }
  return ops;
}

std::string check_state_indices(const memory_layout& x, const std::vector<int64_t>& indices) {
  if (x.state.empty())
    return indices.empty() ? std::string{}
                           : std::to_string(indices.size())
                               + " state indices for a rank that registered no state buffers";
  if (indices.empty())
    return "no state indices for a rank with " + std::to_string(x.state.size())
           + " state buffers (hybrid models hand the request's state slots or window pages)";
  if (indices.size() > max_planned_writes)
    return std::to_string(indices.size()) + " state indices";
  for (size_t b = 0; b < x.state.size(); ++b)
    for (auto idx : indices)
      if (auto err = check_index(idx, x.state[b].num_pages(), "the", "state", b))
        return describe(err);
  return {};
}

std::vector<byte_range> room_grant(const memory_layout& dst, const std::vector<int64_t>& kv_indices,
                                   int64_t aux_index, const std::vector<int64_t>& state_indices) {
  std::vector<byte_range> out;
  out.reserve(dst.kv.size() * kv_indices.size() + dst.aux.size()
              + dst.state.size() * state_indices.size());
  for (auto& b : dst.state)
    for (auto idx : state_indices)
      if (idx >= 0 && static_cast<uint64_t>(idx) < b.num_pages())
        out.push_back(byte_range{b.mem.addr + static_cast<uint64_t>(idx) * b.page_size_bytes,
                                 b.page_size_bytes});
  for (auto& b : dst.kv)
    for (auto idx : kv_indices)
      if (idx >= 0 && static_cast<uint64_t>(idx) < b.num_pages())
        out.push_back(byte_range{b.mem.addr + static_cast<uint64_t>(idx) * b.page_size_bytes,
                                 b.page_size_bytes});
  for (auto& b : dst.aux)
    if (aux_index >= 0 && static_cast<uint64_t>(aux_index) < b.num_pages())
      out.push_back(byte_range{b.mem.addr + static_cast<uint64_t>(aux_index) * b.page_size_bytes,
                               b.page_size_bytes});
  return merge_ranges(std::move(out));
}

} // namespace kvroom
