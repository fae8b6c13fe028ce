#pragma once

#include <atomic>
#include <cstdint>

#include "caf/mailbox_element.hpp"
#include "caf/stateful_actor.hpp"

#include "kvroom/actors/quiet_clock.hpp"

namespace kvroom {

namespace detail {

extern std::atomic<uint64_t> handled_messages;

/// True for an exit message not sent from this process by the actor it
/// names, or a down message not sent by the actor it names. CAF delivers
/// both from any node that reached our middleman, with any source address
/// and no sender at all, and `exit_reason::kill` ends an actor before any
/// handler can look at it. Every genuine one comes from its source: a
/// monitor fires with the dead actor (or its proxy) as sender, and kvroom
/// stops its actors from their own process, as an actor (`send_exit`).
/// Logs (at most once a second) and counts what it refuses.
bool forged_system_message(const caf::mailbox_element& x, const caf::abstract_actor& receiver);

} // namespace detail

/// Messages kvroom's actors (rooms, managers, workers, registry, rank inboxes)
/// have handled in this process. Benchmarks divide it by rooms concluded to
/// report messages per room against CAF's own message rate.
inline uint64_t handled_messages() noexcept {
  return detail::handled_messages.load(std::memory_order_relaxed);
}

/// A stateful actor that counts what it consumes: one relaxed increment per
/// message. kvroom's function-based actors take a `counted_actor<State>*`,
/// which makes CAF spawn this type. Its clock mark spares its end a
/// wake-up of the clock thread unless it set a timeout (quiet_clock.hpp).
template <class State>
class counted_actor : public caf::stateful_actor<State>, public detail::clock_mark {
public:
  using super = caf::stateful_actor<State>;
  using super::super;

  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr && detail::forged_system_message(*ptr, *this))
      return;
    super::enqueue(std::move(ptr), eu);
  }

  caf::invoke_message_result consume(caf::mailbox_element& x) override {
    detail::handled_messages.fetch_add(1, std::memory_order_relaxed);
    return super::consume(x);
  }
};

} // namespace kvroom
