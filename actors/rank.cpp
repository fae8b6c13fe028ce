#include "kvroom/actors/rank.hpp"

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/room/decode_room.hpp"
#include "kvroom/actors/manager/kv_manager.hpp"
#include "kvroom/actors/logging.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/room/prefill_room.hpp"
#include "kvroom/actors/runtime.hpp"
#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/manager/transfer_worker.hpp"
#include "kvroom/messages/error.hpp"
#include "kvroom/transport/factory.hpp"
#include "kvroom/transport/paths/multipath_backend.hpp"

namespace kvroom {

namespace {

std::string room_text(room_id room) {
  return "room " + std::to_string(room);
}

} // namespace

rank::rank(runtime& rt, rank_config cfg)
  : rt_(rt), cfg_(std::move(cfg)), ref_(cfg_.ref()) {
  // nop
}

caf::error rank::start() {
  auto& sys = rt_.system();
  backend_config bc;
  // GPU memory needs more than the local memcpy even inside one process.
  bc.name = cfg_.transport == "local" && kv_device_id(cfg_.memory) < 0 ? "local" : "auto";
  bc.owner = ref_.id;
  bc.faults = cfg_.faults;
  bc.network = cfg_.network;
  bc.tcp_host = cfg_.tcp_host;
  bc.secret = rt_.members()->secret();
  bc.io_timeout_ms = data_path_timeout(cfg_);
  auto made = cfg_.data_plane ? cfg_.data_plane(bc) : make_backend(bc);
  if (!made)
    return std::move(made.error());
  // The path layer outermost: it sees every backend's (and the fault
  // injector's) failures per path, an embedder's data plane included.
  paths_ = std::make_shared<multipath_backend>(std::move(*made), cfg_.paths);
  data_plane_ = paths_;
  if (cfg_.pull && !data_plane_->caps().reads)
    return make_error(errc::invalid_config,
                      to_string(ref_) + ": pull needs a data plane that reads; this rank's ("
                        + cfg_.transport + ") does not");
  shortcut_ = std::make_shared<inline_path>(data_plane_, cfg_.limits.inline_copy_bytes);
  metrics_ = std::make_shared<rank_metrics>(ref_);
  for (auto* buffers : {&cfg_.memory.kv, &cfg_.memory.aux, &cfg_.memory.state})
    for (auto& b : *buffers)
      if (auto id = data_plane_->register_memory(b.mem); !id)
        return make_error(errc::invalid_config,
                          to_string(ref_) + ": cannot register memory: "
                            + describe(id.error()));
  inbox_ = std::make_unique<caf::scoped_actor>(sys);
  auto inbox = caf::actor_cast<caf::actor>(*inbox_);
  auto endpoints = data_plane_->endpoints();
  // The worker first: the manager hands it peers' connection messages.
  worker_ = sys.spawn<caf::detached>(transfer_worker, data_plane_,
                                     cfg_.limits.max_queued_jobs,
                                     cfg_.timeouts.transferring_ms);
  trust_ = std::make_shared<trust_table>();
  kv_manager_params mp{ref_,          cfg_.memory, endpoints, cfg_.limits, cfg_.timeouts,
                       inbox,         cfg_.chaos,  worker_,   rt_.members(), trust_,
                       rt_.registry(), rt_.registry_host_, rt_.registry_port_,
                       ref_.side == role::decode ? data_plane_ : nullptr, cfg_.parallel,
                       metrics_,      to_string(cfg_.integrity), rt_.registration_wait_ms(),
                       rt_.link_keeper_};
  manager_ = sys.spawn(kv_manager, std::move(mp));
  // Peers link to the manager directly on its own control endpoint; the
  // registry only says where it is.
  std::string control_host;
  uint16_t control_port = 0;
  if (cfg_.network && sys.has_middleman()) {
    auto port = detail::publish_control(sys, manager_, cfg_.control_port, cfg_.control_host);
    if (!port) {
      abandon();
      return make_error(errc::unavailable, to_string(ref_) + ": cannot publish the control "
                                             "endpoint on " + cfg_.control_host + ":"
                                             + std::to_string(cfg_.control_port) + ": "
                                             + sys.render(port.error()));
    }
    control_host = cfg_.control_host;
    control_port = *port;
  }
  rank_entry entry;
  entry.rank = ref_;
  entry.manager = manager_;
  entry.layout = cfg_.memory;
  entry.endpoints = endpoints;
  entry.control_host = control_host;
  entry.control_port = control_port;
  entry.has_parallel = cfg_.parallel.has_value();
  entry.integrity = to_string(cfg_.integrity);
  if (cfg_.parallel)
    entry.parallel = *cfg_.parallel;
  entry_ = std::make_shared<const rank_entry>(std::move(entry));
  // A manager or worker that dies takes the rank's rooms with it: say so.
  auto who = to_string(ref_);
  manager_->attach_functor([who](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown)
      logger()->error("{}: kv manager exited: {}", who, caf::to_string(reason));
  });
  worker_->attach_functor([who](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown)
      logger()->error("{}: transfer worker exited: {}", who, caf::to_string(reason));
  });
  caf::error result;
  // Asked from a short-lived actor, never the inbox: CAF 0.17 still delivers
  // the request's timeout after the reply came, and with that late message
  // in the inbox every later drain got slower (measured: 2P x 2D fell from
  // ~10 K to ~1.5 K rooms/s exactly query_timeout_ms after start; the drop
  // moved with the timeout and is gone with this).
  caf::scoped_actor registrar{sys};
  registrar
    ->request(manager_,
              std::chrono::milliseconds(std::max(2 * cfg_.limits.query_timeout_ms + 500,
                                                 rt_.registration_wait_ms() + 1000)),
              join_atom::value, control_host, control_port)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               result = make_error(errc::unavailable, to_string(ref_)
                                                        + ": bootstrap registration failed: "
                                                        + describe(err));
             });
  if (!result) {
    ++rt_.live_ranks_;
    return result;
  }
  abandon();
  return result;
}

rank::~rank() {
  // Handles may outlive the rank: they never touch it again, and a room
  // that was live reads Failed.
  for (auto& kvp : rooms_) {
    auto& slot = *kvp.second;
    slot.rank_gone = true;
    slot.cleared = true;
    if (!is_terminal(slot.state)) {
      slot.state = kv_poll::failed;
      slot.failure = kv_transfer_error{slot.room, "rank " + to_string(ref_)
                                                    + " was closed while the room was live",
                                       false, ref_.id, failure_cause::peer_lost};
    }
  }
  // The control port goes with the rank (an embedder may start another).
  if (entry_ && entry_->control_port != 0 && manager_)
    detail::unpublish_control(rt_.system(), manager_, entry_->control_port);
  // No room copies from (or into) this rank's memory after this.
  if (shortcut_)
    shortcut_->close();
  if (inbox_) {
    auto& self = *inbox_;
    // Room actors follow their manager. Waiting for the worker guarantees no
    // memcpy from this rank's memory runs once the rank is gone.
    if (manager_)
      self->send_exit(manager_, caf::exit_reason::user_shutdown);
    if (worker_)
      self->send_exit(worker_, caf::exit_reason::user_shutdown);
    if (manager_ && worker_)
      self->wait_for(manager_, worker_);
    --rt_.live_ranks_;
  }
  inbox_.reset();
  data_plane_.reset();
}

void rank::abandon() {
  // Not started: nothing of this rank may stay behind, and the destructor
  // has nothing to undo.
  caf::scoped_actor tmp{rt_.system()};
  tmp->send_exit(manager_, caf::exit_reason::user_shutdown);
  tmp->send_exit(worker_, caf::exit_reason::user_shutdown);
  tmp->wait_for(manager_, worker_);
  manager_ = nullptr;
  worker_ = nullptr;
  inbox_.reset();
}

template <class Handle>
caf::expected<Handle> rank::open(room_id room, role side, int32_t peer_dp,
                                 const caf::actor& listener) {
  if (side != ref_.side)
    return make_error(errc::invalid_argument,
                      to_string(ref_) + " cannot open the "
                        + (side == role::prefill ? std::string{"sender"}
                                                 : std::string{"receiver"})
                        + " side of a room");
  if (rooms_.count(room) > 0)
    return make_error(errc::duplicate_room,
                      room_text(room) + " is already open on "
                        + to_string(ref_));
  if (rooms_.size() >= cfg_.limits.max_rooms)
    return make_error(errc::limit_reached,
                      to_string(ref_) + " has "
                        + std::to_string(rooms_.size())
                        + " rooms open (limit "
                        + std::to_string(cfg_.limits.max_rooms) + ")");
  if (peer_dp < 0)
    return make_error(errc::invalid_argument,
                      "prefill_dp_rank must not be negative");
  room_params p;
  p.room = room;
  p.self = ref_;
  p.manager = manager_;
  p.inbox = caf::actor_cast<caf::actor>(*inbox_);
  p.listener = listener;
  p.timeouts = cfg_.timeouts;
  p.self_entry = entry_;
  p.worker = worker_;
  p.shortcut = shortcut_;
  p.peer_dp_rank = peer_dp;
  p.max_queued_chunks = cfg_.limits.max_queued_chunks;
  p.transport = cfg_.transport == "local" ? "auto" : cfg_.transport;
  p.protocol.fence = !cfg_.chaos.no_fence;
  p.protocol.one_decider = !cfg_.chaos.local_decisions;
  p.monitor_manager = cfg_.chaos.keep_room_monitors;
  p.trust = trust_;
  // Decode rooms grant and revoke writes, prefill rooms reads (a pull).
  p.data_plane = data_plane_;
  p.pull = side == role::decode && cfg_.pull;
  auto& sys = rt_.system();
  // The room announces itself to the manager as its first act, so the
  // manager hears of it before anything else the room sends.
  auto actor = side == role::prefill ? sys.spawn(prefill_room, std::move(p))
                                     : sys.spawn(decode_room, std::move(p));
  auto slot = std::make_shared<detail::room_slot>();
  slot->room = room;
  slot->side = side;
  slot->actor = std::move(actor);
  rooms_.emplace(room, slot);
  return Handle{this, std::move(slot)};
}

caf::expected<kv_sender> rank::make_sender(room_id room,
                                           const caf::actor& listener) {
  return open<kv_sender>(room, role::prefill, 0, listener);
}

caf::expected<kv_receiver> rank::make_receiver(room_id room,
                                               int32_t prefill_dp_rank,
                                               const caf::actor& listener) {
  return open<kv_receiver>(room, role::decode, prefill_dp_rank, listener);
}

caf::expected<kv_sender> rank::sender(room_id room) const {
  auto i = rooms_.find(room);
  if (i == rooms_.end() || i->second->side != role::prefill)
    return make_error(errc::unknown_room,
                      "no open sender for " + room_text(room) + " on "
                        + to_string(ref_));
  return kv_sender{const_cast<rank*>(this), i->second};
}

caf::expected<kv_receiver> rank::receiver(room_id room) const {
  auto i = rooms_.find(room);
  if (i == rooms_.end() || i->second->side != role::decode)
    return make_error(errc::unknown_room,
                      "no open receiver for " + room_text(room) + " on "
                        + to_string(ref_));
  return kv_receiver{const_cast<rank*>(this), i->second};
}

std::string rank::control_address() const {
  if (!entry_ || entry_->control_port == 0)
    return {};
  return entry_->control_host + ":" + std::to_string(entry_->control_port);
}

metrics_snapshot rank::metrics() const {
  auto out = metrics_ ? metrics_->snapshot() : metrics_snapshot{};
  if (paths_)
    out.paths = paths_->counters();
  return out;
}

std::vector<path_report> rank::paths() const {
  return paths_ ? paths_->paths() : std::vector<path_report>{};
}

std::string rank::data_plane_address(const std::string& transport) const {
  for (auto& e : entry_->endpoints)
    if (e.transport == transport)
      return e.address;
  return {};
}

caf::actor rank::room_actor(room_id room) const {
  auto i = rooms_.find(room);
  return i == rooms_.end() ? caf::actor{} : i->second->actor;
}

void rank::apply(const room_event& ev) {
  auto i = rooms_.find(ev.room);
  if (i == rooms_.end())
    return;
  auto& slot = *i->second;
  slot.state = ev.state;
  slot.decode_prefix_len = ev.decode_prefix_len;
  if (ev.state == kv_poll::failed && !slot.failure)
    slot.failure = ev.error;
}

void rank::apply(const room_landed& ev) {
  auto i = rooms_.find(ev.room);
  if (i == rooms_.end())
    return;
  auto& landed = i->second->landed;
  for (auto b : ev.kv_buffers) {
    if (b < 0)
      continue;
    if (static_cast<size_t>(b) >= landed.size())
      landed.resize(static_cast<size_t>(b) + 1, false);
    landed[static_cast<size_t>(b)] = true;
  }
}

void rank::drain() {
  auto& self = *inbox_;
  while (!self->mailbox().empty()) {
    detail::handled_messages.fetch_add(1, std::memory_order_relaxed);
    self->receive([&](const room_event& ev) { apply(ev); },
                  [&](const room_landed& ev) { apply(ev); },
                  caf::others >> [](caf::message_view&) -> caf::result<caf::message> {
                    return caf::message{};
                  },
                  caf::after(std::chrono::seconds(0)) >> [] {});
  }
}

caf::expected<manager_stats> rank::stats() {
  caf::scoped_actor tmp{rt_.system()};
  caf::expected<manager_stats> result{make_error(errc::timeout)};
  tmp
    ->request(manager_, std::chrono::milliseconds(cfg_.limits.query_timeout_ms),
              get_stats{})
    .receive([&](manager_stats& st) { result = st; },
             [&](caf::error& err) {
               result = make_error(errc::timeout,
                                   "stats query: " + caf::to_string(err));
             });
  return result;
}

caf::expected<side_shape> rank::shape_of_side(role side) {
  caf::scoped_actor tmp{rt_.system()};
  caf::expected<side_shape> result{make_error(errc::timeout)};
  tmp
    ->request(manager_, std::chrono::milliseconds(cfg_.limits.query_timeout_ms),
              get_side_shape{side})
    .receive([&](side_shape& x) { result = x; },
             [&](caf::error& err) {
               result = make_error(errc::timeout, "side query: " + caf::to_string(err));
             });
  return result;
}

void rank::forget(room_id room) {
  rooms_.erase(room);
}

} // namespace kvroom
