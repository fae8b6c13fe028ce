#pragma once

/// kvroom's public API for an embedding scheduler: a runtime, its ranks, and
/// the per-room sender/receiver handles (installed as <kvroom/kvroom.hpp>).

#include "actors/config.hpp"
#include "actors/counted_actor.hpp"
#include "actors/host_kv_cache.hpp"
#include "actors/local_group.hpp"
#include "actors/logging.hpp"
#include "actors/rank.hpp"
#include "actors/room_handles.hpp"
#include "actors/runtime.hpp"
#include "messages/error.hpp"
#include "messages/kv_poll.hpp"
#include "messages/kv_transfer_error.hpp"
#include "messages/registration.hpp"
#include "transport/fault_plan.hpp"
