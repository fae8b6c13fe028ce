#include "kvroom/actors/counted_actor.hpp"

#include <chrono>

#include "caf/actor_addr.hpp"
#include "caf/actor_cast.hpp"
#include "caf/node_id.hpp"
#include "caf/system_messages.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/messages/clock.hpp"

namespace kvroom {

std::atomic<uint64_t> detail::handled_messages{0};

namespace {

std::atomic<uint64_t> forged_total{0};
std::atomic<int64_t> last_forged_log_ms{0};

template <class Msg>
bool from_its_source(const caf::mailbox_element& x) {
  auto& msg = x.content().get_as<Msg>(0);
  return x.sender && caf::actor_cast<caf::actor_addr>(x.sender) == msg.source;
}

/// kvroom links no actor across processes and stops its own actors from
/// this process: an exit from another node is a stranger's, whatever it
/// names (its own actor, the target itself).
bool local(const caf::mailbox_element& x, const caf::abstract_actor& receiver) {
  return x.sender && x.sender->node() == receiver.node();
}

} // namespace

bool detail::forged_system_message(const caf::mailbox_element& x,
                                   const caf::abstract_actor& receiver) {
  auto& content = x.content();
  if (content.size() != 1)
    return false;
  bool forged;
  const char* what;
  if (content.match_element<caf::exit_msg>(0)) {
    forged = !local(x, receiver) || !from_its_source<caf::exit_msg>(x);
    what = "an exit";
  } else if (content.match_element<caf::down_msg>(0)) {
    forged = !from_its_source<caf::down_msg>(x);
    what = "a down";
  } else {
    return false;
  }
  if (!forged)
    return false;
  // Called on the sender's thread (the middleman's, for a remote one):
  // nothing here may touch the receiving actor's state.
  auto total = forged_total.fetch_add(1, std::memory_order_relaxed) + 1;
  auto now = static_cast<int64_t>(monotonic_ms());
  auto last = last_forged_log_ms.load(std::memory_order_relaxed);
  if (now - last >= 1000
      && last_forged_log_ms.compare_exchange_strong(last, now, std::memory_order_relaxed))
    logger()->warn("dropped {} message not sent by the actor it names ({}; {} such so far "
                   "in this process)",
                   what,
                   x.sender ? "sender on node " + caf::to_string(x.sender->node())
                            : std::string{"sent anonymously"},
                   total);
  return true;
}

} // namespace kvroom
