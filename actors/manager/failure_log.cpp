#include "kvroom/actors/manager/failure_log.hpp"

#include <nlohmann/json.hpp>

#include "kvroom/api/logging.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

void failure_log::concluded(room_id room, kv_poll state, const kv_transfer_error& err,
                            bool requested) {
  if (state == kv_poll::success) {
    ++successes_;
    return;
  }
  records_[room] = err;
  // JSON lines (log_json()): the event's fields, not a sentence.
  auto event = [&] {
    nlohmann::ordered_json e;
    e["event"] = "room_failed";
    e["room"] = room;
    e["rank"] = to_string(self_);
    e["rank_id"] = self_.id;
    e["origin_rank"] = err.origin_rank;
    e["propagated"] = err.is_from_another_rank;
    e["cause"] = to_string(err.cause);
    e["requested"] = requested;
    e["reason"] = err.failure_reason;
    return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (err.is_from_another_rank) {
    ++propagated_;
    if (log_json())
      logger()->debug("{}", event());
    else
      logger()->debug("{}: room {} failed on rank {}: {}", to_string(self_), room,
                      err.origin_rank, err.failure_reason);
    return;
  }
  ++origins_;
  auto text = log_json() ? event() : to_string(self_) + ": " + to_string(err);
  if (requested)
    logger()->info("{}", text);
  else if (self_.side == role::decode)
    logger()->error("{}", text);
  else
    logger()->warn("{}", text);
}

const kv_transfer_error* failure_log::find(room_id room) const {
  auto i = records_.find(room);
  return i == records_.end() ? nullptr : &i->second;
}

} // namespace kvroom
