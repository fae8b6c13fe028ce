#pragma once

#include <atomic>
#include <cstdint>

#include "caf/stateful_actor.hpp"

namespace kvroom {

namespace detail {

extern std::atomic<uint64_t> handled_messages;

} // namespace detail

/// Messages kvroom's actors (rooms, managers, workers, registry, rank inboxes)
/// have handled in this process. Benchmarks divide it by rooms concluded to
/// report messages per room against CAF's own message rate.
inline uint64_t handled_messages() noexcept {
  return detail::handled_messages.load(std::memory_order_relaxed);
}

/// A stateful actor that counts what it consumes: one relaxed increment per
/// message. kvroom's function-based actors take a `counted_actor<State>*`,
/// which makes CAF spawn this type.
template <class State>
class counted_actor : public caf::stateful_actor<State> {
public:
  using super = caf::stateful_actor<State>;
  using super::super;

  caf::invoke_message_result consume(caf::mailbox_element& x) override {
    detail::handled_messages.fetch_add(1, std::memory_order_relaxed);
    return super::consume(x);
  }
};

} // namespace kvroom
