#include "kvroom/api/config.hpp"
#include "kvroom/api/backend.hpp"

#include "kvroom/transport/transport_table.hpp"

#include <algorithm>
#include <iterator>

#include "kvroom/api/errors.hpp"

namespace kvroom {

rank_ref rank_config::ref() const noexcept {
  rank_ref out;
  out.side = side;
  out.dp_rank = dp_rank;
  out.dp_size = dp_size;
  out.tp_rank = tp_rank;
  out.tp_size = tp_size;
  out.pp_rank = parallel ? parallel->pp_rank : 0;
  out.id = id >= 0 ? id
                  : default_rank_id(side, dp_rank, tp_rank, tp_size, out.pp_rank,
                                    parallel ? parallel->pp_size : 1);
  return out;
}

namespace {

caf::error check_buffers(const std::vector<paged_buffer>& xs,
                         const char* what) {
  for (size_t i = 0; i < xs.size(); ++i) {
    auto& b = xs[i];
    auto name = std::string{what} + " buffer " + std::to_string(i);
    if (b.mem.addr == 0 || b.mem.size_bytes == 0)
      return make_error(errc::invalid_config, name + " is empty or null");
    if (b.page_size_bytes == 0)
      return make_error(errc::invalid_config, name + " has page size 0");
    if (b.mem.size_bytes % b.page_size_bytes != 0)
      return make_error(errc::invalid_config,
                        name + ": size " + std::to_string(b.mem.size_bytes)
                          + " is not a multiple of its page size "
                          + std::to_string(b.page_size_bytes));
  }
  return caf::none;
}

} // namespace

uint32_t data_path_timeout(const rank_config& cfg) noexcept {
  return std::max<uint32_t>(100, std::min(cfg.data_timeout_ms, cfg.timeouts.transferring_ms / 4));
}

caf::error validate(const rank_config& cfg) {
  if (cfg.tp_size < 1)
    return make_error(errc::invalid_config, "tp_size must be at least 1");
  if (cfg.tp_rank < 0 || cfg.tp_rank >= cfg.tp_size)
    return make_error(errc::invalid_config,
                      "tp_rank " + std::to_string(cfg.tp_rank)
                        + " outside [0, tp_size)");
  if (cfg.dp_rank < 0)
    return make_error(errc::invalid_config, "dp_rank must not be negative");
  if (cfg.pull && cfg.side != role::decode)
    return make_error(errc::invalid_config,
                      "pull is a decode rank's choice (it reads its prefill's pages); "
                      "a prefill rank serves the reads of whichever decode rank pulls");
  if (cfg.dp_size < 0 || (cfg.dp_size > 0 && cfg.dp_rank >= cfg.dp_size))
    return make_error(errc::invalid_config,
                      "dp_rank " + std::to_string(cfg.dp_rank) + " outside [0, dp_size "
                        + std::to_string(cfg.dp_size) + ")");
  if (cfg.memory.kv.empty())
    return make_error(errc::invalid_config, "no KV buffers registered");
  if (auto err = check_buffers(cfg.memory.kv, "kv"))
    return err;
  if (auto err = check_buffers(cfg.memory.aux, "aux"))
    return err;
  if (auto err = check_buffers(cfg.memory.state, "state"))
    return err;
  for (auto& b : cfg.memory.kv)
    if (b.mem.device_id != kv_device_id(cfg.memory))
      return make_error(errc::invalid_config,
                        "kv buffers span devices " + std::to_string(kv_device_id(cfg.memory))
                          + " and " + std::to_string(b.mem.device_id)
                          + " (a rank's KV cache lives on one device)");
  auto where = [](int32_t device) {
    return device < 0 ? std::string{"the host"} : "GPU " + std::to_string(device);
  };
  // State writes ride in the batch of the KV pages, which has one memory
  // kind per side.
  for (auto& b : cfg.memory.state)
    if (b.mem.device_id != kv_device_id(cfg.memory))
      return make_error(errc::invalid_config,
                        "a state buffer on " + where(b.mem.device_id) + " beside KV buffers on "
                          + where(kv_device_id(cfg.memory))
                          + ": not supported (state moves in the KV pages' batch)");
  // Aux writes move in a batch of their own where they sit elsewhere: on
  // the host beside a GPU KV cache (SGLang's metadata buffers), never on a
  // third device.
  for (auto& b : cfg.memory.aux)
    if (b.mem.device_id != aux_device_id(cfg.memory)
        || (b.mem.device_id >= 0 && b.mem.device_id != kv_device_id(cfg.memory)))
      return make_error(errc::invalid_config,
                        "an aux buffer on " + where(b.mem.device_id) + " beside KV buffers on "
                          + where(kv_device_id(cfg.memory)) + " and aux on "
                          + where(aux_device_id(cfg.memory))
                          + ": aux lives on the KV's device or on the host, all in one place");
  if (auto& x = cfg.parallel) {
    if (auto why = check(*x); !why.empty())
      return make_error(errc::invalid_config, "parallel layout: " + why);
    if (x->tp_size != cfg.tp_size || x->tp_rank != cfg.tp_rank)
      return make_error(errc::invalid_config,
                        "parallel layout: TP rank " + std::to_string(x->tp_rank) + " of "
                          + std::to_string(x->tp_size) + ", the rank is "
                          + std::to_string(cfg.tp_rank) + " of " + std::to_string(cfg.tp_size));
    if (cfg.memory.kv.size() != static_cast<size_t>(x->kv_buffers()))
      return make_error(errc::invalid_config,
                        "parallel layout: " + std::to_string(x->layers) + " layers need "
                          + std::to_string(x->kv_buffers())
                          + (x->mla ? " KV buffers (one latent buffer each), "
                                    : " KV buffers (K and V), ")
                          + std::to_string(cfg.memory.kv.size()) + " registered");
    for (size_t b = 0; b < cfg.memory.kv.size(); ++b)
      if (cfg.memory.kv[b].page_size_bytes != x->page_bytes())
        return make_error(errc::invalid_config,
                          "parallel layout: pages of " + std::to_string(x->page_bytes())
                            + " B (tokens x heads x head_dim x bytes), KV buffer "
                            + std::to_string(b) + " has "
                            + std::to_string(cfg.memory.kv[b].page_size_bytes) + " B");
  }
  auto* row = find_transport(cfg.transport);
  if (cfg.transport != "auto" && !row)
    return make_error(errc::invalid_config, "transport must be auto or one of "
                                              + transport_names_text() + ", not '"
                                              + cfg.transport + "'");
  if (row && row->needs_network && !cfg.network)
    return make_error(errc::invalid_config,
                      "transport " + cfg.transport + " needs network = true");
  auto& t = cfg.timeouts;
  if (t.bootstrap_ms == 0 || t.waiting_ms == 0 || t.transferring_ms == 0)
    return make_error(errc::invalid_config,
                      "every room timeout must be positive");
  if (cfg.chaos.delay_probability < 0.0 || cfg.chaos.delay_probability > 1.0)
    return make_error(errc::invalid_config,
                      "chaos delay probability must lie in [0, 1]");
  if (cfg.network) {
    auto hosts = split_hosts(cfg.tcp_host);
    if (hosts.empty() || hosts.size() > 8)
      return make_error(errc::invalid_config, "tcp_host must name 1 to 8 addresses, not '"
                                                + cfg.tcp_host + "'");
  }
  if (cfg.integrity != integrity_mode::off && kv_device_id(cfg.memory) >= 0)
    return make_error(errc::unsupported, "integrity " + to_string(cfg.integrity)
                                           + " hashes host memory; this rank's KV cache is on GPU "
                                           + std::to_string(kv_device_id(cfg.memory)));
  if (cfg.data_timeout_ms == 0)
    return make_error(errc::invalid_config, "data_timeout_ms must be positive");
  auto& r = cfg.paths.rules;
  if (r.errors_to_rest == 0 || r.error_window_ms == 0 || r.first_rest_ms == 0
      || r.max_rest_ms < r.first_rest_ms || cfg.paths.max_paths == 0)
    return make_error(errc::invalid_config,
                      "path rules: errors to rest, error window, first rest and remembered "
                      "paths must be positive, and the longest rest at least the first");
  auto& l = cfg.limits;
  if (l.max_rooms == 0 || l.max_parked == 0 || l.max_queued_chunks == 0
      || l.max_queued_jobs == 0 || l.query_timeout_ms == 0)
    return make_error(errc::invalid_config, "every limit must be positive");
  return caf::none;
}

} // namespace kvroom
