#include "kvroom/messages/kv_transfer_error.hpp"

namespace kvroom {

std::string to_string(const kv_transfer_error& x) {
  std::string out = "KVTransferError(bootstrap_room=";
  out += std::to_string(x.bootstrap_room);
  out += "): ";
  out += x.failure_reason;
  return out;
}

bool operator==(const kv_transfer_error& x,
                const kv_transfer_error& y) noexcept {
  return x.bootstrap_room == y.bootstrap_room
         && x.failure_reason == y.failure_reason
         && x.is_from_another_rank == y.is_from_another_rank
         && x.origin_rank == y.origin_rank && x.cause == y.cause;
}

} // namespace kvroom
