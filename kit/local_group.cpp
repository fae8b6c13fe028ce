#include "kvroom/kit/local_group.hpp"

#include "kvroom/api/errors.hpp"

#include <chrono>
#include <thread>

namespace kvroom {

namespace {

/// Gives `g` one more rank of `side`: its own host KV cache of `shape`,
/// TP rank `tp_rank` of `tp_size`, `layout` declared when set.
caf::error add_one(runtime& rt, local_group& g, role side, int tp_rank, int tp_size,
                   const kv_shape& shape, const std::optional<parallel_layout>& layout,
                   const local_group::customizer& customize) {
  bool prefill = side == role::prefill;
  auto& mem = prefill ? g.prefill_mem : g.decode_mem;
  // A rank made to use shm registers only shared segments: its memory is
  // allocated in them (what the customizer asks is known before).
  rank_config wanted;
  if (customize)
    customize(wanted);
  mem.push_back(std::make_unique<host_kv_cache>(shape, wanted.transport == "shm"));
  rank_config rc;
  rc.side = side;
  rc.tp_rank = tp_rank;
  rc.tp_size = tp_size;
  rc.memory = mem.back()->layout();
  rc.parallel = layout;
  if (customize)
    customize(rc);
  auto r = rt.add_rank(rc);
  // The same place's previous rank (a group started again in this process,
  // as the benches do per point) leaves the registry asynchronously: its
  // replacement is refused until it is gone. Bounded.
  for (int i = 0; i < 250 && !r && describe(r.error()).find("a replacement registers once")
                                       != std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r = rt.add_rank(rc);
  }
  if (!r)
    return make_error(errc::invalid_config,
                      "cannot start " + to_string(rc.ref()) + ": " + describe(r.error()));
  (prefill ? g.prefill : g.decode).push_back(std::move(*r));
  (prefill ? g.prefill_layout : g.decode_layout).push_back(layout);
  return caf::none;
}

} // namespace

caf::expected<std::unique_ptr<local_group>>
local_group::start(runtime& rt, int tp, const kv_shape& shape, const customizer& customize) {
  if (tp < 1)
    return make_error(errc::invalid_config, "tp must be at least 1");
  auto g = std::make_unique<local_group>();
  for (auto side : {role::prefill, role::decode})
    for (int t = 0; t < tp; ++t)
      if (auto err = add_one(rt, *g, side, t, tp, shape, std::nullopt, customize))
        return err;
  return g;
}

caf::expected<std::unique_ptr<local_group>>
local_group::start(runtime& rt, int prefill_tp, int decode_tp, const parallel_layout& model,
                   const kv_shape& shape, const customizer& customize, int prefill_pp) {
  if (prefill_tp < 1 || decode_tp < 1 || prefill_pp < 1)
    return make_error(errc::invalid_config, "TP and PP sizes must be at least 1");
  if (model.layers % prefill_pp != 0)
    return make_error(errc::invalid_config, std::to_string(model.layers) + " layers in "
                                              + std::to_string(prefill_pp)
                                              + " pipeline stages: not an even split");
  auto g = std::make_unique<local_group>();
  for (auto side : {role::prefill, role::decode}) {
    auto tp = side == role::prefill ? prefill_tp : decode_tp;
    auto pp = side == role::prefill ? prefill_pp : 1;
    // Stage-major: rank i is TP rank i % tp of stage i / tp.
    for (int i = 0; i < tp * pp; ++i) {
      auto x = model;
      x.tp_size = tp;
      x.tp_rank = i % tp;
      x.pp_size = pp;
      x.pp_rank = i / tp;
      x.layers = model.layers / pp;
      x.first_layer = x.pp_rank * x.layers;
      if (auto why = check(x); !why.empty())
        return make_error(errc::invalid_config, "layout of TP rank " + std::to_string(x.tp_rank)
                                                  + " of " + std::to_string(tp) + ": " + why);
      auto s = shape;
      s.num_buffers = static_cast<uint32_t>(x.kv_buffers());
      s.page_size_bytes = x.page_bytes();
      if (auto err = add_one(rt, *g, side, x.tp_rank, tp, s, x, customize))
        return err;
    }
  }
  return g;
}

local_group::~local_group() {
  decode.clear();
  prefill.clear();
}

} // namespace kvroom
