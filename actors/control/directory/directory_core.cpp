#include "kvroom/actors/control/directory/directory_core.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <random>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/actors/control/directory_rules.hpp"
#include "kvroom/actors/control/directory/lease_keeper.hpp"
#include "kvroom/actors/control/directory/signed_entry.hpp"
#include "kvroom/actors/control/registration_door.hpp"
#include "kvroom/api/logging.hpp"
#include "kvroom/actors/room/room_timing.hpp"
#include "kvroom/messages/clock.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom::detail {

/// Watch thread -> directory: what changed under the prefix.
struct store_changes {
  std::vector<store_event> events;
};

/// Watch thread -> directory: the whole prefix, read again (the watch's
/// start revision was compacted away).
struct store_reread {
  store_snapshot all;
};

} // namespace kvroom::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::detail::store_changes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kvroom::detail::store_reread)

namespace kvroom {

namespace {

using detail::store_changes;
using detail::store_reread;

using retry_atom = caf::atom_constant<caf::atom("retry")>;
using again_atom = caf::atom_constant<caf::atom("again")>;

/// A watch that saw nothing this long starts again (on a quiet prefix,
/// one request per process every few seconds): a member frozen mid-stream
/// holds no change back for longer.
constexpr uint32_t watch_idle_ms = 10'000;

/// Streams the prefix's changes to the directory actor from its own thread,
/// resuming where it stopped on another member when one goes away.
class prefix_watch {
public:
  prefix_watch(const store_connector& connect, std::string name, std::string prefix, int64_t from,
               caf::actor target)
    : client_(connect(0)), name_(std::move(name)), prefix_(std::move(prefix)), next_(from),
      target_(std::move(target)) {
    thread_ = std::thread([this] {
      run();
      finished_ = true;
    });
  }

  ~prefix_watch() {
    stop();
  }

  void stop() {
    stopping_ = true;
    // A watch between two requests has no socket to shut yet: cancel until
    // the thread saw it.
    while (!finished_) {
      client_->cancel();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (thread_.joinable())
      thread_.join();
    target_ = nullptr;
  }

private:
  void run() {
    uint32_t backoff_ms = 50;
    std::minstd_rand rng{std::random_device{}()};
    while (!stopping_) {
      auto next = client_->watch(prefix_, next_, watch_idle_ms, [&](std::vector<store_event>& xs) {
        caf::anon_send(target_, store_changes{std::move(xs)});
      });
      if (stopping_)
        return;
      if (next) {
        next_ = *next;
        backoff_ms = 50;
        continue;
      }
      auto why = describe(next.error());
      if (why.find("compacted") != std::string::npos) {
        if (auto all = client_->range_prefix(prefix_)) {
          next_ = all->revision + 1;
          caf::anon_send(target_, store_reread{std::move(*all)});
          continue;
        }
      }
      logger()->debug("{}: watch of {} interrupted ({}); again in {} ms", name_, prefix_, why,
                      backoff_ms);
      // Jittered (every rank of a deployment sees the same member go), in
      // slices that notice a stop.
      auto pause = backoff_ms / 2 + rng() % backoff_ms;
      for (uint32_t slept = 0; slept < pause && !stopping_; slept += 20)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      backoff_ms = std::min<uint32_t>(backoff_ms * 2, 1000);
    }
  }

  std::unique_ptr<store_client> client_;
  std::string name_;
  std::string prefix_;
  int64_t next_;
  caf::actor target_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

struct local_rank {
  rank_entry entry;
  caf::actor manager;
};

/// A registration waiting for an id or place whose holder's lease may be
/// about to expire.
struct waiting_registration {
  rank_entry entry;
  caf::response_promise promise;
  /// Until when a held id or place may still clear (a lease expiring).
  uint64_t deadline_ms = 0;
  /// Until when an unreachable or overloaded store is tried again.
  uint64_t give_up_ms = 0;
  /// The lease of the rank holding the id or place, once the store said how
  /// long it has left (the deadline then follows the store's word).
  int64_t holder_lease = 0;
};

struct directory_state {
  directory_core_options opts;
  store_connector connect;
  std::shared_ptr<const membership> members;
  std::unique_ptr<store_client> client;
  std::unique_ptr<signed_entry_codec> codec;
  std::optional<registration_door> door;
  int64_t lease = 0;
  int64_t ttl_s = 0;
  /// Verified entries as the store holds them, by rank id.
  std::map<rank_id, rank_entry> table;
  std::map<rank_id, local_rank> locals;
  std::map<rank_id, waiting_registration> waiting;
  std::shared_ptr<prefix_watch> watch;
  std::shared_ptr<lease_keeper> keeper;
  /// Local ranks whose entry vanished while their lease lived, being
  /// registered again (each logged once).
  std::set<rank_id> restoring;
  uint64_t unverified = 0;
  uint64_t last_unverified_log_ms = 0;
  std::minstd_rand rng{std::random_device{}()};

  static inline const char* name = "kvroom.directory";
};

using self_ptr = caf::stateful_actor<directory_state>*;

directory_update view(self_ptr self) {
  directory_update out;
  for (auto& kvp : self->state.table)
    out.ranks.push_back(kvp.second);
  return out;
}

void broadcast(self_ptr self) {
  auto msg = view(self);
  for (auto& kvp : self->state.locals)
    self->send(kvp.second.manager, msg);
}

void note_unverified(self_ptr self, const caf::error& why) {
  auto& st = self->state;
  ++st.unverified;
  auto now = monotonic_ms();
  if (now - st.last_unverified_log_ms >= 1000) {
    st.last_unverified_log_ms = now;
    logger()->warn("{}: ignored {} ({} such entries so far)", st.opts.name, describe(why),
                   st.unverified);
  }
}

std::vector<rank_entry> verified(self_ptr self, const std::vector<store_kv>& kvs) {
  std::vector<rank_entry> out;
  for (auto& kv : kvs) {
    if (auto e = self->state.codec->decode(kv))
      out.push_back(std::move(*e));
    else
      note_unverified(self, e.error());
  }
  return out;
}

/// What one admission decided: the live entries it decided from (with the
/// entry in them), or why not.
struct admission {
  std::vector<rank_entry> live;
  caf::error error;
  /// Refused for an id or place a live rank holds (may clear with its lease).
  bool held = false;
  /// That rank's lease, as the store listed it.
  int64_t holder_lease = 0;
};

/// The lease of rank `holder`'s entry as the store listed it in `all`.
int64_t lease_of(self_ptr self, const std::vector<store_kv>& all, rank_id holder) {
  auto key = self->state.codec->key_of(holder);
  for (auto& kv : all)
    if (kv.key == key)
      return kv.lease;
  return 0;
}

/// One admission: the rules over what the store holds now, then a put that only
/// lands if nothing under the prefix changed since that read.
admission admit(self_ptr self, const rank_entry& entry) {
  auto& st = self->state;
  auto key = st.codec->key_of(entry.rank.id);
  // The lease held now: a replacement is registered on before its message
  // comes (which then registers every rank again, the same entries).
  auto lease = st.keeper->lease();
  auto value = st.codec->encode(entry, lease);
  for (uint32_t attempt = 0; attempt < 64; ++attempt) {
    auto all = st.client->range_prefix(st.codec->ranks_prefix());
    if (!all)
      return admission{{}, all.error()};
    auto live = verified(self, all->kvs);
    if (auto no = admission_refusal(live, entry, st.opts.max_ranks))
      return admission{{}, make_error(no->code, no->why), no->held,
                       no->held ? lease_of(self, all->kvs, no->holder) : 0};
    auto put = st.client->put_if_unchanged(st.codec->ranks_prefix(), all->revision, key, value,
                                           lease);
    if (!put)
      return admission{{}, put.error()};
    if (*put) {
      live.erase(std::remove_if(live.begin(), live.end(),
                                [&](auto& e) { return e.rank.id == entry.rank.id; }),
                 live.end());
      live.push_back(entry);
      live.back().manager = nullptr;
      return admission{std::move(live), caf::none};
    }
    // Another rank registered meanwhile (many start at once): decide again
    // from what is there now, after a jittered pause that grows.
    auto cap = 2u << std::min<uint32_t>(attempt, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + st.rng() % cap));
  }
  return admission{{}, make_error(errc::unavailable,
                                  "the directory kept changing under 64 registration attempts")};
}

void merge(self_ptr self, const std::vector<rank_entry>& live) {
  bool changed = false;
  for (auto& e : live) {
    auto& slot = self->state.table[e.rank.id];
    changed = changed || slot.incarnation != e.incarnation || slot.rank.id != e.rank.id;
    slot = e;
  }
  if (changed)
    broadcast(self);
}

void try_waiting(self_ptr self, rank_id id) {
  auto& st = self->state;
  auto i = st.waiting.find(id);
  if (i == st.waiting.end())
    return;
  auto& w = i->second;
  auto res = admit(self, w.entry);
  if (res.error && res.held && res.holder_lease != 0 && res.holder_lease != w.holder_lease) {
    // The holder may be a process that died: its id and place are free
    // when the store expires its lease, which the store says when. Wait that long
    // (and a second for its expiry sweep), not a guess of ours; a holder
    // that renews is still there then, and the registration is refused.
    // Not knowing (the call failed) never shortens the wait.
    auto left = st.client->time_to_live(res.holder_lease);
    if (left) {
      w.holder_lease = res.holder_lease;
      w.deadline_ms =
          monotonic_ms() + static_cast<uint64_t>(std::max<int64_t>(*left, 0)) * 1000 + 1000;
    } else {
      w.deadline_ms = std::max(w.deadline_ms, monotonic_ms() + 1000);
    }
  }
  if (res.error && ((res.held && monotonic_ms() < w.deadline_ms)
                    || (is(res.error, errc::unavailable) && monotonic_ms() < w.give_up_ms))) {
    self->delayed_send(self, std::chrono::milliseconds(100 + st.rng() % 300), retry_atom::value,
                       id);
    return;
  }
  auto promise = std::move(w.promise);
  auto entry = std::move(w.entry);
  st.waiting.erase(i);
  if (res.error) {
    logger()->warn("{}: registration refused: {}", st.opts.name, describe(res.error));
    promise.deliver(make_error(static_cast<errc>(res.error.code()),
                               "registration refused: " + describe(res.error)));
    return;
  }
  logger()->debug("{}: {} registered under {}", st.opts.name, to_string(entry.rank),
                  st.codec->key_of(id));
  auto manager = entry.manager;
  self->monitor(manager);
  st.locals[id] = local_rank{entry, manager};
  // The rank's reply is the directory as it was decided from; the watch
  // brings the same changes to everyone else.
  merge(self, res.live);
  promise.deliver(view(self));
}

/// `gone` left the directory: out of the table, and every local manager
/// hears it is gone for good. False when the table holds another
/// incarnation (or nothing) under its id.
bool forget(self_ptr self, const rank_entry& gone) {
  auto& st = self->state;
  auto i = st.table.find(gone.rank.id);
  if (i == st.table.end() || i->second.incarnation != gone.incarnation)
    return false;
  st.table.erase(i);
  rank_down note{gone.rank, "its entry in the " + st.opts.name + " is gone (lease expired, or it left)",
                 false, true, gone.incarnation};
  logger()->debug("{}: {} left the directory", st.opts.name, to_string(gone.rank));
  for (auto& kvp : st.locals)
    if (kvp.first != gone.rank.id)
      self->send(kvp.second.manager, note);
  return true;
}

void apply(self_ptr self, std::vector<store_event>& events) {
  auto& st = self->state;
  bool changed = false;
  for (auto& ev : events) {
    if (!ev.deleted) {
      auto e = st.codec->decode(ev.kv);
      if (!e) {
        // A forged or foreign value: routes stay as they were verified.
        note_unverified(self, e.error());
        continue;
      }
      auto& slot = st.table[e->rank.id];
      changed = changed || slot.incarnation != e->incarnation || slot.rank.id != e->rank.id
                || slot.control_port != e->control_port;
      slot = std::move(*e);
      continue;
    }
    if (!ev.prev)
      continue;
    if (auto gone = st.codec->decode(*ev.prev)) {
      changed = forget(self, *gone) || changed;
      auto mine = st.locals.find(gone->rank.id);
      if (mine != st.locals.end() && mine->second.entry.incarnation == gone->incarnation)
        self->send(self, again_atom::value, gone->rank.id, ev.prev->lease);
    }
  }
  if (changed)
    broadcast(self);
}

/// A local rank's entry vanished from the store while the rank lives. When its
/// lease is gone, the lease keeper replaces it and every rank registers
/// again then; when the lease lives (the key was deleted by hand, or by a
/// tool), the rank registers again at once. Logged once per vanishing.
void restore(self_ptr self, rank_id id, int64_t lease) {
  auto& st = self->state;
  auto i = st.locals.find(id);
  if (i == st.locals.end())
    return;
  auto& rank = i->second.entry.rank;
  if (lease != st.lease) {
    st.restoring.erase(id);
    return; // a lease replaced since: its own registration covers the rank
  }
  auto left = st.client->time_to_live(lease);
  if (left && *left <= 0) {
    logger()->debug("{}: {}'s entry went with lease {:x}; it registers again on "
                    "the next lease", st.opts.name,
                    to_string(rank), lease);
    return;
  }
  bool first = st.restoring.insert(id).second;
  if (first)
    logger()->warn("{}: {}'s entry vanished from the store while it lives (lease {:x} "
                   "{}); registering it again", st.opts.name,
                   to_string(rank), lease,
                   left ? "alive, " + std::to_string(*left) + " s left" : "not answered");
  auto res = admit(self, i->second.entry);
  if (!res.error) {
    st.restoring.erase(id);
    merge(self, res.live);
    return;
  }
  if (is(res.error, errc::unavailable)) {
    self->delayed_send(self, std::chrono::milliseconds(100 + st.rng() % 200), again_atom::value,
                       id, lease);
    return;
  }
  st.restoring.erase(id);
  logger()->error("{}: {} cannot register again: {}", st.opts.name, to_string(rank),
                  describe(res.error));
}

void reset(self_ptr self, store_snapshot& all) {
  auto& st = self->state;
  std::map<rank_id, rank_entry> fresh;
  for (auto& e : verified(self, all.kvs))
    fresh[e.rank.id] = std::move(e);
  // Deleted while the watch was away: as if the watch had said so.
  std::vector<rank_entry> gone;
  for (auto& kvp : st.table) {
    auto i = fresh.find(kvp.first);
    if (i == fresh.end() || i->second.incarnation != kvp.second.incarnation)
      gone.push_back(kvp.second);
  }
  for (auto& e : gone)
    forget(self, e);
  for (auto& kvp : fresh)
    st.table[kvp.first] = kvp.second;
  broadcast(self);
}

/// The lease keeper says the store lost lease `old` and `fresh` replaces it.
void lease_replaced(self_ptr self, int64_t old, int64_t fresh) {
  auto& st = self->state;
  // Cut off from the store longer than the TTL: every peer has counted this
  // process's ranks gone. Each rank registers again on the new lease.
  logger()->error("{}: lease {:x} expired; peers count this process's {} ranks "
                  "lost; registering them again on lease {:x}", st.opts.name,
                  old, st.locals.size(), fresh);
  st.lease = fresh;
  for (auto& kvp : st.locals) {
    auto res = admit(self, kvp.second.entry);
    if (!res.error)
      merge(self, res.live);
    else
      logger()->error("{}: {} cannot register again: {}", st.opts.name,
                      to_string(kvp.second.entry.rank), describe(res.error));
  }
  // While this process was cut off, its managers counted their peers lost
  // too (their links timed out): the whole directory again, so they list
  // and link them anew.
  broadcast(self);
}

caf::behavior directory_core(caf::stateful_actor<directory_state>* self,
                             directory_core_options opts, store_connector connect,
                             std::shared_ptr<const membership> members, int64_t lease,
                             store_snapshot initial) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.connect = std::move(connect);
  st.members = std::move(members);
  st.client = st.connect(0);
  st.codec = std::make_unique<signed_entry_codec>(self->system(), st.opts.prefix, st.members);
  st.door.emplace(st.members, 64);
  st.lease = lease;
  lease_timing timing{st.opts.lease_ttl_ms, st.opts.request_timeout_ms};
  st.ttl_s = timing.ttl_s();
  for (auto& e : verified(self, initial.kvs))
    st.table[e.rank.id] = std::move(e);
  st.watch = std::make_shared<prefix_watch>(st.connect, st.opts.name, st.codec->ranks_prefix(),
                                            initial.revision + 1, caf::actor{self});
  // On the way out (the runtime ends): the watch stops, the lease goes and
  // every entry on it with it, so peers learn at once instead of a TTL later.
  st.keeper = std::make_shared<lease_keeper>(st.connect, st.opts.name, timing, lease,
                                            caf::actor{self});
  auto watch = st.watch;
  auto keeper = st.keeper;
  self->attach_functor([watch, keeper] {
    watch->stop();
    keeper->stop();
  });
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto& sender = self->current_sender();
    if (!sender || sender->node() != self->node() || msg.source.node() != self->node())
      return;
    auto& st = self->state;
    st.watch->stop();
    st.keeper->stop();
    auto quick = st.connect(std::min<uint32_t>(st.opts.request_timeout_ms, 1000));
    quick->revoke(st.keeper->lease());
    self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) {
    auto& st = self->state;
    for (auto i = st.locals.begin(); i != st.locals.end(); ++i) {
      if (i->second.manager.address() != msg.source)
        continue;
      // The rank closed (or its manager died): its entry goes; peers hear
      // of it through the watch like everyone else.
      if (auto err = st.client->delete_if_lease(st.codec->key_of(i->first), st.keeper->lease()))
        logger()->warn("{}: cannot remove {}: {}", st.opts.name, to_string(i->second.entry.rank),
                       describe(err));
      st.locals.erase(i);
      return;
    }
  });
  return {
    [=](registry_hello& msg) -> caf::result<registry_challenge> {
      auto& sender = self->current_sender();
      // Only this process's managers register here.
      if (!sender || sender->node() != self->node())
        return make_error(errc::unauthorized, "registration from another process");
      auto out = self->state.door->hello(sender->address(), msg.nonce, monotonic_ms());
      if (!out)
        return out.error();
      return std::move(*out);
    },
    [=](register_rank& msg) -> caf::result<directory_update> {
      auto& st = self->state;
      auto& sender = self->current_sender();
      if (!sender || sender->node() != self->node())
        return make_error(errc::unauthorized, "registration from another process");
      if (auto err = st.door->check(sender->address(), msg, monotonic_ms()))
        return err;
      auto& entry = msg.entry;
      if (entry.control_port == 0)
        return make_error(errc::invalid_config,
                          to_string(entry.rank) + " has no control endpoint: the "
                          + st.opts.name + " needs ranks on the network (runtime_options.network)");
      // Whoever answered the challenge, or its process's manager it names.
      entry.manager = registration_door::listed_actor(sender, entry);
      auto id = entry.rank.id;
      if (st.waiting.count(id) > 0)
        return make_error(errc::invalid_config,
                          "rank id " + std::to_string(id) + " is registering already");
      // A holder whose process died keeps its id and place until its lease
      // expires: wait that long before refusing.
      auto& w = st.waiting[id];
      w.entry = entry;
      w.promise = self->make_response_promise();
      w.deadline_ms = monotonic_ms() + static_cast<uint64_t>(st.ttl_s) * 1000 + 1000;
      w.give_up_ms = monotonic_ms() + st.opts.registration_timeout_ms;
      auto promise = w.promise;
      try_waiting(self, id);
      return promise;
    },
    [=](retry_atom, rank_id id) { try_waiting(self, id); },
    [=](store_changes& msg) {
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return;
      apply(self, msg.events);
    },
    [=](store_reread& msg) {
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return;
      reset(self, msg.all);
    },
    [=](lease_atom, int64_t old, int64_t fresh) {
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return;
      lease_replaced(self, old, fresh);
    },
    [=](again_atom, rank_id id, int64_t lease) {
      if (self->current_sender() && self->current_sender()->node() != self->node())
        return;
      restore(self, id, lease);
    },
  };
}

} // namespace

store_client::~store_client() = default;

caf::expected<caf::actor> spawn_directory(caf::actor_system& sys, directory_core_options opts,
                                          store_connector connect,
                                          std::shared_ptr<const membership> members,
                                          uint32_t timeout_ms) {
  if (opts.prefix.empty() || opts.prefix.back() == '/')
    return make_error(errc::invalid_argument,
                      "directory prefix '" + opts.prefix + "' must be non-empty without a "
                      "trailing '/'");
  auto client = connect(0);
  signed_entry_codec codec{sys, opts.prefix, members};
  auto ttl_s = std::max<int64_t>(2, (opts.lease_ttl_ms + 999) / 1000);
  auto deadline = monotonic_ms() + timeout_ms;
  uint32_t backoff = 50;
  for (;;) {
    caf::error err;
    if (auto lease = client->grant(ttl_s)) {
      if (auto all = client->range_prefix(codec.ranks_prefix())) {
        logger()->info("{}: {} at {} (lease {:x}, {} s)", opts.name, opts.prefix,
                       client->current_endpoint(), *lease, ttl_s);
        return sys.spawn<caf::detached>(directory_core, std::move(opts), std::move(connect),
                                        std::move(members), *lease, std::move(*all));
      } else {
        err = std::move(all.error());
      }
    } else {
      err = std::move(lease.error());
    }
    if (is(err, errc::unauthorized) || is(err, errc::invalid_argument)
        || is(err, errc::invalid_config) || monotonic_ms() + backoff > deadline)
      return make_error(static_cast<errc>(err.code()),
                        opts.name + ": " + describe(err));
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    backoff = std::min<uint32_t>(backoff * 2, 1000);
  }
}

} // namespace kvroom
