#pragma once

#include <string>
#include <vector>

#include "caf/expected.hpp"

#include "messages/descriptors.hpp"

namespace kvroom {

/// Picks how to reach a peer from the endpoints it offers. `forced` names a
/// transport ("local", "shm", "tcp") or is "auto": the same process takes
/// `local`, the same host `shm`, anything else `tcp`. An endpoint is "the
/// same process/host" when its `domain` equals that of this rank's endpoint
/// of the same transport. The error says what the peer offers.
caf::expected<endpoint_desc> choose_endpoint(const std::vector<endpoint_desc>& peer,
                                             const std::vector<endpoint_desc>& mine,
                                             const std::string& forced);

} // namespace kvroom
