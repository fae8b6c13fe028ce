#pragma once

// The kv_manager's view of the other ranks: directory updates from the
// registry, ranks becoming usable, and ranks lost (by our own monitor or,
// for ranks never linked, by the registry's word). The peer_directory
// decides; this is wiring. Part of the kv_manager actor, in a file of its
// own; not an API.

#include <string>

#include "kvroom/actors/manager/manager_send.hpp"

namespace kvroom::detail {

void on_directory(manager_ptr self, directory_update& msg);

/// The registry says a rank is down.
void on_rank_down(manager_ptr self, rank_down& msg);

/// `gone` (lost, or unlinked) is no longer linked here: its process stops
/// counting as a member unless another linked rank (or the registry) lives
/// there, and the process's link count to it drops.
void distrust(manager_ptr self, const rank_entry& gone);

/// A monitored peer manager is down (`orderly`: it shut down in order).
void on_peer_down(manager_ptr self, const rank_entry& lost, const std::string& reason,
                  bool orderly);

} // namespace kvroom::detail
