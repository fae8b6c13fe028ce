#include "kvroom/api/rank.hpp"
#include "kvroom/actors/rank_state.hpp"

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/actors/control/control_endpoint.hpp"
#include "kvroom/actors/room/decode_room.hpp"
#include "kvroom/actors/manager/kv_manager.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/actors/control/membership.hpp"
#include "kvroom/actors/room/prefill_room.hpp"
#include "kvroom/api/runtime.hpp"
#include "kvroom/actors/counted_actor.hpp"
#include "kvroom/actors/manager/transfer_worker.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/api/backend.hpp"
#include "kvroom/transport/paths/multipath_backend.hpp"

namespace kvroom {

namespace {

std::string room_text(room_id room) {
  return "room " + std::to_string(room);
}

} // namespace

rank::rank(runtime& rt, rank_config cfg)
  : self_(std::make_unique<state>(rt, std::move(cfg))) {
  // nop
}

const rank_ref& rank::ref() const noexcept {
  return self_->ref;
}

const rank_config& rank::config() const noexcept {
  return self_->cfg;
}

size_t rank::open_rooms() const noexcept {
  return self_->rooms.size();
}

uint64_t rank::calls_after_conclusion() const noexcept {
  return self_->calls_after_conclusion;
}

void rank::count_call_after_conclusion() noexcept {
  ++self_->calls_after_conclusion;
}

const caf::actor& rank::manager() const noexcept {
  return self_->manager;
}

caf::error rank::start() {
  auto& s = *self_;
  auto& sys = s.rt.system();
  backend_config bc;
  // GPU memory needs more than the local memcpy even inside one process.
  bc.name = s.cfg.transport == "local" && kv_device_id(s.cfg.memory) < 0 ? "local" : "auto";
  bc.owner = s.ref.id;
  bc.faults = s.cfg.faults;
  bc.network = s.cfg.network;
  bc.tcp_host = s.cfg.tcp_host;
  bc.secret = s.rt.members()->secret();
  bc.io_timeout_ms = data_path_timeout(s.cfg);
  bc.streaming_copy_bytes = s.cfg.streaming_copy_bytes;
  auto made = s.cfg.data_plane ? s.cfg.data_plane(bc) : make_backend(bc);
  if (!made)
    return std::move(made.error());
  // The path layer outermost: it sees every backend's (and the fault
  // injector's) failures per path, an embedder's data plane included.
  s.paths = std::make_shared<multipath_backend>(std::move(*made), s.cfg.paths);
  s.data_plane = s.paths;
  if (s.cfg.pull && !s.data_plane->caps().reads)
    return make_error(errc::invalid_config,
                      to_string(s.ref) + ": pull needs a data plane that reads; this rank's ("
                        + s.cfg.transport + ") does not");
  s.shortcut = std::make_shared<inline_path>(s.data_plane, s.cfg.limits.inline_copy_bytes);
  s.metrics = std::make_shared<rank_metrics>(s.ref);
  for (auto* buffers : {&s.cfg.memory.kv, &s.cfg.memory.aux, &s.cfg.memory.state})
    for (auto& b : *buffers)
      if (auto id = s.data_plane->register_memory(b.mem); !id)
        return make_error(errc::invalid_config,
                          to_string(s.ref) + ": cannot register memory: "
                            + describe(id.error()));
  s.inbox = std::make_unique<caf::scoped_actor>(sys);
  inbox_ = s.inbox->ptr();
  auto inbox = caf::actor_cast<caf::actor>(*s.inbox);
  auto endpoints = s.data_plane->endpoints();
  // The worker first: the manager hands it peers' connection messages.
  s.worker = sys.spawn<caf::detached>(transfer_worker, s.data_plane,
                                     s.cfg.limits.max_queued_jobs,
                                     s.cfg.timeouts.transferring_ms);
  s.trust = std::make_shared<trust_table>();
  kv_manager_params mp{s.ref,          s.cfg.memory, endpoints, s.cfg.limits, s.cfg.timeouts,
                       inbox,         s.cfg.chaos,  s.worker,   s.rt.members(), s.trust,
                       s.rt.registry(), s.rt.registry_host_, s.rt.registry_port_,
                       s.ref.side == role::decode ? s.data_plane : nullptr, s.cfg.parallel,
                       s.metrics,      to_string(s.cfg.integrity), s.rt.registration_wait_ms(),
                       s.rt.link_keeper_};
  s.manager = sys.spawn(kv_manager, std::move(mp));
  // Peers link to the manager directly on its own control endpoint; the
  // registry only says where it is.
  std::string control_host;
  uint16_t control_port = 0;
  if (s.cfg.network && sys.has_middleman()) {
    auto port = detail::publish_control(sys, s.manager, s.cfg.control_port, s.cfg.control_host);
    if (!port) {
      abandon();
      return make_error(errc::unavailable, to_string(s.ref) + ": cannot publish the control "
                                             "endpoint on " + s.cfg.control_host + ":"
                                             + std::to_string(s.cfg.control_port) + ": "
                                             + sys.render(port.error()));
    }
    control_host = s.cfg.control_host;
    control_port = *port;
  }
  rank_entry entry;
  entry.rank = s.ref;
  entry.manager = s.manager;
  entry.layout = s.cfg.memory;
  entry.endpoints = endpoints;
  entry.control_host = control_host;
  entry.control_port = control_port;
  entry.has_parallel = s.cfg.parallel.has_value();
  entry.integrity = to_string(s.cfg.integrity);
  if (s.cfg.parallel)
    entry.parallel = *s.cfg.parallel;
  s.entry = std::make_shared<const rank_entry>(std::move(entry));
  auto shared = std::make_shared<room_context>();
  shared->self = s.ref;
  shared->manager = s.manager;
  shared->inbox = inbox;
  shared->timeouts = s.cfg.timeouts;
  shared->self_entry = s.entry;
  shared->worker = s.worker;
  shared->shortcut = s.shortcut;
  shared->max_queued_chunks = s.cfg.limits.max_queued_chunks;
  shared->transport = s.cfg.transport == "local" ? "auto" : s.cfg.transport;
  shared->protocol.fence = !s.cfg.chaos.no_fence;
  shared->protocol.one_decider = !s.cfg.chaos.local_decisions;
  shared->monitor_manager = s.cfg.chaos.keep_room_monitors;
  shared->trust = s.trust;
  // Decode rooms grant and revoke writes, prefill rooms reads (a pull).
  shared->data_plane = s.data_plane;
  s.room_shared = std::move(shared);
  // A manager or worker that dies takes the rank's rooms with it: say so.
  auto who = to_string(s.ref);
  s.manager->attach_functor([who](const caf::error& reason) {
    if (reason && reason != caf::exit_reason::user_shutdown)
      logger()->error("{}: kv manager exited: {}", who, caf::to_string(reason));
  });
  s.worker->attach_functor([who](const caf::error& reason) {
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
    ->request(s.manager,
              std::chrono::milliseconds(std::max(2 * s.cfg.limits.query_timeout_ms + 500,
                                                 s.rt.registration_wait_ms() + 1000)),
              join_atom::value, control_host, control_port)
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               result = make_error(errc::unavailable, to_string(s.ref)
                                                        + ": bootstrap registration failed: "
                                                        + describe(err));
             });
  if (!result) {
    ++s.rt.live_ranks_;
    return result;
  }
  abandon();
  return result;
}

rank::~rank() {
  auto& s = *self_;
  // Handles may outlive the rank: they never touch it again, and a room
  // that was live reads Failed.
  for (auto& kvp : s.rooms) {
    auto& slot = *kvp.second;
    slot.rank_gone = true;
    slot.cleared = true;
    if (!is_terminal(slot.state)) {
      slot.state = kv_poll::failed;
      slot.failure = kv_transfer_error{slot.room, "rank " + to_string(s.ref)
                                                    + " was closed while the room was live",
                                       false, s.ref.id, failure_cause::peer_lost};
    }
  }
  // The control port goes with the rank (an embedder may start another).
  if (s.entry && s.entry->control_port != 0 && s.manager)
    detail::unpublish_control(s.rt.system(), s.manager, s.entry->control_port);
  // No room copies from (or into) this rank's memory after this.
  if (s.shortcut)
    s.shortcut->close();
  if (s.inbox) {
    auto& self = *s.inbox;
    // Room actors follow their manager. Waiting for the worker guarantees no
    // memcpy from this rank's memory runs once the rank is gone.
    if (s.manager)
      self->send_exit(s.manager, caf::exit_reason::user_shutdown);
    if (s.worker)
      self->send_exit(s.worker, caf::exit_reason::user_shutdown);
    if (s.manager && s.worker)
      self->wait_for(s.manager, s.worker);
    --s.rt.live_ranks_;
  }
  inbox_ = nullptr;
  s.room_shared.reset();
  s.inbox.reset();
  s.data_plane.reset();
}

void rank::abandon() {
  auto& s = *self_;
  // Not started: nothing of this rank may stay behind, and the destructor
  // has nothing to undo.
  caf::scoped_actor tmp{s.rt.system()};
  tmp->send_exit(s.manager, caf::exit_reason::user_shutdown);
  tmp->send_exit(s.worker, caf::exit_reason::user_shutdown);
  tmp->wait_for(s.manager, s.worker);
  s.manager = nullptr;
  s.worker = nullptr;
  s.room_shared.reset();
  inbox_ = nullptr;
  s.inbox.reset();
}

template <class Handle>
caf::expected<Handle> rank::open(room_id room, role side, int32_t peer_dp,
                                 const caf::actor& listener) {
  auto& s = *self_;
  if (side != s.ref.side)
    return make_error(errc::invalid_argument,
                      to_string(s.ref) + " cannot open the "
                        + (side == role::prefill ? std::string{"sender"}
                                                 : std::string{"receiver"})
                        + " side of a room");
  if (s.rooms.count(room) > 0)
    return make_error(errc::duplicate_room,
                      room_text(room) + " is already open on "
                        + to_string(s.ref));
  if (s.rooms.size() >= s.cfg.limits.max_rooms)
    return make_error(errc::limit_reached,
                      to_string(s.ref) + " has "
                        + std::to_string(s.rooms.size())
                        + " rooms open (limit "
                        + std::to_string(s.cfg.limits.max_rooms) + ")");
  if (peer_dp < 0)
    return make_error(errc::invalid_argument,
                      "prefill_dp_rank must not be negative");
  room_params p;
  p.room = room;
  p.shared = s.room_shared;
  p.listener = listener;
  p.peer_dp_rank = peer_dp;
  p.pull = side == role::decode && s.cfg.pull;
  p.opened_ms = room_timing::now();
  auto& sys = s.rt.system();
  // The actor starts with its first message (lazy_init): a job of its own
  // only to start would be one more scheduling per room, and most rooms
  // hear from their scheduler or manager at once. The manager hears of the
  // room from here, in the room's name, before anything the room sends,
  // and its answer (the prefill group, parked destinations) or the
  // scheduler's init starts it; a room that hears from nobody is started
  // by the manager's first tick, its deadlines counted from `opened_ms`.
  auto actor = side == role::prefill ? sys.spawn<caf::lazy_init>(prefill_room, std::move(p))
                                     : sys.spawn<caf::lazy_init>(decode_room, std::move(p));
  caf::send_as(actor, s.manager,
               room_opened{room, actor, side == role::prefill ? s.ref.dp_rank : peer_dp});
  auto slot = std::make_shared<detail::room_slot>();
  slot->room = room;
  slot->side = side;
  slot->actor = std::move(actor);
  s.rooms.emplace(room, slot);
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
  auto& s = *self_;
  auto i = s.rooms.find(room);
  if (i == s.rooms.end() || i->second->side != role::prefill)
    return make_error(errc::unknown_room,
                      "no open sender for " + room_text(room) + " on "
                        + to_string(s.ref));
  return kv_sender{const_cast<rank*>(this), i->second};
}

caf::expected<kv_receiver> rank::receiver(room_id room) const {
  auto& s = *self_;
  auto i = s.rooms.find(room);
  if (i == s.rooms.end() || i->second->side != role::decode)
    return make_error(errc::unknown_room,
                      "no open receiver for " + room_text(room) + " on "
                        + to_string(s.ref));
  return kv_receiver{const_cast<rank*>(this), i->second};
}

std::string rank::control_address() const {
  auto& s = *self_;
  if (!s.entry || s.entry->control_port == 0)
    return {};
  return s.entry->control_host + ":" + std::to_string(s.entry->control_port);
}

metrics_snapshot rank::metrics() const {
  auto& s = *self_;
  auto out = s.metrics ? s.metrics->snapshot() : metrics_snapshot{};
  if (s.paths)
    out.paths = s.paths->counters();
  return out;
}

std::vector<path_report> rank::paths() const {
  auto& s = *self_;
  return s.paths ? s.paths->paths() : std::vector<path_report>{};
}

std::string rank::data_plane_address(const std::string& transport) const {
  for (auto& e : self_->entry->endpoints)
    if (e.transport == transport)
      return e.address;
  return {};
}

caf::actor rank::room_actor(room_id room) const {
  auto& s = *self_;
  auto i = s.rooms.find(room);
  return i == s.rooms.end() ? caf::actor{} : i->second->actor;
}

void rank::state::apply(const room_event& ev) {
  auto i = rooms.find(ev.room);
  if (i == rooms.end())
    return;
  auto& slot = *i->second;
  slot.state = ev.state;
  slot.decode_prefix_len = ev.decode_prefix_len;
  if (ev.state == kv_poll::failed && !slot.failure)
    slot.failure = ev.error;
}

void rank::state::apply(const room_landed& ev) {
  auto i = rooms.find(ev.room);
  if (i == rooms.end())
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
  // Element by element with `dequeue()`, not through `receive`: a blocking
  // actor's receive builds a behavior on the heap and runs CAF's matching
  // and timeout machinery for every message, several times what applying a
  // room_event costs, on the scheduler's thread. `dequeue()` blocks on an
  // empty mailbox, so it is asked only while the mailbox holds something;
  // this thread is the mailbox's one reader. (Taking elements off its queues
  // here would compile CAF's intrusive queue templates into kvroom, and the
  // library's own calls would then run those copies: under UBSan they stop
  // on the queues' sentinel casts.) Only rooms send here; anything else is
  // dropped, as before.
  auto* inbox = inbox_;
  uint64_t n = 0;
  while (!inbox->mailbox().empty()) {
    auto ptr = inbox->dequeue();
    if (!ptr)
      break;
    ++n;
    auto& msg = ptr->content();
    if (msg.match_elements<room_event>())
      self_->apply(msg.get_as<room_event>(0));
    else if (msg.match_elements<room_landed>())
      self_->apply(msg.get_as<room_landed>(0));
  }
  if (n > 0)
    detail::handled_messages.fetch_add(n, std::memory_order_relaxed);
}

caf::expected<manager_stats> rank::stats() {
  auto& s = *self_;
  caf::scoped_actor tmp{s.rt.system()};
  caf::expected<manager_stats> result{make_error(errc::timeout)};
  tmp
    ->request(s.manager, std::chrono::milliseconds(s.cfg.limits.query_timeout_ms),
              get_stats{})
    .receive([&](manager_stats& st) { result = st; },
             [&](caf::error& err) {
               result = make_error(errc::timeout,
                                   "stats query: " + caf::to_string(err));
             });
  return result;
}

caf::expected<side_shape> rank::shape_of_side(role side) {
  auto& s = *self_;
  caf::scoped_actor tmp{s.rt.system()};
  caf::expected<side_shape> result{make_error(errc::timeout)};
  tmp
    ->request(s.manager, std::chrono::milliseconds(s.cfg.limits.query_timeout_ms),
              get_side_shape{side})
    .receive([&](side_shape& x) { result = x; },
             [&](caf::error& err) {
               result = make_error(errc::timeout, "side query: " + caf::to_string(err));
             });
  return result;
}

void rank::forget(room_id room) {
  self_->rooms.erase(room);
}

} // namespace kvroom
