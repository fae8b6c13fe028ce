#pragma once

/// The testkit: kvroom's API plus the fixtures tests, the CLI and the
/// benchmarks share (host KV caches, one-process groups of ranks). Not part of
/// the installed API.

#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/kvroom.hpp"
#include "kvroom/kit/host_kv_cache.hpp"
#include "kvroom/kit/local_group.hpp"
#include "kvroom/kit/scheduler_loop.hpp"
