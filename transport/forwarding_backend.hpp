#pragma once

#include <utility>

#include "kvroom/api/backend.hpp"

namespace kvroom {

/// A backend that wraps another and passes every call through: the base of
/// the decorators (the fault injector, the path layer), which override only
/// what they change. A call added to `backend` forwards here once, so no
/// decorator silently answers it with the base's default instead of its
/// inner backend's (`post_group` aside: see below).
class forwarding_backend : public backend {
public:
  explicit forwarding_backend(backend_ptr inner) : inner_(std::move(inner)) {
    // nop
  }

  std::string name() const override {
    return inner_->name();
  }
  backend_caps caps() const override {
    return inner_->caps();
  }
  endpoint_desc endpoint() const override {
    return inner_->endpoint();
  }
  std::vector<endpoint_desc> endpoints() const override {
    return inner_->endpoints();
  }
  caf::expected<region_id> register_memory(const mem_desc& mem) override {
    return inner_->register_memory(mem);
  }
  caf::error deregister_memory(region_id id) override {
    return inner_->deregister_memory(id);
  }
  post_result post(const write_batch& batch) override {
    return inner_->post(batch);
  }
  // `post_group` is the one call not passed through: its default posts
  // each batch with this decorator's `post`, so a decorator that changes
  // `post` (injects faults, counts, picks paths) sees every batch of a
  // group. One whose `post` passes a batch straight through may forward
  // the group (the path layer on one path does).
  post_result post_read(const read_batch& batch) override {
    return inner_->post_read(batch);
  }
  bool reads_inline(const read_batch& batch) const override {
    return inner_->reads_inline(batch);
  }
  xfer_status poll(xfer_id id, std::string& reason) override {
    return inner_->poll(id, reason);
  }
  bool injected(xfer_id id) const override {
    return inner_->injected(id);
  }
  void release(xfer_id id) override {
    inner_->release(id);
  }
  bool refused(xfer_id id) const override {
    return inner_->refused(id);
  }
  bool completes_inline(const write_batch& batch) const override {
    return inner_->completes_inline(batch);
  }
  std::vector<transport_control> take_control() override {
    return inner_->take_control();
  }
  caf::error on_control(const transport_control& msg) override {
    return inner_->on_control(msg);
  }
  void set_notifier(std::function<void()> notify) override {
    inner_->set_notifier(std::move(notify));
  }
  bool enforces_grants() const override {
    return inner_->enforces_grants();
  }
  bool grant(room_id room, rank_id sender, std::vector<byte_range> ranges) override {
    return inner_->grant(room, sender, std::move(ranges));
  }
  void revoke(room_id room) override {
    inner_->revoke(room);
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

protected:
  backend_ptr inner_;
};

} // namespace kvroom
