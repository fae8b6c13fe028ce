#pragma once

#include <functional>
#include <optional>
#include <random>
#include <unordered_map>

#include "kvroom/transport/forwarding_backend.hpp"
#include "kvroom/api/backend.hpp"

namespace kvroom::detail {

/// Wraps any backend and fails the batches a `fault_plan` selects, so the
/// real failure machinery runs without broken hardware (Mooncake TENT's
/// fault proxy). Everything else passes through unchanged.
class fault_backend final : public forwarding_backend {
public:
  fault_backend(backend_ptr inner, fault_plan plan);

  post_result post(const write_batch& batch) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  bool refused(xfer_id id) const override;
  bool injected(xfer_id id) const override;
  /// Its faults complete on a poll: no batch completes inline (the inline
  /// path would pass them by).
  bool completes_inline(const write_batch&) const override {
    return false;
  }
  /// A pulling reader's batches meet the plan's faults as a sender's do
  /// (before or after the post, a bad status, a stall, slow), by room and
  /// path; aux and flip faults are a writer's only.
  post_result post_read(const read_batch& batch) override;
  /// Its faults complete on a poll: no read completes inline.
  bool reads_inline(const read_batch&) const override {
    return false;
  }

private:
  /// True when the plan breaks the path to `peer`.
  bool on_faulty_path(const endpoint_desc& peer) const;
  /// The point at which a batch of room `tag` to `peer` fails, if the plan
  /// selects it.
  std::optional<fault_point> selects(room_id room, const endpoint_desc& peer, bool has_aux);
  /// The fault a selected batch meets: a failed post, or an id of this
  /// backend's whose completion the plan decides (`post_inner` posts it).
  template <class Batch, class Post>
  post_result inject(fault_point point, const Batch& batch, Post post_inner);

  fault_plan plan_;
  std::unordered_map<room_id, fault_point> rooms_;
  std::mt19937_64 rng_;
  /// Batches whose completion this backend turns into a failure (or a
  /// stall); `inner`: the inner backend's batch, when it is in progress.
  /// These and the delayed ones carry ids of this backend's own, with the
  /// top bit set, which inner backends never hand out.
  struct doomed {
    room_id room;
    fault_point point;
    std::optional<xfer_id> inner;
    /// Its injected failure was reported (not one of the inner backend).
    bool fired = false;
  };
  std::unordered_map<xfer_id, doomed> doomed_;
  /// `slow` batches: posted to the inner backend only once `due_ms` passed.
  struct delayed {
    std::function<post_result()> post;
    uint64_t due_ms = 0;
    bool posted = false;
    std::optional<xfer_id> inner;
  };
  std::unordered_map<xfer_id, delayed> delayed_;
  xfer_id next_own_ = xfer_id{1} << 63;
};

} // namespace kvroom::detail
