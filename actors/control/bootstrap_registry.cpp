#include "kvroom/actors/control/bootstrap_registry.hpp"
#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/room/room_timing.hpp"

#include <algorithm>
#include <chrono>

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

using self_ptr = counted_actor<bootstrap_registry_state>*;

/// The directory as peers see it: managers with a control endpoint are
/// reached over direct links, never through a handle this node relays.
directory_update view(self_ptr self) {
  directory_update msg{self->state.ranks};
  for (auto& e : msg.ranks)
    if (e.control_port != 0)
      e.manager = nullptr;
  return msg;
}

using push_atom = caf::atom_constant<caf::atom("push")>;

/// Sends the directory to the ranks of this process (`local`) or to those
/// of other processes.
void push_to(self_ptr self, bool local) {
  auto msg = view(self);
  for (auto& e : self->state.ranks)
    if ((e.manager.node() == self->node()) == local)
      self->send(e.manager, msg);
}

/// The directory changed: ranks of this process get it at once (a local
/// message; a rank added after another finds it listed), ranks elsewhere
/// within 20 ms, once however many changes came meanwhile. Pushing every
/// change over the network sends N directories of N entries when N ranks
/// start at once (measured: at 96 rank processes on 2 cores, 3
/// registrations timed out behind that traffic).
void schedule_push(self_ptr self) {
  push_to(self, true);
  if (self->state.push_pending)
    return;
  self->state.push_pending = true;
  self->delayed_send(self, std::chrono::milliseconds(20), push_atom::value);
}

void push(self_ptr self) {
  self->state.push_pending = false;
  push_to(self, false);
}

/// Remembers that `id`'s rank went down, forgetting the oldest id beyond
/// `max_ranks` (one per rank id a member may hold; a forgotten one only
/// means its replacement is pushed in a batch).
void remember_gone(self_ptr self, rank_id id) {
  auto& gone = self->state.gone;
  gone.erase(std::remove(gone.begin(), gone.end(), id), gone.end());
  if (gone.size() >= std::max<size_t>(1, self->state.max_ranks))
    gone.erase(gone.begin());
  gone.push_back(id);
}

/// Takes `id` off the gone list; true if it was there.
bool replaces(self_ptr self, rank_id id) {
  auto& gone = self->state.gone;
  auto i = std::find(gone.begin(), gone.end(), id);
  if (i == gone.end())
    return false;
  gone.erase(i);
  return true;
}

/// Pushes the directory to every rank but `registrant` as a request, and
/// answers the registrant once all acknowledged it or timed out. A manager
/// answers the push after applying it: the replacement is listed there (and
/// its predecessor's loss forgotten) before anyone hears it is ready.
caf::result<directory_update> acked_push(self_ptr self, rank_id registrant) {
  std::vector<caf::actor> others;
  for (auto& e : self->state.ranks)
    if (e.rank.id != registrant && e.manager)
      others.push_back(e.manager);
  // No promise without someone to wait for: CAF 0.17 answers a request
  // through the promise once one is made, and drops the handler's value.
  if (others.empty())
    return view(self);
  struct pending {
    caf::response_promise answer;
    size_t left = 0;
  };
  auto p = std::make_shared<pending>();
  p->answer = self->make_response_promise();
  p->left = others.size();
  auto one_done = [self, p] {
    if (--p->left == 0)
      p->answer.deliver(view(self));
  };
  auto msg = view(self);
  for (auto& dest : others)
    self->request(dest, std::chrono::milliseconds(bootstrap_registry_state::replacement_ack_ms),
                  msg)
      .then([one_done] { one_done(); }, [one_done](caf::error&) { one_done(); });
  return p->answer;
}

caf::error refuse(self_ptr self, errc code, std::string why) {
  ++self->state.refusals;
  logger()->warn("registry: registration refused: {}", why);
  return make_error(code, "registration refused: " + why);
}

} // namespace

/// Rank `*i` is gone from the registry's view: every other rank hears it
/// (the loss first), then the directory without it.
static void drop_rank(self_ptr self, std::vector<rank_entry>::iterator i, std::string reason,
                      bool orderly) {
  auto& xs = self->state.ranks;
  rank_down note{i->rank, std::move(reason), orderly};
  // Which incarnation went: a replacement listed by the time this lands
  // is not the one lost.
  note.incarnation = i->incarnation;
  remember_gone(self, i->rank.id);
  xs.erase(i);
  for (auto& e : xs)
    self->send(e.manager, note);
  schedule_push(self);
}

caf::behavior bootstrap_registry(counted_actor<bootstrap_registry_state>* self,
                                 uint32_t max_ranks,
                                 std::shared_ptr<const membership> members) {
  auto& st = self->state;
  st.max_ranks = max_ranks;
  st.members = members ? std::move(members) : std::make_shared<const membership>();
  // Challenges a stranger never answers: bounded and expiring.
  st.door.emplace(st.members, std::max<size_t>(64, 2 * static_cast<size_t>(max_ranks)));
  // Only this process may stop the registry: an exit message from another
  // node (a rank's runtime ending, a stranger) changes nothing.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    // Anonymous is not local: CAF 0.17 delivers a remote anonymous exit
    // without a sender, and its source may name this very actor.
    auto& sender = self->current_sender();
    if (sender && sender->node() == self->node() && msg.source.node() == self->node())
      self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& xs = self->state.ranks;
    auto i = std::find_if(xs.begin(), xs.end(), [&](const rank_entry& e) {
      return e.manager.address() == msg.source;
    });
    if (i != xs.end())
      drop_rank(self, i, caf::to_string(msg.reason),
                msg.reason == caf::exit_reason::user_shutdown
                  || msg.reason == caf::exit_reason::normal);
  });
  return {
    [=](registry_hello& msg) -> caf::result<registry_challenge> {
      auto& sender = self->current_sender();
      auto out = self->state.door->hello(sender ? sender->address() : caf::actor_addr{},
                                         msg.nonce, monotonic_ms());
      if (!out)
        return refuse(self, static_cast<errc>(out.error().code()), describe(out.error()));
      return std::move(*out);
    },
    [=](register_rank& msg) -> caf::result<directory_update> {
      auto& st = self->state;
      auto& sender = self->current_sender();
      auto& entry = msg.entry;
      auto who = to_string(entry.rank);
      if (auto err = st.door->check(sender ? sender->address() : caf::actor_addr{}, msg,
                                    monotonic_ms()))
        return refuse(self, errc::unauthorized, describe(err));
      // Whoever answered the challenge, or its process's manager it names.
      entry.manager = registration_door::listed_actor(sender, entry);
      auto& xs = st.ranks;
      if (auto no = admission_refusal(xs, entry, st.max_ranks))
        return refuse(self, no->code, no->why);
      auto i = std::find_if(xs.begin(), xs.end(), [&](const rank_entry& e) {
        return e.rank.id == entry.rank.id;
      });
      if (i != xs.end()) {
        logger()->info("registry: {} registered again", who);
        self->demonitor(i->manager);
        *i = entry;
      } else {
        logger()->debug("registry: {} registered", who);
        xs.push_back(entry);
      }
      self->monitor(entry.manager);
      if (replaces(self, entry.rank.id))
        return acked_push(self, entry.rank.id);
      // The registrant has the directory now; everyone else with the next push.
      schedule_push(self);
      return view(self);
    },
    [=](push_atom) {
      auto& sender = self->current_sender();
      if (sender && sender->node() == self->node())
        push(self);
    },
    [=](chaos_drop_atom, rank_id id) {
      // Tests only, from this process only: what a registry stalled past
      // its connection timeout does to a live rank. It reports the rank
      // lost and closes its connection to the rank's process, which then
      // registers again (CAF's connection timeout does both).
      auto& sender = self->current_sender();
      if (!sender || sender->node() != self->node())
        return;
      auto& xs = self->state.ranks;
      auto i = std::find_if(xs.begin(), xs.end(),
                            [&](const rank_entry& e) { return e.rank.id == id; });
      if (i == xs.end())
        return;
      auto node = i->manager.node();
      drop_rank(self, i, "chaos: dropped by the registry (as a stalled registry does)", false);
      detail::close_connection(self->home_system(), node);
    },
  };
}

} // namespace kvroom
