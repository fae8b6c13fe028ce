#pragma once

// The class of a room's failure, for metrics and structured logs: a plain
// function of the failure's reason, which kvroom itself wrote where the
// failure was first identified (and which travels unchanged to every rank).

#include <cstdint>
#include <string>

#include "kvroom/messages/kv_transfer_error.hpp"

namespace kvroom {

enum class failure_cause : uint8_t {
  timeout_bootstrapping = 0,
  timeout_waiting,
  timeout_transferring,
  peer_lost,
  transport,
  bad_input,
  abort,
  fault,
  /// The integrity check found a part that is not what its source sent.
  integrity,
  other,
};

constexpr size_t failure_cause_count = 10;

/// Prometheus label value: "timeout_bootstrapping", "peer_lost", ...
std::string to_string(failure_cause x);

/// The class of `err`'s reason: an injected fault, a state timeout (or the
/// decider's silence while prepared: transferring), a lost or closed rank,
/// a scheduler's abort, the data plane, or the scheduler's bad input.
failure_cause classify(const kv_transfer_error& err);

} // namespace kvroom
