#pragma once

// What goes wrong, as values: `errc` for the API's calls, and for a room's
// failure its `kv_transfer_error` with its `failure_cause`.

#include <cstddef>
#include <cstdint>
#include <string>

#include "caf/atom.hpp"
#include "caf/error.hpp"
#include "caf/make_message.hpp"
#include "caf/meta/type_name.hpp"

#include "kvroom/api/ids.hpp"

namespace kvroom {

/// Operating errors of kvroom: values returned by setup code and API calls.
/// Programmer errors are asserts instead (see `KVROOM_ASSERT`).
enum class errc : uint8_t {
  none = 0,
  invalid_argument,      ///< a value out of its documented range
  invalid_config,        ///< a configuration that cannot work
  unknown_room,          ///< no open room with that id on this rank
  duplicate_room,        ///< the room is already open on this rank
  room_concluded,        ///< the room reached a terminal state already
  room_cleared,          ///< the room was cleared; its handle is dead
  not_initialized,       ///< send() before init()
  already_initialized,   ///< init() twice
  too_many_indices,      ///< more KV indices than init() declared
  out_of_range,          ///< an index or range outside registered memory
  not_registered,        ///< memory that no registration covers
  limit_reached,         ///< a configured limit (rooms, queue) is full
  transport_error,       ///< a backend failed to move bytes
  timeout,               ///< a request or state ran past its deadline
  unavailable,           ///< a backend or peer that is not present
  unsupported,           ///< a combination kvroom does not implement
  unauthorized,          ///< a peer that did not prove membership
  incompatible,          ///< a layout that cannot be mapped onto its peers'
  injected_fault,        ///< a failure the fault decorator injected (tests, stress)
};

/// Category atom under which `errc` is registered with CAF.
using kvroom_error_atom = caf::atom_constant<caf::atom("kvroom")>;

std::string to_string(errc x);

/// Builds a `caf::error` in kvroom's category, with a lowercase context text.
caf::error make_error(errc code, std::string context);

/// Builds a `caf::error` in kvroom's category without context.
caf::error make_error(errc code);

/// The context text of an error made by `make_error`, or CAF's rendering.
std::string describe(const caf::error& err);

/// True when `err` is kvroom's `code` (e.g. `is(h.send(...), errc::room_concluded)`);
/// false for no error and for errors of other categories.
bool is(const caf::error& err, errc code) noexcept;

// -- failure causes ----------------------------------------------------------

// The class of a room's failure, for metrics and structured logs: set where
// the failure is first identified (the origin), carried on the wire with its
// `kv_transfer_error`, never read back from the reason's words.

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

// -- a room's failure -------------------------------------------------------

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
