#pragma once

#include <vector>

#include "kvroom/api/backend.hpp"

namespace kvroom::detail {

/// Several backends behind one: memory is registered with each, a batch goes
/// to the backend named by its peer endpoint, and every endpoint is offered
/// so a peer can pick the nearest (see choose_endpoint).
class router_backend final : public backend {
public:
  /// `optional[i]` marks a part that drops out, instead of failing the
  /// registration, when it cannot register some memory (shm: memory that is
  /// not in a shared segment).
  router_backend(std::vector<backend_ptr> parts, std::vector<bool> optional);

  std::string name() const override;
  backend_caps caps() const override;
  endpoint_desc endpoint() const override;
  std::vector<endpoint_desc> endpoints() const override;
  caf::expected<region_id> register_memory(const mem_desc& mem) override;
  caf::error deregister_memory(region_id id) override;
  post_result post(const write_batch& batch) override;
  std::vector<post_result> post_group(const std::vector<const write_batch*>& batches) override;
  xfer_status poll(xfer_id id, std::string& reason) override;
  void release(xfer_id id) override;
  bool refused(xfer_id id) const override;
  bool injected(xfer_id id) const override;
  bool completes_inline(const write_batch& batch) const override;
  bool enforces_grants() const override {
    for (auto& p : parts_)
      if (p->enforces_grants())
        return true;
    return false;
  }
  bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges) override {
    bool ok = true;
    for (auto& p : parts_)
      if (p->enforces_grants())
        ok = p->grant(room, sender, ranges) && ok;
    return ok;
  }
  void revoke(room_id room) override {
    for (auto& p : parts_)
      if (p->enforces_grants())
        p->revoke(room);
  }
  /// A pull goes to the part that reaches the peer, as a batch does.
  post_result post_read(const read_batch& batch) override;
  bool reads_inline(const read_batch& batch) const override;
  bool enforces_read_grants() const override {
    for (auto& p : parts_)
      if (p->enforces_read_grants())
        return true;
    return false;
  }
  bool grant_read(room_id room, rank_id reader, std::vector<byte_range> ranges) override {
    bool ok = true;
    for (auto& p : parts_)
      if (p->enforces_read_grants())
        ok = p->grant_read(room, reader, ranges) && ok;
    return ok;
  }
  void revoke_read(room_id room) override {
    for (auto& p : parts_)
      if (p->enforces_read_grants())
        p->revoke_read(room);
  }
  std::vector<transport_control> take_control() override;
  caf::error on_control(const transport_control& msg) override;
  void set_notifier(std::function<void()> notify) override;

private:
  /// The part that reaches endpoint `peer` (its transport's part, or with
  /// several of one transport the one for that endpoint), or the number of
  /// parts when none does.
  size_t part_index(const endpoint_desc& peer) const;
  /// `res` of part `part`, its id (in progress) naming the part.
  static post_result tagged(size_t part, post_result res);
  /// The part that reaches the batch's peer, or null.
  const backend* part_for(const write_batch& batch) const;
  // Ids carry the part's index in their top byte.
  static constexpr int shift = 56;

  std::vector<backend_ptr> parts_;
  std::vector<bool> optional_;
  std::vector<bool> disabled_;
  std::vector<std::vector<region_id>> regions_;
};

} // namespace kvroom::detail
