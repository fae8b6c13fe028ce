#include "kvroom/transport/verbs/wr_plan.hpp"

#include <algorithm>
#include <limits>

#include "kvroom/api/errors.hpp"

namespace kvroom::verbs {

caf::expected<std::vector<wr_plan>> plan_work_requests(const std::vector<write_op>& ops,
                                                       const device_limits& limits,
                                                       const region_of& src_region,
                                                       const region_of& dst_region) {
  auto same = [](const region_of& f, uint64_t x, uint64_t y) {
    return !f || f(x) == f(y);
  };
  if (limits.max_sge == 0 || limits.max_msg_bytes == 0)
    return make_error(errc::invalid_argument,
                      "verbs limits must be positive (max_sge "
                        + std::to_string(limits.max_sge) + ", max_msg_bytes "
                        + std::to_string(limits.max_msg_bytes) + ")");
  // An ibv_sge's length is 32 bits wide.
  const uint64_t piece_max = std::min<uint64_t>(limits.max_msg_bytes,
                                                std::numeric_limits<uint32_t>::max());
  std::vector<wr_plan> out;
  for (auto& op : ops) {
    for (uint64_t done = 0; done < op.size_bytes;) {
      auto len = std::min(piece_max, op.size_bytes - done);
      auto src = op.src_addr + done;
      auto dst = op.dst_addr + done;
      done += len;
      if (!out.empty()) {
        auto& wr = out.back();
        bool dst_follows = wr.remote_addr + wr.bytes == dst
                           && same(dst_region, wr.remote_addr, dst);
        if (dst_follows && wr.bytes + len <= limits.max_msg_bytes) {
          auto& last = wr.sges.back();
          if (last.addr + last.length == src && same(src_region, last.addr, src)
              && uint64_t{last.length} + len <= piece_max) {
            last.length += static_cast<uint32_t>(len);
            wr.bytes += len;
            continue;
          }
          if (wr.sges.size() < limits.max_sge) {
            wr.sges.push_back({src, static_cast<uint32_t>(len)});
            wr.bytes += len;
            continue;
          }
        }
      }
      if (out.size() == max_planned_wrs)
        return make_error(errc::invalid_argument,
                          "batch needs more than " + std::to_string(max_planned_wrs)
                            + " work requests");
      out.push_back(wr_plan{dst, len, {{src, static_cast<uint32_t>(len)}}});
    }
  }
  return out;
}

send_window::send_window(uint32_t depth, uint32_t signal_every)
  : depth_(std::max<uint32_t>(depth, 1)), signal_every_(std::max<uint32_t>(signal_every, 1)) {
  // nop
}

bool send_window::take(bool last_of_batch, uint64_t& seq) {
  seq = ++posted_;
  ++since_signal_;
  bool fills = room() == 0;
  if (last_of_batch || fills || since_signal_ >= signal_every_) {
    since_signal_ = 0;
    return true;
  }
  return false;
}

void send_window::completed(uint64_t seq) noexcept {
  if (seq > completed_ && seq <= posted_)
    completed_ = seq;
}

void send_window::reset() noexcept {
  completed_ = posted_;
  since_signal_ = 0;
}

caf::expected<std::vector<wr_plan>> plan_read_requests(const std::vector<read_op>& ops,
                                                       const device_limits& limits,
                                                       const region_of& local_region,
                                                       const region_of& remote_region) {
  return plan_work_requests(as_write_shape(ops), limits, local_region, remote_region);
}

std::vector<write_op> as_write_shape(const std::vector<read_op>& ops) {
  // A READ scatters one remote range into local entries: the planner's
  // "source" is the local side, its "destination" the remote one.
  std::vector<write_op> out;
  out.reserve(ops.size());
  for (auto& op : ops)
    out.push_back(write_op{op.local_addr, op.remote_addr, op.size_bytes});
  return out;
}

} // namespace kvroom::verbs
