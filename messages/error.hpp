#pragma once

#include <cstdint>
#include <string>

#include "caf/atom.hpp"
#include "caf/error.hpp"
#include "caf/make_message.hpp"

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

} // namespace kvroom
