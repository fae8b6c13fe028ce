#pragma once

/// kvroom's public API for an embedding scheduler: a runtime, its ranks, and
/// the per-room sender/receiver handles (installed as <kvroom/kvroom.hpp>).
/// Everything it declares lives in api/, which is what `cmake --install`
/// ships; the engine behind it (actors, messages, transports) is not
/// installed. Test and demo fixtures (host KV caches, local groups, the
/// process harness) are in the testkit (`kvroom/kit/testkit.hpp`), which is
/// not installed either.

#include "kvroom/api/backend.hpp"
#include "kvroom/api/config.hpp"
#include "kvroom/api/descriptors.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/ids.hpp"
#include "kvroom/api/kv_poll.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/api/metrics.hpp"
#include "kvroom/api/parallel_layout.hpp"
#include "kvroom/api/rank.hpp"
#include "kvroom/api/room_handles.hpp"
#include "kvroom/api/runtime.hpp"
#include "kvroom/api/secret.hpp"
