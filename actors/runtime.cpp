#include "kvroom/api/runtime.hpp"

#include "kvroom/transport/device_memory.hpp"

#include "kvroom/actors/counted_actor.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "caf/all.hpp"
#include "caf/io/all.hpp"
#include "caf/openssl/manager.hpp"

#include "kvroom/actors/control/bootstrap_registry.hpp"
#include "kvroom/actors/control/control_door.hpp"
#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/control/directory_stores.hpp"
#include "kvroom/actors/control/link_keeper.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/quiet_clock.hpp"
#include "kvroom/api/rank.hpp"
#include "kvroom/messages/assert.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/messages/registration.hpp"

namespace kvroom {

bool known_scheduler_policy(const std::string& name) noexcept {
  return name == "central" || name == "sharing" || name == "stealing";
}

caf::error check_options(const runtime_options& opts) {
  auto bad = [](std::string what) { return make_error(errc::invalid_config, std::move(what)); };
  if (!known_scheduler_policy(opts.scheduler_policy))
    return bad("scheduler policy '" + opts.scheduler_policy
               + "': it must be central, sharing or stealing");
  if (!known_log_level(opts.log_level))
    return bad("log level '" + opts.log_level
               + "': it must be trace, debug, info, warn, error, critical or off");
  int tls = !opts.tls_certificate.empty() + !opts.tls_key.empty() + !opts.tls_cafile.empty();
  if (tls != 0 && tls != 3)
    return bad("control-plane TLS needs a certificate, a key and a CA file, all three");
  if (opts.network && opts.heartbeat_ms == 0)
    return bad("a heartbeat of 0 ms: peers on the network need one to be found lost");
  if (opts.network && opts.connection_timeout_ms <= opts.heartbeat_ms)
    return bad("a connection timeout of " + std::to_string(opts.connection_timeout_ms)
               + " ms is not above the heartbeat of " + std::to_string(opts.heartbeat_ms)
               + " ms: a healthy peer would be declared lost");
  return caf::none;
}

void prepare_config(caf::actor_system_config& cfg,
                    const runtime_options& opts) {
  if (auto err = check_options(opts))
    throw std::invalid_argument("kvroom: " + describe(err));
  add_message_types(cfg);
  auto policy = caf::atom_from_string(opts.scheduler_policy);
  // "central" is kvroom's own policy (actors/central_policy.hpp), run by
  // kvroom's coordinator only; with CAF's clock CAF runs its work sharing.
  bool central = policy == caf::atom("central");
  cfg.set("scheduler.policy", central ? caf::atom("sharing") : policy);
  if (opts.quiet_clock)
    detail::load_quiet_scheduler(cfg, policy);
  auto threads = opts.max_threads;
  if (threads == 0)
    threads = std::max<size_t>(2, std::thread::hardware_concurrency());
  cfg.set("scheduler.max-threads", threads);
  if (opts.network) {
    cfg.load<caf::io::middleman>();
    if (!opts.tls_certificate.empty() || !opts.tls_key.empty() || !opts.tls_cafile.empty()) {
      cfg.load<caf::openssl::manager>();
      cfg.openssl_certificate = opts.tls_certificate;
      cfg.openssl_key = opts.tls_key;
      cfg.openssl_cafile = opts.tls_cafile;
    }
    // Control messages between ranks that met through the registry are
    // relayed by the registry's node (bulk bytes never are). CAF 0.17's
    // automatic direct connections were seen to report healthy peers as
    // unreachable, which fails their rooms; peer loss is reported through
    // the relay too.
    cfg.set("middleman.enable-automatic-connections", false);
    cfg.set("middleman.heartbeat-interval",
            caf::timespan{std::chrono::milliseconds(opts.heartbeat_ms)});
    cfg.set("middleman.connection-timeout",
            caf::timespan{std::chrono::milliseconds(opts.connection_timeout_ms)});
  }
  set_log_level(opts.log_level);
}

runtime::runtime(runtime_options opts)
  : owned_cfg_(std::make_unique<caf::actor_system_config>()) {
  prepare_config(*owned_cfg_, opts);
  owned_sys_ = std::make_unique<caf::actor_system>(*owned_cfg_);
  sys_ = owned_sys_.get();
  init(opts.max_ranks, std::move(opts.secret));
}

runtime::runtime(caf::actor_system& sys, uint32_t max_ranks, deployment_secret secret)
  : sys_(&sys) {
  init(max_ranks, std::move(secret));
}

void runtime::init(uint32_t max_ranks, deployment_secret secret) {
  max_ranks_ = max_ranks;
  if (secret.insecure() && sys_->has_middleman())
    logger()->warn("kvroom: no deployment secret: ranks on the network are not authenticated "
                   "(anyone who reaches a port can join)");
  // Before anything is published: every control endpoint of this process
  // opens through the door, every control connection passes its gate.
  if (sys_->has_middleman() && !sys_->has_openssl_manager())
    door_ = std::make_unique<detail::control_door>(detail::install_control_door(*sys_, secret));
  members_ = std::make_shared<const membership>(std::move(secret));
  link_keeper_ = sys_->spawn(link_keeper, true);
  registry_ = sys_->spawn(bootstrap_registry, max_ranks, members_);
}

void runtime::stop_local_registry() {
  caf::scoped_actor self{*sys_};
  self->send_exit(registry_, caf::exit_reason::user_shutdown);
}

runtime::~runtime() {
  // Ranks hold actors of this system and scoped actors on it: destroying the
  // system under them would deadlock or dangle.
  KVROOM_ASSERT(live_ranks_ == 0);
  // Only a registry of our own: a remote one serves the rest of the
  // deployment after this process is gone.
  if (registry_ && registry_.node() == sys_->node())
    stop_local_registry();
  registry_ = nullptr;
  {
    caf::scoped_actor self{*sys_};
    self->send_exit(link_keeper_, caf::exit_reason::user_shutdown);
  }
  link_keeper_ = nullptr;
  if (door_)
    detail::remove_control_door(*sys_, *door_);
  owned_sys_.reset();
}

void runtime::chaos_drop_rank(rank_id id, std::chrono::milliseconds delay) {
  // The registry takes it only from this process: from an actor of ours.
  caf::scoped_actor self{*sys_};
  self->delayed_send(registry_, delay, chaos_drop_atom::value, id);
}

caf::expected<uint16_t> runtime::publish_registry(uint16_t port,
                                                  const std::string& host) {
  if (!sys_->has_middleman())
    return make_error(errc::invalid_config,
                      "publishing the registry needs runtime_options.network");
  if (registry_.node() != sys_->node())
    return make_error(errc::invalid_config,
                      "this runtime uses a remote registry; it has none to publish");
  auto res = detail::publish_control(*sys_, registry_, port, host);
  if (!res)
    return make_error(errc::unavailable, "cannot publish the bootstrap registry on port "
                                           + std::to_string(port) + ": "
                                           + sys_->render(res.error()));
  return *res;
}

caf::error runtime::connect_registry(const std::string& host, uint16_t port,
                                     uint32_t timeout_ms) {
  if (!sys_->has_middleman())
    return make_error(errc::invalid_config,
                      "a remote registry needs runtime_options.network");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto backoff = std::chrono::milliseconds(50);
  std::string last;
  for (;;) {
    auto remote = detail::connect_control(*sys_, host, port);
    if (remote) {
      if (registry_.node() == sys_->node())
        stop_local_registry();
      registry_ = std::move(*remote);
      registry_host_ = host;
      registry_port_ = port;
      registration_wait_ms_ = 15'000;
      return caf::none;
    }
    // A door that refused our proof refuses it again: say so now.
    if (remote.error() == errc::unauthorized)
      return make_error(errc::unauthorized, "bootstrap registry " + host + ":"
                                              + std::to_string(port) + ": "
                                              + sys_->render(remote.error()));
    last = sys_->render(remote.error());
    if (std::chrono::steady_clock::now() + backoff > deadline)
      break;
    logger()->debug("bootstrap registry {}:{} not reachable yet ({}), retrying in {} ms", host,
                    port, last, backoff.count());
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return make_error(errc::unavailable, "bootstrap registry " + host + ":" + std::to_string(port)
                                         + " unreachable for " + std::to_string(timeout_ms)
                                         + " ms: " + last);
}

caf::error runtime::use_directory(const directory_options& opts, uint32_t timeout_ms) {
  auto store = directory_store_of(opts.url);
  if (!store)
    return store.error();
  if (!sys_->has_middleman())
    return make_error(errc::invalid_config,
                      "a directory in a store needs runtime_options.network");
  if (live_ranks_ > 0)
    return make_error(errc::invalid_config, "choose the directory before adding ranks");
  auto dir = spawn_store_directory(*sys_, **store, opts, members_, max_ranks_, timeout_ms);
  if (!dir)
    return dir.error();
  if (registry_.node() == sys_->node())
    stop_local_registry();
  registry_ = std::move(*dir);
  registry_host_.clear();
  registry_port_ = 0;
  registration_wait_ms_ = (*store)->registration_wait_ms(opts);
  return caf::none;
}

caf::expected<std::unique_ptr<rank>> runtime::add_rank(rank_config cfg) {
  // Each buffer's memory kind from its pointer, where asked.
  for (auto* buffers : {&cfg.memory.kv, &cfg.memory.aux, &cfg.memory.state})
    for (auto& b : *buffers)
      if (b.mem.device_id == mem_desc::from_pointer)
        b.mem.device_id = device_of(b.mem.addr);
  if (auto err = validate(cfg))
    return err;
  std::unique_ptr<rank> result{new rank(*this, std::move(cfg))};
  if (auto err = result->start())
    return err;
  return result;
}

} // namespace kvroom
