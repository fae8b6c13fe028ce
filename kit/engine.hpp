#pragma once

// What kvroom's own tools see of the engine beyond the API (api/): the
// transport table and the path layer the benches measure, the forwarding
// base of their counting decorator, device buffers, the room mapping and
// part digests the stress checker recomputes, and the jobs CAF's workers
// resumed (`detail::resumed_jobs`, per room in the rooms bench). Tools and tests only, like the
// rest of kit/: an embedder has the API. cli/, bench/ and python/ reach the
// engine through this header alone (layering_test holds them to api/ and
// kit/), so what they depend on beyond the API is this list.

#include "kvroom/actors/quiet_clock.hpp"
#include "kvroom/transport/device_memory.hpp"
#include "kvroom/transport/forwarding_backend.hpp"
#include "kvroom/transport/part_digest.hpp"
#include "kvroom/transport/paths/multipath_backend.hpp"
#include "kvroom/transport/rank_mapping.hpp"
#include "kvroom/transport/transport_table.hpp"
