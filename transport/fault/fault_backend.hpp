#pragma once

#include <functional>
#include <optional>
#include <random>
#include <unordered_map>

#include "kvroom/transport/backend.hpp"
#include "kvroom/transport/fault_plan.hpp"

namespace kvroom::detail {

/// Wraps any backend and fails the batches a `fault_plan` selects, so the
/// real failure machinery runs without broken hardware (Mooncake TENT's
/// fault proxy). Everything else passes through unchanged.
class fault_backend final : public backend {
public:
  fault_backend(backend_ptr inner, fault_plan plan);

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  std::vector<endpoint_desc> endpoints() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  post_result post(const write_batch& batch) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  bool refused(xfer_id id) const override;
  bool injected(xfer_id id) const override;
  std::vector<transport_control> take_control() override;
  caf::error on_control(const transport_control& msg) override;
  void set_notifier(std::function<void()> notify) override;
  bool enforces_grants() const override {
    return inner_->enforces_grants();
  }
  bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges) override {
    return inner_->grant(room, sender, std::move(ranges));
  }
  void revoke(room_id room) override {
    inner_->revoke(room);
  }
  /// A pulling reader's batches meet the plan's faults as a sender's do
  /// (before or after the post, a bad status, a stall, slow), by room and
  /// path; aux and flip faults are a writer's only.
  post_result post_read(const read_batch& batch) override;
  /// Its faults complete on a poll: no read completes inline.
  bool reads_inline(const read_batch&) const override {
    return false;
  }
  bool enforces_read_grants() const override {
    return inner_->enforces_read_grants();
  }
  bool grant_read(room_id room, rank_id reader, std::vector<byte_range> ranges) override {
    return inner_->grant_read(room, reader, std::move(ranges));
  }
  void revoke_read(room_id room) override {
    inner_->revoke_read(room);
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

  backend_ptr inner_;
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
