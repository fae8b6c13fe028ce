#pragma once

// The kv_manager's view of the other ranks: directory updates from the
// registry, ranks becoming usable, and ranks lost (by our own monitor or,
// for ranks never linked, by the registry's word). The peer_directory
// decides; this is wiring. Part of the kv_manager actor, in a file of its
// own; not an API.

#include <string>

#include "caf/atom.hpp"

#include "kvroom/actors/manager/endpoint_probe.hpp"
#include "kvroom/actors/manager/manager_send.hpp"

namespace kvroom::detail {

/// manager -> itself: a suspect's window may have ended.
using suspects_atom = caf::atom_constant<caf::atom("suspects")>;

void on_directory(manager_ptr self, directory_update& msg);

/// The registry says a rank is down. A rank never linked here that did not
/// leave in order is a suspect until checked (registry_suspects.hpp).
void on_rank_down(manager_ptr self, rank_down& msg);

/// A suspect's endpoint was probed.
void on_probe_done(manager_ptr self, const probe_done& msg);

/// The suspects whose window ended are lost.
void on_suspects_due(manager_ptr self);

/// Rank `id` showed itself as `incarnation` (a link made, or the registry
/// listing it): a suspect of that incarnation lives; one of another is gone.
void on_rank_seen(manager_ptr self, rank_id id, uint64_t incarnation);

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
