#pragma once

// How the kv_manager actor sends to other ranks: every control message to
// another rank's manager goes through `send_ctrl`, which a rank's control
// chaos (stress runs only) may delay. Part of the kv_manager actor; not an
// API.

#include <random>
#include <utility>

#include "caf/event_based_actor.hpp"

#include "kvroom/actors/manager/kv_manager.hpp"

namespace kvroom::detail {

using manager_ptr = counted_actor<kv_manager_state>*;

inline const rank_ref& me(manager_ptr self) {
  return self->state.self_entry->rank;
}

/// Sends a control message to another rank's manager, delayed when the
/// rank's control chaos says so.
template <class T>
void send_ctrl(manager_ptr self, const caf::actor& dest, T&& msg) {
  auto& st = self->state;
  if (st.chaos.delay_probability > 0.0 && st.chaos.max_delay_ms > 0) {
    std::uniform_real_distribution<double> coin{0.0, 1.0};
    if (coin(st.chaos_rng) < st.chaos.delay_probability) {
      std::uniform_int_distribution<uint32_t> ms{1, st.chaos.max_delay_ms};
      self->delayed_send(dest, std::chrono::milliseconds(ms(st.chaos_rng)),
                         std::forward<T>(msg));
      return;
    }
  }
  self->send(dest, std::forward<T>(msg));
}

/// Sends `msg` to rank `id`'s manager, when the directory knows it.
template <class T>
void send_to_rank(manager_ptr self, rank_id id, T&& msg) {
  if (auto peer = self->state.peers->find(id))
    send_ctrl(self, peer->manager, std::forward<T>(msg));
}

} // namespace kvroom::detail
