#include "actors/runtime.hpp"

#include <algorithm>
#include <thread>

#include "caf/all.hpp"

#include "actors/bootstrap_registry.hpp"
#include "actors/logging.hpp"
#include "actors/rank.hpp"
#include "messages/assert.hpp"
#include "messages/registration.hpp"

namespace kvroom {

void prepare_config(caf::actor_system_config& cfg,
                    const runtime_options& opts) {
  add_message_types(cfg);
  cfg.set("scheduler.policy", caf::atom_from_string(opts.scheduler_policy));
  auto threads = opts.max_threads;
  if (threads == 0)
    threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", threads);
  set_log_level(opts.log_level);
}

runtime::runtime(runtime_options opts)
  : owned_cfg_(std::make_unique<caf::actor_system_config>()) {
  prepare_config(*owned_cfg_, opts);
  owned_sys_ = std::make_unique<caf::actor_system>(*owned_cfg_);
  sys_ = owned_sys_.get();
  registry_ = sys_->spawn(bootstrap_registry, opts.max_ranks);
}

runtime::runtime(caf::actor_system& sys, uint32_t max_ranks) : sys_(&sys) {
  registry_ = sys_->spawn(bootstrap_registry, max_ranks);
}

runtime::~runtime() {
  // Ranks hold actors of this system and scoped actors on it: destroying the
  // system under them would deadlock or dangle.
  KVROOM_ASSERT(live_ranks_ == 0);
  caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
  registry_ = nullptr;
  owned_sys_.reset();
}

caf::expected<std::unique_ptr<rank>> runtime::add_rank(const rank_config& cfg) {
  if (auto err = validate(cfg))
    return err;
  std::unique_ptr<rank> result{new rank(*this, cfg)};
  if (auto err = result->start())
    return err;
  return result;
}

} // namespace kvroom
