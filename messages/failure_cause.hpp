#pragma once

// The class of a room's failure, for metrics and structured logs: set where
// the failure is first identified (the origin), carried on the wire with its
// `kv_transfer_error`, never read back from the reason's words.

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvroom {

/// Every cause, in order, once: the enum, its names and its count follow.
/// - timeout_*: a room's state deadline (transferring also the decider's
///   silence while prepared);
/// - peer_lost: a rank of the room lost or closed;
/// - transport: the data plane refused or failed a batch, a read or a grant;
/// - bad_input: the scheduler's call, or a plan or mapping of it, refused;
/// - abort: a scheduler's abort;
/// - fault: an injected fault (tests, `kvroom stress`);
/// - integrity: the integrity check caught a part that is not its source's;
/// - other: anything else (a room actor that exited, a protocol breach).
#define KVROOM_FAILURE_CAUSES(X)                                                                   \
  X(timeout_bootstrapping)                                                                         \
  X(timeout_waiting)                                                                               \
  X(timeout_transferring)                                                                          \
  X(peer_lost)                                                                                     \
  X(transport)                                                                                     \
  X(bad_input)                                                                                     \
  X(abort)                                                                                         \
  X(fault)                                                                                         \
  X(integrity)                                                                                     \
  X(other)

enum class failure_cause : uint8_t {
#define KVROOM_CAUSE_ENUM(name) name,
  KVROOM_FAILURE_CAUSES(KVROOM_CAUSE_ENUM)
#undef KVROOM_CAUSE_ENUM
};

#define KVROOM_CAUSE_ONE(name) +1
constexpr size_t failure_cause_count = 0 KVROOM_FAILURE_CAUSES(KVROOM_CAUSE_ONE);
#undef KVROOM_CAUSE_ONE

/// Prometheus label value: "timeout_bootstrapping", "peer_lost", ...
std::string to_string(failure_cause x);

/// The cause with that name, or `other`.
failure_cause failure_cause_named(const std::string& name);

} // namespace kvroom
