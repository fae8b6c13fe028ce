// Control messages to other processes, one bundle per peer and drain of
// the mailbox (control_outbox.hpp). Part of the kv_manager actor.

#include "caf/all.hpp"

#include "kvroom/actors/manager/manager_send.hpp"
#include "kvroom/api/logging.hpp"

namespace kvroom::detail {

namespace {

void send_held(manager_ptr self, const caf::actor& dest, std::vector<caf::message> msgs) {
  if (msgs.size() == 1)
    self->send(dest, std::move(msgs.front()));
  else if (!msgs.empty())
    self->send(dest, control_bundle{std::move(msgs)});
}

} // namespace

void hold_for(manager_ptr self, const caf::actor& dest, caf::message msg) {
  auto& st = self->state;
  if (st.outbox.add(dest, std::move(msg))) {
    send_held(self, dest, st.outbox.take(dest));
    return;
  }
  // Behind everything already in the mailbox: what this drain still
  // handles joins the bundle; a room alone waits one message more.
  if (!st.flush_queued) {
    st.flush_queued = true;
    self->send(self, flush_atom::value);
  }
}

void flush_outbox(manager_ptr self) {
  auto& st = self->state;
  st.flush_queued = false;
  for (auto& [dest, msgs] : st.outbox.take_all())
    send_held(self, dest, std::move(msgs));
}

void on_bundle(manager_ptr self, control_bundle& msg) {
  if (msg.messages.size() > control_outbox::max_bundle) {
    logger()->debug("{}: a bundle of {} control messages dropped (at most {})",
                    to_string(me(self)), msg.messages.size(), control_outbox::max_bundle);
    return;
  }
  // Through the behaviour every message alone would meet, with the same
  // sender (its gate checks it again); never a bundle in a bundle.
  auto& bhvr = self->bhvr_stack().back();
  for (auto& x : msg.messages)
    if (!x.match_elements<control_bundle>())
      bhvr(x);
}

} // namespace kvroom::detail
