#include "stress_run.hpp"

#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <thread>

#include "caf/all.hpp"

#include "kvroom/api/config.hpp"
#include "kvroom/kit/harness.hpp"
#include "kvroom/api/errors.hpp"
#include "kvroom/kit/engine.hpp"

#include "stress_memory.hpp"

namespace kvroom::cli {

using namespace kvroom::stress;

namespace {

using clock_type = std::chrono::steady_clock;

/// What the stress keeps about one room in flight beside the loop's handles.
struct live_room {
  room_plan plan;
  injected_fault fault;
  clock_type::time_point deadline;
  /// Decode pages and aux slot, taken from the FIFO free lists.
  std::vector<int64_t> dst_pages;
  int64_t dst_aux = 0;
  /// abort_both: which of the two aborts fired.
  bool prefill_aborted = false;
  bool decode_aborted = false;
};

/// One run in this process: the groups, the decode side's free lists with
/// their canaries, the loop's hooks (the faults they fire, the checks when
/// a room concludes) and the checks after the last room.
class in_process_run {
public:
  in_process_run(caf::actor_system& sys, const stress_config& cfg, const stress_setup& setup)
    : sys_(sys),
      cfg_(cfg),
      setup_(setup),
      shape_(setup.shape),
      np_(setup.prefill_ranks()),
      dtp_(setup.decode_tp),
      by_slot_(static_cast<size_t>(cfg.concurrency)),
      room_bound_(7 * cfg.timeout_ms + 2000) {
    // nop
  }

  caf::expected<stress_result> run();

private:
  caf::expected<stress_result> run_with(runtime& rt);
  int size_of(role side) const {
    return side == role::prefill ? np_ : dtp_;
  }

  rank& rank_of(role side, int t) {
    return side == role::prefill ? *group_->prefill[static_cast<size_t>(t)]
                                 : *group_->decode[static_cast<size_t>(t)];
  }

  static room_handle& handle_of(loop_room& r, role side, int t) {
    if (side == role::prefill)
      return r.senders[static_cast<size_t>(t)];
    return r.receivers[static_cast<size_t>(t)];
  }

  void customize(rank_config& rc) const;
  caf::error start_groups(runtime& rt);
  /// Prefill source pages of a slot (decode pages come from free lists).
  std::vector<int64_t> source_pages(size_t slot) const;
  /// A freed page or slot that changed while free: a late write.
  void check_free(int64_t page, int64_t aux, const char* when);
  loop_hooks hooks();
  void opened(loop_room& lr);
  void each(loop_room& lr);
  void receiver_ready(loop_room& lr, int t);
  void sender_ready(loop_room& lr, int t);
  void concluded(loop_room& lr);
  /// After the last room: nothing left on any rank, counters that agree,
  /// no late write, memory that did not grow with rooms passed.
  void check_after(size_t actors_before);

  caf::actor_system& sys_;
  const stress_config& cfg_;
  const stress_setup& setup_;
  const kv_shape& shape_;
  int np_;
  int dtp_;
  std::unique_ptr<local_group> group_;
  /// Kills a room as an actor: kvroom's actors drop exits that do not come
  /// from the actor they name (an anonymous one could be a stranger's).
  std::unique_ptr<caf::scoped_actor> killer_;
  /// Decode pages and aux slots come from FIFO free lists, as a scheduler's
  /// allocator hands them out; each free one holds its canary.
  std::deque<int64_t> free_pages_;
  std::deque<int64_t> free_aux_;
  std::vector<room_id> page_owner_;
  std::vector<room_id> aux_owner_;
  /// What the stress keeps about each room in flight, by the loop's slot.
  std::vector<live_room> by_slot_;
  std::chrono::milliseconds room_bound_;
  uint64_t rss_early_ = 0;
  uint64_t rooms_early_ = 0;
  stress_result out_;
};

void in_process_run::customize(rank_config& rc) const {
  auto& cfg = cfg_;
  auto ms = static_cast<uint32_t>(cfg.timeout_ms);
  // The side that does not move the bytes waits longer, so a data-plane
  // fault is always seen first where it happened and no second origin
  // races it: decode, or with --pull prefill (its hold is the lease).
  auto mover = cfg.pull ? role::decode : role::prefill;
  rc.timeouts = rc.side == mover ? room_timeouts{ms, ms, ms}
                                 : room_timeouts{2 * ms, 2 * ms, 2 * ms};
  if (rc.side == mover)
    rc.faults = setup_.mover_faults[static_cast<size_t>(
      (rc.parallel ? rc.parallel->pp_rank : 0) * rc.tp_size + rc.tp_rank)];
  rc.pull = cfg.pull && rc.side == role::decode;
  rc.chaos.delay_probability = cfg.p_delay;
  rc.chaos.max_delay_ms = static_cast<uint32_t>(cfg.max_delay_ms);
  rc.chaos.seed = setup_.seed;
  rc.chaos.drop_fan_out = cfg.sabotage == "drop-fan-out";
  rc.chaos.no_fence = cfg.sabotage == "no-fence";
  rc.chaos.local_decisions = cfg.sabotage == "local-decisions";
  rc.chaos.keep_room_monitors = cfg.sabotage == "keep-monitors";
  rc.limits.max_tombstones = static_cast<uint32_t>(cfg.max_tombstones);
  rc.integrity = setup_.integrity;
  if (cfg.transport != "local") {
    rc.transport = cfg.transport;
    rc.network = true;
    rc.tcp_host = cfg.tcp_host;
  }
  if (rc.side == role::prefill && !cfg.fault_path.empty()) {
    rc.faults.paths = split_hosts(cfg.fault_path);
    rc.faults.path_probability = cfg.p_path;
    // The bytes land, then the completion fails: the retry's copy, the
    // fence and the freed-page canaries all see the worst case.
    rc.faults.path_point = fault_point::after_post;
  }
}

caf::error in_process_run::start_groups(runtime& rt) {
  auto fn = [this](rank_config& rc) { customize(rc); };
  auto group = setup_.model ? local_group::start(rt, setup_.prefill_tp, dtp_, *setup_.model,
                                                 shape_, fn, setup_.prefill_pp)
                            : local_group::start(rt, setup_.prefill_tp, shape_, fn);
  if (!group)
    return std::move(group.error());
  group_ = std::move(*group);
  page_owner_.assign(shape_.num_pages, 0);
  aux_owner_.assign(shape_.aux_slots, 0);
  for (int64_t p = 0; p < static_cast<int64_t>(shape_.num_pages); ++p)
    free_pages_.push_back(p);
  for (int64_t a = 0; a < static_cast<int64_t>(shape_.aux_slots); ++a)
    free_aux_.push_back(a);
  for (auto& mem : group_->decode_mem) {
    for (auto p : free_pages_)
      write_canary(*mem, p, -1);
    for (auto a : free_aux_)
      write_canary(*mem, -1, a);
  }
  return caf::none;
}

std::vector<int64_t> in_process_run::source_pages(size_t slot) const {
  std::vector<int64_t> out;
  auto base = static_cast<int64_t>(slot) * cfg_.pages_per_room;
  for (int64_t i = 0; i < cfg_.pages_per_room; ++i)
    out.push_back(base + i);
  return out;
}

void in_process_run::check_free(int64_t page, int64_t aux, const char* when) {
  for (int t = 0; t < dtp_; ++t) {
    auto n = canary_damage(*group_->decode_mem[static_cast<size_t>(t)], page, aux);
    if (n == 0)
      continue;
    auto owner = page >= 0 ? page_owner_[static_cast<size_t>(page)]
                           : aux_owner_[static_cast<size_t>(aux)];
    out_.violations.push_back(
      {owner, group_->decode[static_cast<size_t>(t)]->ref().id,
       std::string{page >= 0 ? "page " + std::to_string(page)
                             : "aux slot " + std::to_string(aux)}
         + " changed in " + std::to_string(n) + " bytes " + when + " after room "
         + std::to_string(owner) + " was terminal and released it (a late write)"});
  }
}

loop_hooks in_process_run::hooks() {
  loop_hooks h;
  h.opened = [this](loop_room& lr) { opened(lr); };
  h.each = [this](loop_room& lr) { each(lr); };
  h.receiver_ready = [this](loop_room& lr, int t) {
    receiver_ready(lr, t);
    return true;
  };
  h.sender_ready = [this](loop_room& lr, int t) {
    sender_ready(lr, t);
    return true;
  };
  h.give_up = [this](const loop_room& lr) {
    return clock_type::now() >= by_slot_[lr.slot].deadline;
  };
  h.concluded = [this](loop_room& lr) { concluded(lr); };
  return h;
}

void in_process_run::opened(loop_room& lr) {
  auto& r = by_slot_[lr.slot];
  r = live_room{};
  r.plan = setup_.plans[lr.id];
  r.fault.kind = r.plan.kind;
  r.fault.rank = rank_of(r.plan.side, r.plan.tp).ref().id;
  bool data_fault = r.plan.kind == fault_kind::transfer || r.plan.kind == fault_kind::flip;
  r.fault.fired = data_fault;
  r.fault.detail = data_fault ? to_string(r.plan.point) : "in " + to_string(r.plan.at);
  r.deadline = clock_type::now() + room_bound_;
  for (int64_t i = 0; i < cfg_.pages_per_room; ++i) {
    r.dst_pages.push_back(free_pages_.front());
    free_pages_.pop_front();
    check_free(r.dst_pages.back(), -1, "while free");
  }
  r.dst_aux = free_aux_.front();
  free_aux_.pop_front();
  check_free(-1, r.dst_aux, "while free");
  if (r.plan.kind == fault_kind::bad_indices_all || r.plan.kind == fault_kind::stall_all
      || r.plan.kind == fault_kind::abort_both) {
    r.fault.rank = -1;
    r.fault.fired = r.plan.kind != fault_kind::abort_both;
    r.fault.detail = r.plan.kind == fault_kind::abort_both ? "in " + to_string(r.plan.at)
                                                            : "on every rank";
  }
  auto& prefill_mem = group_->prefill_mem;
  for (int t = 0; t < np_; ++t) {
    auto& layout = group_->layout(role::prefill, t);
    if (layout)
      prefill_mem[t]->write_room(lr.id, source_pages(lr.slot), static_cast<int64_t>(lr.slot),
                                 *layout);
    else
      prefill_mem[t]->write_room(key(lr.id, t), source_pages(lr.slot),
                                 static_cast<int64_t>(lr.slot));
    // A TP slot's own state (equal TP sizes): checked per slot.
    prefill_mem[t]->write_state(key(lr.id, t), state_of(shape_, static_cast<int64_t>(lr.slot)));
  }
}

void in_process_run::each(loop_room& lr) {
  auto& r = by_slot_[lr.slot];
  // Both sides' schedulers abort once each side's rank reached the state.
  if (r.plan.kind == fault_kind::abort_both) {
    for (auto side : {role::prefill, role::decode}) {
      auto& done = side == role::prefill ? r.prefill_aborted : r.decode_aborted;
      auto& h = handle_of(lr, side, r.plan.tp % size_of(side));
      auto st = h.poll();
      if (!done && !is_terminal(st) && st >= r.plan.at) {
        (void) h.abort("stress abort of both sides in " + to_string(st));
        done = true;
        r.fault.fired = true;
      }
    }
  }
  // The scheduled abort or kill, once its target reached its state.
  if ((r.plan.kind == fault_kind::abort || r.plan.kind == fault_kind::kill_room
       || r.plan.kind == fault_kind::late_write)
      && !r.fault.fired) {
    auto& h = handle_of(lr, r.plan.side, r.plan.tp);
    auto st = h.poll();
    if (!is_terminal(st) && st >= r.plan.at) {
      if (r.plan.kind != fault_kind::kill_room)
        (void) h.abort("stress abort in " + to_string(st));
      else
        (*killer_)->send_exit(rank_of(r.plan.side, r.plan.tp).room_actor(lr.id),
                              caf::exit_reason::kill);
      r.fault.fired = true;
      r.fault.detail = "in " + to_string(st);
    }
  }
}

void in_process_run::receiver_ready(loop_room& lr, int t) {
  auto& r = by_slot_[lr.slot];
  auto dst = r.dst_pages;
  // The same bad index on every decode rank (they share one allocation, as
  // TP ranks do).
  if (r.plan.kind == fault_kind::bad_indices_all)
    dst[0] = static_cast<int64_t>(shape_.num_pages) + 3;
  (void) lr.receivers[static_cast<size_t>(t)].init(std::move(dst), r.dst_aux,
                                                   state_of(shape_, r.dst_aux));
}

void in_process_run::sender_ready(loop_room& lr, int t) {
  auto& send = lr.senders[static_cast<size_t>(t)];
  auto pages = source_pages(lr.slot);
  auto half = pages.size() / 2;
  (void) send.init(pages.size(), static_cast<int64_t>(lr.slot));
  (void) send.send({pages.begin(), pages.begin() + static_cast<long>(half)}, false);
  (void) send.send({pages.begin() + static_cast<long>(half), pages.end()}, true,
                   state_of(shape_, static_cast<int64_t>(lr.slot)));
}

void in_process_run::concluded(loop_room& lr) {
  auto& r = by_slot_[lr.slot];
  auto& violations = out_.violations;
  room_record rec;
  rec.room = lr.id;
  rec.fault = r.fault;
  bool any_failed = false;
  for (auto side : {role::prefill, role::decode}) {
    for (int t = 0; t < size_of(side); ++t) {
      auto& h = handle_of(lr, side, t);
      rank_outcome o;
      o.rank = rank_of(side, t).ref();
      o.state = h.poll();
      if (o.state == kv_poll::failed) {
        o.error = h.failure();
        any_failed = true;
      }
      if (side == role::decode && o.state == kv_poll::success) {
        std::string why;
        auto& mem = *group_->decode_mem[static_cast<size_t>(t)];
        auto& layout = group_->layout(role::decode, t);
        if (!(layout ? mem.check_room(lr.id, r.dst_pages, r.dst_aux, *layout, &why)
                     : mem.check_room(key(lr.id, t), r.dst_pages, r.dst_aux, &why))
            || !mem.check_state(key(lr.id, t), state_of(shape_, r.dst_aux), &why))
          rec.data_error = why;
      }
      rec.outcomes.push_back(std::move(o));
    }
  }
  if (rec.fault.kind == fault_kind::transfer && !any_failed)
    violations.push_back({lr.id, rec.fault.rank,
                          "Success reported over an injected transfer fault ("
                            + rec.fault.detail + ")"});
  // A flipped byte with the integrity check on: the room fails, and every
  // rank names the check as the cause. (With broken paths a flip may never
  // land: its batch's copy on another path came first, and the receiver
  // drops the flipped one as a duplicate; the pages are then right, which
  // the byte-exact check sees.)
  if (rec.fault.kind == fault_kind::flip && setup_.integrity != integrity_mode::off) {
    if (!any_failed && cfg_.fault_path.empty())
      violations.push_back({lr.id, rec.fault.rank,
                            "Success reported over a flipped byte with integrity on"});
    for (auto& o : rec.outcomes)
      if (o.error && o.error->cause != failure_cause::integrity)
        violations.push_back({lr.id, o.rank.id,
                              "a flipped byte failed the room with another cause: "
                                + o.error->failure_reason});
  }
  for (auto& v : check_room(rec)) {
    v.what += " [fault: " + to_string(rec.fault.kind) + " " + rec.fault.detail + " on rank "
              + std::to_string(rec.fault.rank) + (rec.fault.fired ? "" : ", not fired") + "]";
    violations.push_back(v);
  }
  auto& tally = out_.by_fault[to_string(rec.fault.fired ? rec.fault.kind : fault_kind::none)];
  (any_failed ? tally.second : tally.first) += 1;
  out_.failed_rooms += any_failed ? 1 : 0;
  // Every decode rank's poll() was terminal: the pages are the scheduler's
  // again, and no byte of this room may land in them.
  for (auto p : r.dst_pages) {
    for (auto& mem : group_->decode_mem)
      write_canary(*mem, p, -1);
    page_owner_[static_cast<size_t>(p)] = lr.id;
    free_pages_.push_back(p);
  }
  for (auto& mem : group_->decode_mem)
    write_canary(*mem, -1, r.dst_aux);
  aux_owner_[static_cast<size_t>(r.dst_aux)] = lr.id;
  free_aux_.push_back(r.dst_aux);
  ++out_.concluded;
  if (out_.concluded == static_cast<uint64_t>(cfg_.rooms) / 10) {
    rss_early_ = harness::resident_bytes();
    rooms_early_ = out_.concluded;
  }
  r = live_room{};
}

void in_process_run::check_after(size_t actors_before) {
  auto& violations = out_.violations;
  // Every room was cleared: nothing may remain on any rank.
  auto all = ranks_of(group_->prefill);
  for (auto* r : ranks_of(group_->decode))
    all.push_back(r);
  auto quiet_deadline = clock_type::now() + std::chrono::seconds(10);
  bool quiet = false;
  while (!quiet && clock_type::now() < quiet_deadline) {
    quiet = sys_.registry().running() <= actors_before;
    for (auto* r : all) {
      auto st = r->stats();
      quiet = quiet && st && st->live_rooms == 0 && st->failure_records == 0 && st->parked == 0;
    }
    if (!quiet)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Manager counters agree with the rooms: one origin per failed room.
  uint64_t origin_failures = 0;
  for (auto* r : all) {
    auto st = r->stats();
    if (!st) {
      violations.push_back({0, r->ref().id, "manager does not answer"});
      continue;
    }
    origin_failures += st->origin_failures;
    if (st->live_rooms != 0 || st->failure_records != 0 || st->parked != 0)
      violations.push_back({0, r->ref().id,
                            "after every room was cleared: " + std::to_string(st->live_rooms)
                              + " room actors, " + std::to_string(st->failure_records)
                              + " failure records, " + std::to_string(st->parked)
                              + " parked messages remain"});
  }
  if (origin_failures != out_.failed_rooms)
    violations.push_back({0, -1, "managers counted " + std::to_string(origin_failures)
                                   + " origin failures for "
                                   + std::to_string(out_.failed_rooms) + " failed rooms"});
  // Broken paths: their batches moved to other paths (so the fault was
  // real), and no room was lost to them (the fault table).
  for (auto* r : all) {
    auto m = r->metrics().paths;
    for (auto x : m.retries)
      out_.path_retries += x;
    out_.path_rests += m.rests;
  }
  if (!cfg_.fault_path.empty() && out_.path_retries == 0)
    violations.push_back({0, -1, "--fault-path " + cfg_.fault_path
                                   + " moved no batch to another path: the fault never fired"});
  // Late writes that land after the last room: every free page and slot.
  for (auto p : free_pages_)
    check_free(p, -1, "by the end of the run");
  for (auto a : free_aux_)
    check_free(-1, a, "by the end of the run");
  if (sys_.registry().running() > actors_before)
    violations.push_back({0, -1, std::to_string(sys_.registry().running() - actors_before)
                                   + " actors still running after every room was cleared"});
  out_.rss_end = harness::resident_bytes();
  // Memory is bounded by what is in flight: after the first tenth (caches
  // warm, tombstones at their bound) it must not grow with rooms passed.
  if (rss_early_ > 0 && out_.concluded > rooms_early_) {
    auto grown = out_.rss_end > rss_early_ ? out_.rss_end - rss_early_ : 0;
    out_.bytes_per_room = static_cast<double>(grown)
                          / static_cast<double>(out_.concluded - rooms_early_);
    if (cfg_.rooms >= 10'000 && out_.bytes_per_room > static_cast<double>(cfg_.max_bytes_per_room))
      violations.push_back({0, -1, "resident memory grew by "
                                     + std::to_string(static_cast<uint64_t>(out_.bytes_per_room))
                                     + " bytes per room after the first 10% of rooms (limit "
                                     + std::to_string(cfg_.max_bytes_per_room) + ")"});
  }
}

caf::expected<stress_result> in_process_run::run() {
  runtime rt{sys_};
  auto result = run_with(rt);
  // Ranks stop before their runtime, on every path.
  group_.reset();
  killer_.reset();
  return result;
}

caf::expected<stress_result> in_process_run::run_with(runtime& rt) {
  killer_ = std::make_unique<caf::scoped_actor>(sys_);
  if (auto err = start_groups(rt))
    return err;
  // Ranks are up (managers, workers, inboxes): every actor beyond these
  // belongs to a room.
  auto actors_before = sys_.registry().running();
  auto start = clock_type::now();
  auto run_deadline = start + std::chrono::seconds(cfg_.max_seconds);
  auto last_report = start;
  out_.rss_start = harness::resident_bytes();
  scheduler_loop loop{ranks_of(group_->prefill), ranks_of(group_->decode), 0,
                      static_cast<size_t>(cfg_.concurrency), 1,
                      static_cast<uint64_t>(cfg_.rooms), hooks()};
  while (!loop.done() && clock_type::now() < run_deadline) {
    bool progressed = loop.step();
    if (!loop.open_error().empty())
      return make_error(errc::invalid_argument, "cannot open room: " + loop.open_error());
    auto now = clock_type::now();
    if (now - last_report >= std::chrono::seconds(1)) {
      auto t = std::chrono::duration<double>(now - start).count();
      std::printf("  [%6.1fs] %llu/%lld rooms concluded, %llu failed, %zu violations, %.0f "
                  "rooms/s\n",
                  t, static_cast<unsigned long long>(out_.concluded),
                  static_cast<long long>(cfg_.rooms),
                  static_cast<unsigned long long>(out_.failed_rooms), out_.violations.size(),
                  static_cast<double>(out_.concluded) / t);
      std::fflush(stdout);
      last_report = now;
    }
    if (!progressed)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  out_.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  if (out_.concluded < static_cast<uint64_t>(cfg_.rooms))
    out_.violations.push_back(
      {0, -1, "run bound of " + std::to_string(cfg_.max_seconds) + " s passed with "
                + std::to_string(cfg_.rooms - static_cast<int64_t>(out_.concluded))
                + " rooms unconcluded"});
  check_after(actors_before);
  return std::move(out_);
}

} // namespace

caf::expected<stress_setup> make_setup(const stress_config& cfg, uint64_t seed,
                                       const std::optional<parallel_layout>& model) {
  stress_setup s;
  s.seed = seed;
  s.prefill_tp = static_cast<int>(cfg.prefill_tp);
  s.prefill_pp = static_cast<int>(cfg.prefill_pp);
  s.decode_tp = static_cast<int>(cfg.decode_tp);
  s.model = model;
  auto ptp = s.prefill_tp, ppp = s.prefill_pp, dtp = s.decode_tp;
  auto np = s.prefill_ranks();
  auto& shape = s.shape;
  shape.num_buffers = static_cast<uint32_t>(2 * cfg.layers);
  shape.page_size_bytes = static_cast<uint64_t>(cfg.page_bytes);
  // Twice what is in flight: freed pages wait in a FIFO before reuse.
  shape.num_pages = static_cast<uint64_t>(2 * cfg.concurrency * cfg.pages_per_room);
  shape.num_aux = 1;
  shape.aux_slots = static_cast<uint64_t>(2 * cfg.concurrency);
  shape.aux_item_bytes = 64;
  if (cfg.state != "none") {
    shape.num_state = 2;
    shape.state_pages = shape.aux_slots * (cfg.state == "swa" ? 2 : 1);
    shape.state_page_bytes = cfg.state == "swa" ? 256 : 512;
  }
  if (!from_string(cfg.integrity, s.integrity))
    return make_error(errc::invalid_argument,
                      "--integrity must be off or xxh3, not '" + cfg.integrity + "'");
  auto& plans = s.plans;
  plans.resize(static_cast<size_t>(cfg.rooms) + 1);
  // The data plane's faults, on the ranks that move the bytes: prefill's
  // writes, or with --pull decode's reads.
  s.mover_faults.resize(static_cast<size_t>(std::max(np, dtp)));
  fault_odds odds{cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late, cfg.p_flip};
  // A data-plane fault needs a rank that moves the room's bytes and aux
  // (an MLA dummy moves nothing): the aux sources of the decode ranks.
  std::vector<bool> moves_aux(static_cast<size_t>(np), true);
  if (model) {
    std::vector<parallel_layout> ps, ds;
    for (int i = 0; i < np; ++i) {
      ps.push_back(*model);
      auto& x = ps.back();
      x.tp_size = ptp;
      x.tp_rank = i % ptp;
      x.pp_size = ppp;
      x.pp_rank = i / ptp;
      x.layers = model->layers / ppp;
      x.first_layer = x.pp_rank * x.layers;
    }
    for (int t = 0; t < dtp; ++t) {
      ds.push_back(*model);
      ds.back().tp_size = dtp;
      ds.back().tp_rank = t;
    }
    auto m = map_room(ps, ds);
    if (!m)
      return std::move(m.error());
    moves_aux.assign(moves_aux.size(), false);
    for (auto& d : m->decode)
      moves_aux[static_cast<size_t>(d.aux_source.pp_rank * ptp + d.aux_source.tp_rank)] = true;
  }
  auto size_of = [&](role side) { return side == role::prefill ? np : dtp; };
  for (room_id r = 1; r <= static_cast<room_id>(cfg.rooms); ++r) {
    plans[r] = plan_for(seed, r, odds, std::max(ptp, dtp));
    if (cfg.pull && plans[r].kind == fault_kind::transfer) {
      // The decode rank of that slot reads the room: it meets the fault (a
      // read carries no aux of its own: its fault comes before the post).
      plans[r].side = role::decode;
      if (plans[r].point == fault_point::on_aux)
        plans[r].point = fault_point::before_post;
    }
    plans[r].tp %= size_of(plans[r].side);
    bool data_fault = plans[r].kind == fault_kind::transfer || plans[r].kind == fault_kind::flip;
    if (data_fault && !moves_aux[static_cast<size_t>(plans[r].tp)])
      plans[r].tp = 0;
    if (data_fault)
      s.mover_faults[static_cast<size_t>(plans[r].tp)].targeted.push_back({r, plans[r].point});
    if (plans[r].kind == fault_kind::stall_all || plans[r].kind == fault_kind::late_write)
      for (auto& f : s.mover_faults)
        f.targeted.push_back({r, plans[r].point});
  }
  return s;
}

caf::expected<stress_result> run_in_process(caf::actor_system& sys, const stress_config& cfg,
                                            const stress_setup& setup) {
  return in_process_run{sys, cfg, setup}.run();
}

} // namespace kvroom::cli
