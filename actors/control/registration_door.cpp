#include "kvroom/actors/control/registration_door.hpp"

#include "caf/actor_cast.hpp"

#include "kvroom/api/errors.hpp"

namespace kvroom {

caf::expected<registry_challenge> registration_door::hello(const caf::actor_addr& from,
                                                           const nonce& theirs,
                                                           uint64_t now_ms) {
  if (!from || theirs.size() != 32)
    return make_error(errc::invalid_argument, "malformed registry_hello");
  challenge c{theirs, make_nonce()};
  registry_challenge out{c.mine, members_->registry_proof(c.theirs, c.mine)};
  if (!challenges_.put(from, std::move(c), now_ms))
    return make_error(errc::limit_reached, "too many registrations in progress");
  return out;
}

caf::error registration_door::check(const caf::actor_addr& from, const register_rank& msg,
                                    uint64_t now_ms) {
  auto who = to_string(msg.entry.rank);
  if (!from)
    return make_error(errc::unauthorized, "anonymous registration");
  auto c = challenges_.take(from, now_ms);
  if (!c || c->theirs != msg.rank_nonce)
    return make_error(errc::unauthorized, who + " answered no challenge of this registry");
  if (!membership::matches(msg.proof, members_->rank_proof(c->mine, c->theirs, msg.entry.rank.id,
                                                           msg.entry.incarnation)))
    return make_error(errc::unauthorized,
                      who + " failed to prove membership (a different deployment secret?)");
  return caf::none;
}

caf::actor registration_door::listed_actor(const caf::strong_actor_ptr& registrant,
                                           const rank_entry& entry) {
  if (!registrant)
    return nullptr;
  if (entry.manager && entry.manager.node() == registrant->node())
    return entry.manager;
  return caf::actor_cast<caf::actor>(registrant);
}

} // namespace kvroom
