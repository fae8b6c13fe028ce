#include "kvroom/actors/room/room_port.hpp"

#include "caf/all.hpp"

#include "kvroom/api/logging.hpp"
#include "kvroom/messages/room_messages.hpp"

namespace kvroom {

room_port::~room_port() {
  // nop
}

void room_port::commit(room_id room, rank_id rank) {
  to_rank(rank, caf::make_message(room_committed{room}));
}

void room_port::part_word(const room_effect&) {
  // nop
}

void carry_out(room_id room, const rank_ref& me, room_effects& effects, room_port& port) {
  for (auto& fx : effects) {
    switch (fx.what) {
      case room_effect::kind::publish:
        port.publish(fx.state, std::move(fx.error));
        break;
      case room_effect::kind::concluded:
        port.concluded(fx);
        break;
      case room_effect::kind::propose:
        port.to_decider(fx.decider, caf::make_message(room_failed{
                                      room, std::move(fx.error), false, fx.rank}));
        break;
      case room_effect::kind::answer:
        if (fx.state == kv_poll::failed)
          port.to_rank(fx.rank, caf::make_message(
                                  room_failed{room, std::move(fx.error), true, me.id}));
        else
          port.to_rank(fx.rank, caf::make_message(room_committed{room}));
        break;
      case room_effect::kind::commit:
        for (auto r : fx.recipients)
          port.commit(room, r);
        break;
      case room_effect::kind::fence_expired:
        logger()->error("room {} on {}: Failed published without every "
                        "sender's fence after {} ms (senders still listed: "
                        "{}); its pages may still be written",
                        room, to_string(me), fx.waited_ms, fx.recipients.size());
        break;
      case room_effect::kind::report_part:
      case room_effect::kind::tell_done:
        port.part_word(fx);
        break;
    }
  }
}

} // namespace kvroom
