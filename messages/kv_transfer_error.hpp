#pragma once

#include <cstdint>
#include <string>

#include "caf/meta/type_name.hpp"

#include "kvroom/messages/failure_cause.hpp"
#include "kvroom/messages/ids.hpp"

namespace kvroom {

/// Why a room failed, as the scheduler receives it from `failure()`.
///
/// Unlike SGLang's propagated errors, one that came from another rank keeps
/// the origin's reason and rank, so every rank can name the root cause.
struct kv_transfer_error {
  room_id bootstrap_room = 0;
  std::string failure_reason;
  bool is_from_another_rank = false;
  rank_id origin_rank = -1;
  /// Its class, set where it was identified (metrics, JSON logs).
  failure_cause cause = failure_cause::other;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_transfer_error& x) {
  return f(caf::meta::type_name("kvroom.kv_transfer_error"), x.bootstrap_room,
           x.failure_reason, x.is_from_another_rank, x.origin_rank, x.cause);
}

/// `KVTransferError(bootstrap_room=N): reason`, SGLang's text form.
std::string to_string(const kv_transfer_error& x);

bool operator==(const kv_transfer_error& x,
                const kv_transfer_error& y) noexcept;

} // namespace kvroom
