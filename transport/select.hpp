#pragma once

#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "kvroom/api/descriptors.hpp"

namespace kvroom {

/// What a transfer moves, on each side.
struct memory_kinds {
  mem_kind src = mem_kind::host;
  mem_kind dst = mem_kind::host;

  bool any_device() const noexcept {
    return src == mem_kind::device || dst == mem_kind::device;
  }
};

/// Whether transport `name` can move memory of these kinds at all, by its
/// row of the transport table: local, shm and tcp touch host memory only;
/// cuda and verbs (GPUDirect) also GPU memory.
bool moves(const std::string& name, memory_kinds kinds);

/// Picks how to reach a peer from the endpoints it offers. `forced` names a
/// transport or is "auto", which takes the nearest (by the transport table)
/// that both ends offer and that moves `kinds`:
/// - host memory: local (same process), shm (same host), verbs, tcp;
/// - GPU memory on either side: cuda (same host), verbs.
/// An endpoint is "the same process/host" when its `domain` equals that of
/// this rank's endpoint of the same transport (verbs reaches any domain).
/// The error says what the peer offers and why nothing fits.
caf::expected<endpoint_desc> choose_endpoint(const std::vector<endpoint_desc>& peer,
                                             const std::vector<endpoint_desc>& mine,
                                             const std::string& forced,
                                             memory_kinds kinds = {});

/// Every path to a peer, the nearest first: the endpoint `choose_endpoint`
/// picks, then the peer's other endpoints of that transport (its other
/// addresses: other NICs), then, with "auto" and a transport that crosses
/// hosts, the endpoints of farther such transports that move `kinds` too
/// (the fallback while every nearer path rests: verbs, then tcp). A
/// same-process or same-host transport gets no fallback: it has nothing to
/// fail over from, and its batches stay on the room's inline shortcut.
caf::expected<std::vector<endpoint_desc>> choose_paths(const std::vector<endpoint_desc>& peer,
                                                       const std::vector<endpoint_desc>& mine,
                                                       const std::string& forced,
                                                       memory_kinds kinds = {});

} // namespace kvroom
