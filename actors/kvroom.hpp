#pragma once

/// kvroom's public API for an embedding scheduler: a runtime, its ranks, and
/// the per-room sender/receiver handles (installed as <kvroom/kvroom.hpp>).
/// Test and demo fixtures (host KV caches, local groups, the process harness)
/// are in the testkit (`kvroom/kit/testkit.hpp`), which is not installed.

#include "kvroom/actors/config.hpp"
#include "kvroom/actors/logging.hpp"
#include "kvroom/actors/rank.hpp"
#include "kvroom/actors/room_handles.hpp"
#include "kvroom/actors/runtime.hpp"
#include "kvroom/messages/error.hpp"
#include "kvroom/messages/kv_poll.hpp"
#include "kvroom/messages/kv_transfer_error.hpp"
#include "kvroom/messages/registration.hpp"
#include "kvroom/transport/fault_plan.hpp"
