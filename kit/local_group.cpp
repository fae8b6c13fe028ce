#include "kvroom/kit/local_group.hpp"

#include "kvroom/messages/error.hpp"

namespace kvroom {

caf::expected<std::unique_ptr<local_group>>
local_group::start(runtime& rt, int tp, const kv_shape& shape, const customizer& customize) {
  if (tp < 1)
    return make_error(errc::invalid_config, "tp must be at least 1");
  auto g = std::make_unique<local_group>();
  for (auto side : {role::prefill, role::decode}) {
    for (int t = 0; t < tp; ++t) {
      auto& mem = side == role::prefill ? g->prefill_mem : g->decode_mem;
      mem.push_back(std::make_unique<host_kv_cache>(shape));
      rank_config rc;
      rc.side = side;
      rc.tp_rank = t;
      rc.tp_size = tp;
      rc.memory = mem.back()->layout();
      if (customize)
        customize(rc);
      auto r = rt.add_rank(rc);
      if (!r)
        return make_error(errc::invalid_config,
                          "cannot start " + to_string(rc.ref()) + ": " + describe(r.error()));
      (side == role::prefill ? g->prefill : g->decode).push_back(std::move(*r));
      (side == role::prefill ? g->prefill_layout : g->decode_layout).emplace_back();
    }
  }
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
    for (int i = 0; i < tp * pp; ++i) {
      auto t = i % tp;
      auto x = model;
      x.tp_size = tp;
      x.tp_rank = t;
      x.pp_size = pp;
      x.pp_rank = i / tp;
      x.layers = model.layers / pp;
      x.first_layer = x.pp_rank * x.layers;
      if (auto why = check(x); !why.empty())
        return make_error(errc::invalid_config, "layout of TP rank " + std::to_string(t)
                                                  + " of " + std::to_string(tp) + ": " + why);
      auto s = shape;
      s.num_buffers = static_cast<uint32_t>(x.kv_buffers());
      s.page_size_bytes = x.page_bytes();
      auto& mem = side == role::prefill ? g->prefill_mem : g->decode_mem;
      mem.push_back(std::make_unique<host_kv_cache>(s));
      rank_config rc;
      rc.side = side;
      rc.tp_rank = t;
      rc.tp_size = tp;
      rc.memory = mem.back()->layout();
      rc.parallel = x;
      if (customize)
        customize(rc);
      auto r = rt.add_rank(rc);
      if (!r)
        return make_error(errc::invalid_config,
                          "cannot start " + to_string(rc.ref()) + ": " + describe(r.error()));
      (side == role::prefill ? g->prefill : g->decode).push_back(std::move(*r));
      (side == role::prefill ? g->prefill_layout : g->decode_layout).push_back(x);
    }
  }
  return g;
}

local_group::~local_group() {
  decode.clear();
  prefill.clear();
}

} // namespace kvroom
