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

/// `gone` (lost) is no longer linked here: the control actor drops its
/// link, and its process stops counting as a member unless another linked
/// rank (or the registry) lives there.
void distrust(manager_ptr self, const rank_entry& gone);

/// No link to rank `id` is wanted any more (it left the directory).
void unwant(manager_ptr self, rank_id id);

/// A monitored peer manager is down (`orderly`: it shut down in order).
void on_peer_down(manager_ptr self, const rank_entry& lost, const std::string& reason,
                  bool orderly);

} // namespace kvroom::detail
