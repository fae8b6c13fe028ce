#pragma once

// How the kv_manager actor sends to other ranks: every control message to
// another rank's manager goes through `send_ctrl`, which a rank's control
// chaos (stress runs only) may delay. Part of the kv_manager actor; not an
// API.

#include <random>
#include <type_traits>
#include <utility>

#include "caf/event_based_actor.hpp"
#include "caf/message.hpp"

#include "kvroom/actors/nodes.hpp"
#include "kvroom/actors/manager/kv_manager.hpp"

namespace kvroom::detail {

using manager_ptr = counted_actor<kv_manager_state>*;

inline const rank_ref& me(manager_ptr self) {
  return self->state.self_entry->rank;
}

/// Defined by manager_links.cpp: a control message to or from another
/// process (its link is in use).
void note_traffic(manager_ptr self, const caf::node_id& node);

/// Defined by manager_outbox.cpp: holds `msg` for `dest`, a manager in
/// another process, until this drain of the mailbox ends (control_outbox).
void hold_for(manager_ptr self, const caf::actor& dest, caf::message msg);

/// Defined by manager_outbox.cpp: sends what the outbox holds.
void flush_outbox(manager_ptr self);

/// Defined by manager_outbox.cpp: handles each message of a peer's bundle
/// as if it had come alone.
void on_bundle(manager_ptr self, control_bundle& msg);

/// Sends a control message to another rank's manager, delayed when the
/// rank's control chaos says so; to another process with the rest of this
/// drain's messages for it (hold_for).
template <class T>
void send_ctrl(manager_ptr self, const caf::actor& dest, T&& msg) {
  auto& st = self->state;
  bool remote = dest && !detail::same_node(dest, self);
  if (remote)
    note_traffic(self, detail::node_of(dest));
  if (st.chaos.delay_probability > 0.0 && st.chaos.max_delay_ms > 0) {
    std::uniform_real_distribution<double> coin{0.0, 1.0};
    if (coin(st.chaos_rng) < st.chaos.delay_probability) {
      std::uniform_int_distribution<uint32_t> ms{1, st.chaos.max_delay_ms};
      self->delayed_send(dest, std::chrono::milliseconds(ms(st.chaos_rng)),
                         std::forward<T>(msg));
      return;
    }
  }
  if (remote) {
    if constexpr (std::is_same_v<std::decay_t<T>, caf::message>)
      hold_for(self, dest, std::forward<T>(msg));
    else
      hold_for(self, dest, caf::make_message(std::forward<T>(msg)));
    return;
  }
  self->send(dest, std::forward<T>(msg));
}

/// Keeps `msg` for rank `id` until the directory lists it as usable (a
/// peer's message can arrive before this rank's own link to that peer is
/// up: answering it must not be lost), bounded and expiring with the rest
/// of the parking; a rank lost meanwhile gets nothing.
void park_for_rank(manager_ptr self, rank_id id, caf::message msg);

/// Sends `msg` to rank `id`'s manager: now when the directory lists it,
/// else once it does (park_for_rank).
template <class T>
void send_to_rank(manager_ptr self, rank_id id, T&& msg) {
  if (auto peer = self->state.peers->find(id)) {
    send_ctrl(self, peer->manager, std::forward<T>(msg));
    return;
  }
  if constexpr (std::is_same_v<std::decay_t<T>, caf::message>)
    park_for_rank(self, id, std::forward<T>(msg));
  else
    park_for_rank(self, id, caf::make_message(std::forward<T>(msg)));
}

} // namespace kvroom::detail
