// `kvroom stress`: thousands of rooms through a prefill and a decode group at
// a chosen concurrency, with a fault schedule drawn from a seed (transfer
// errors at every point, scheduler aborts and room-actor kills in every
// state, delayed control messages), then kvroom's invariants checked on every
// room and on the ranks afterwards. Exits 1 naming the room and rank when an
// invariant breaks.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "caf/all.hpp"

#include "kvroom/kit/testkit.hpp"
#include "kvroom/messages/failure_cause.hpp"
#include "kvroom/transport/rank_mapping.hpp"

#include "commands.hpp"
#include "layout_options.hpp"
#include "stress_check.hpp"
#include "stress_plan.hpp"
#include "stress_processes.hpp"

namespace kvroom::cli {

namespace {

using namespace kvroom::stress;
using clock_type = std::chrono::steady_clock;

class stress_config : public caf::actor_system_config {
public:
  int64_t prefill_tp = 2;
  int64_t decode_tp = 2;
  int64_t prefill_pp = 1;
  int64_t rooms = 3000;
  int64_t concurrency = 64;
  int64_t seed = 0;
  int64_t layers = 2;
  int64_t page_bytes = 1024;
  int64_t pages_per_room = 4;
  double p_transfer = 0.05;
  double p_abort = 0.05;
  double p_kill = 0.02;
  double p_multi = 0.0;
  double p_late = 0.0;
  double p_delay = 0.05;
  int64_t max_bytes_per_room = 256;
  int64_t max_tombstones = 1024;
  int64_t max_delay_ms = 20;
  int64_t timeout_ms = 5000;
  int64_t max_seconds = 600;
  std::string json;
  std::string sabotage = "none";
  std::string log_level = "off";
  bool processes = false;
  std::string signal = "seeded";
  std::string victim;
  // A declared parallel layout (--kv-heads or --mla): any two TP sizes.
  layout_options parallel;
  std::string state = "none";
  // The data plane between the ranks: local, or tcp on --tcp-host's
  // addresses (one path each), some of them broken by --fault-path.
  std::string transport = "local";
  std::string tcp_host = "127.0.0.1";
  std::string fault_path;
  double p_path = 1.0;
  std::string integrity = "off";
  double p_flip = 0.0;
  bool pull = false;

  stress_config() {
    opt_group group{custom_options_, "global"};
    parallel.add_to(group);
    group
      .add(prefill_tp, "prefill-tp", "tensor-parallel size of the prefill group")
      .add(state, "state", "hybrid-model state beside the KV pages: none, mamba (2 state "
                           "buffers, a slot per room) or swa (2 buffers, a 2-page window)")
      .add(prefill_pp, "prefill-pp", "pipeline stages of the prefill group (a declared layout; "
                                     "each stage holds layers / prefill-pp layers)")
      .add(decode_tp, "decode-tp", "tensor-parallel size of the decode group (another "
                                   "than prefill's needs a declared layout: --kv-heads or --mla)")
      .add(rooms, "rooms", "rooms to run")
      .add(concurrency, "concurrency", "rooms in flight at once")
      .add(seed, "seed", "fault schedule seed (0: from the clock; printed)")
      .add(layers, "layers", "layers (K and V buffer each)")
      .add(page_bytes, "page-bytes", "bytes per KV page")
      .add(pages_per_room, "pages-per-room", "KV pages per room")
      .add(p_transfer, "p-transfer", "probability a room gets a data-plane fault")
      .add(p_abort, "p-abort", "probability a room is aborted by a scheduler")
      .add(p_kill, "p-kill", "probability a room actor is killed mid-room")
      .add(p_multi, "p-multi", "probability of the same fault on every rank of a side "
                               "(bad indices on every decode rank, every prefill rank "
                               "stalling, aborts on both sides)")
      .add(p_late, "p-late", "probability of slow batches on every prefill rank and a "
                             "decode abort while they move (the fence)")
      .add(max_bytes_per_room, "max-bytes-per-room",
           "resident memory growth allowed per room after the first tenth (runs of "
           "10,000 rooms or more)")
      .add(max_tombstones, "max-tombstones", "cleared room ids each rank remembers")
      .add(p_delay, "p-delay", "probability a manager delays a control message")
      .add(max_delay_ms, "max-delay-ms", "longest control-message delay")
      .add(timeout_ms, "timeout-ms", "prefill room timeouts (decode: twice that)")
      .add(max_seconds, "max-seconds", "bound on the whole run")
      .add(transport, "transport", "local, or shm / tcp between the ranks of this process")
      .add(tcp_host, "tcp-host", "with tcp: the addresses each rank listens on, "
                                 "comma-separated (one data path each)")
      .add(fault_path, "fault-path", "prefill's batches on these paths fail (transports or "
                                     "address prefixes, comma-separated); rooms must still "
                                     "succeed while another path works")
      .add(p_path, "p-path", "with --fault-path: probability a batch on it fails (after "
                             "its bytes moved)")
      .add(integrity, "integrity", "off, or xxh3: every part hashed on both sides")
      .add(pull, "pull", "decode ranks pull (read prefill's pages): data-plane faults meet "
                         "their reads, and a decode rank is the origin of one")
      .add(p_flip, "p-flip", "probability a room gets one byte flipped on its way (with "
                             "--integrity the room must fail; without, the checker must "
                             "catch the wrong bytes)")
      .add(json, "json", "write the summary as JSON to this file")
      .add(sabotage, "sabotage", "none, drop-fan-out, no-fence, local-decisions or "
                                 "keep-monitors (each proves a check can fail)")
      .add(log_level, "log-level", "trace, debug, info, warn, error, off")
      .add(processes, "processes", "one kvroom serve process per rank; a rank is killed and restarted")
      .add(signal, "signal", "with --processes: sigkill, sigstop or seeded")
      .add(victim, "victim", "with --processes: the rank to stop (p1, d0, ...; default: seeded)");
  }
};

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

/// Freed decode pages and aux slots hold a canary until reused: a byte that
/// lands in them meanwhile is a late write of an earlier room.
uint8_t canary_of(int64_t index) {
  return static_cast<uint8_t>(0xA5 ^ (index * 31));
}

/// A room's state pages (hybrid models) follow its aux slot: one Mamba slot
/// per aux slot, or an SWA window of `state_pages / aux_slots` pages; freed
/// and reused with it.
std::vector<int64_t> state_of(const kv_shape& sh, int64_t aux) {
  std::vector<int64_t> out;
  if (sh.num_state == 0 || aux < 0)
    return out;
  auto w = static_cast<int64_t>(sh.state_pages / sh.aux_slots);
  for (int64_t i = 0; i < w; ++i)
    out.push_back(aux * w + (w - 1 - i));
  return out;
}

void write_canary(host_kv_cache& mem, int64_t page, int64_t aux) {
  auto& sh = mem.shape();
  for (auto s : state_of(sh, aux))
    for (uint32_t b = 0; b < sh.num_state; ++b)
      std::memset(mem.state(b, static_cast<uint64_t>(s)), canary_of(aux), sh.state_page_bytes);
  if (page >= 0)
    for (uint32_t b = 0; b < sh.num_buffers; ++b)
      std::memset(mem.page(b, static_cast<uint64_t>(page)), canary_of(page),
                  sh.page_size_bytes);
  if (aux >= 0)
    for (uint32_t b = 0; b < sh.num_aux; ++b)
      std::memset(mem.aux(b, static_cast<uint64_t>(aux)), canary_of(aux),
                  sh.aux_item_bytes);
}

/// Bytes of a page (or aux slot, `page < 0`) that differ from its canary.
uint64_t canary_damage(host_kv_cache& mem, int64_t page, int64_t aux) {
  auto& sh = mem.shape();
  uint64_t n = 0;
  auto count = [&](const uint8_t* p, uint64_t len, uint8_t c) {
    for (uint64_t i = 0; i < len; ++i)
      n += p[i] != c ? 1 : 0;
  };
  if (page >= 0)
    for (uint32_t b = 0; b < sh.num_buffers; ++b)
      count(mem.page(b, static_cast<uint64_t>(page)), sh.page_size_bytes, canary_of(page));
  if (aux >= 0)
    for (uint32_t b = 0; b < sh.num_aux; ++b)
      count(mem.aux(b, static_cast<uint64_t>(aux)), sh.aux_item_bytes, canary_of(aux));
  for (auto s : state_of(sh, aux))
    for (uint32_t b = 0; b < sh.num_state; ++b)
      count(mem.state(b, static_cast<uint64_t>(s)), sh.state_page_bytes, canary_of(aux));
  return n;
}

uint64_t rss_bytes() {
  std::ifstream statm{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

int bad(const std::string& what) {
  std::fprintf(stderr, "kvroom stress: %s\n", what.c_str());
  return 2;
}

room_id key(room_id room, int tp) {
  return room ^ (static_cast<room_id>(tp + 1) << 40);
}

} // namespace

int run_stress(int argc, char** argv) {
  stress_config cfg;
  prepare_config(cfg);
  if (auto err = cfg.parse(argc, argv))
    return bad("bad options: " + caf::to_string(err));
  if (cfg.cli_helptext_printed)
    return 0;
  if (!set_log_level(cfg.log_level))
    return bad("unknown log level '" + cfg.log_level + "'");
  if (cfg.prefill_tp < 1 || cfg.decode_tp < 1 || cfg.prefill_tp > 64 || cfg.decode_tp > 64)
    return bad("prefill-tp and decode-tp must lie in [1, 64]");
  if (cfg.prefill_pp < 1 || cfg.prefill_pp > 16 || cfg.layers % cfg.prefill_pp != 0)
    return bad("prefill-pp must lie in [1, 16] and divide layers");
  if (cfg.state != "none" && cfg.state != "mamba" && cfg.state != "swa")
    return bad("--state must be none, mamba or swa");
  if (cfg.state != "none" && (cfg.prefill_tp != cfg.decode_tp || cfg.prefill_pp != 1))
    return bad("--state moves a rank's own state: equal TP sizes and no PP");
  if (cfg.state != "none" && cfg.processes)
    return bad("--state runs in one process (across processes: serve --state)");
  if (cfg.prefill_pp > 1 && !cfg.parallel.declared())
    return bad("--prefill-pp needs a declared layout (--kv-heads or --mla)");
  if (cfg.parallel.pp_size != 1 || cfg.parallel.pp != 0)
    return bad("stress takes --prefill-pp, not --pp-size/--pp");
  if (cfg.prefill_tp != cfg.decode_tp && !cfg.parallel.declared())
    return bad("prefill-tp " + std::to_string(cfg.prefill_tp) + " and decode-tp "
               + std::to_string(cfg.decode_tp)
               + " differ: declare the model's layout (--kv-heads or --mla) to slice heads");
  if (cfg.processes && (cfg.prefill_tp != cfg.decode_tp || cfg.parallel.declared()))
    return bad("--processes runs equal TP sizes without a declared layout (unequal TP and "
               "MLA across processes: process_parallel_test)");
  // The model's layout, its TP size and rank set per rank.
  auto model = cfg.parallel.layout(1, 0, cfg.layers);
  if (!model)
    return bad(describe(model.error()));
  if (cfg.rooms < 1 || cfg.concurrency < 1 || cfg.layers < 1
      || cfg.page_bytes < 8 || cfg.pages_per_room < 2 || cfg.timeout_ms < 10
      || cfg.max_seconds < 1)
    return bad("sizes must be positive (pages-per-room at least 2)");
  for (double p : {cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late,
                   cfg.p_delay})
    if (p < 0.0 || p > 1.0)
      return bad("probabilities must lie in [0, 1]");
  if (cfg.p_transfer + cfg.p_abort + cfg.p_kill + cfg.p_multi + cfg.p_late > 1.0)
    return bad("p-transfer + p-abort + p-kill + p-multi + p-late must not exceed 1");
  if (cfg.max_tombstones < 1 || cfg.max_bytes_per_room < 0)
    return bad("max-tombstones must be positive, max-bytes-per-room not negative");
  if (cfg.sabotage != "none" && cfg.sabotage != "drop-fan-out" && cfg.sabotage != "no-fence"
      && cfg.sabotage != "local-decisions" && cfg.sabotage != "keep-monitors")
    return bad("unknown sabotage '" + cfg.sabotage + "'");
  auto seed = cfg.seed != 0
                ? static_cast<uint64_t>(cfg.seed)
                : static_cast<uint64_t>(clock_type::now().time_since_epoch().count());
  auto tp = static_cast<int>(cfg.prefill_tp);
  auto ptp = static_cast<int>(cfg.prefill_tp);
  auto dtp = static_cast<int>(cfg.decode_tp);
  auto ppp = static_cast<int>(cfg.prefill_pp);
  // Prefill ranks in stage-major order: index pp * ptp + tp.
  auto np = ptp * ppp;
  auto size_of = [&](role side) { return side == role::prefill ? np : dtp; };
  if (cfg.pull && (*model || cfg.processes || cfg.p_flip > 0 || !cfg.fault_path.empty()))
    return bad("--pull runs in one process, equal TP sizes without a declared layout, with "
               "no --p-flip (a flip is a writer's) and no --fault-path (a read names one "
               "path and is not moved to another)");
  if (cfg.processes) {
    process_options po;
    po.tp = tp;
    po.rooms = cfg.rooms;
    po.concurrency = cfg.concurrency;
    po.seed = seed;
    po.p_transfer = cfg.p_transfer;
    po.timeout_ms = cfg.timeout_ms;
    po.max_seconds = cfg.max_seconds;
    po.signal = cfg.signal;
    po.victim = cfg.victim;
    po.json = cfg.json;
    po.log_level = cfg.log_level == "off" ? "warn" : cfg.log_level;
    if (po.signal != "sigkill" && po.signal != "sigstop" && po.signal != "seeded")
      return bad("--signal must be sigkill, sigstop or seeded");
    return run_processes(po);
  }
  std::printf("kvroom stress: seed %llu, %d prefill x %d decode ranks in one process%s, "
              "%lld rooms at concurrency %lld\n"
              "  faults: transfer %.3f, abort %.3f, kill %.3f, same-on-every-rank %.3f, "
              "late write %.3f per room; control delay %.3f "
              "(up to %lld ms); timeouts %lld ms; sabotage %s\n",
              static_cast<unsigned long long>(seed), np, dtp,
              !*model      ? ""
              : ppp > 1    ? " (prefill in pipeline stages, by the rank mapping)"
              : (*model)->mla ? " (MLA)"
                              : " (heads sliced by the rank mapping)",
              static_cast<long long>(cfg.rooms), static_cast<long long>(cfg.concurrency),
              cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late, cfg.p_delay,
              static_cast<long long>(cfg.max_delay_ms), static_cast<long long>(cfg.timeout_ms),
              cfg.sabotage.c_str());
  std::fflush(stdout);

  kv_shape shape;
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
  std::vector<room_plan> plans(static_cast<size_t>(cfg.rooms) + 1);
  // The data plane's faults, on the ranks that move the bytes: prefill's
  // writes, or with --pull decode's reads.
  std::vector<fault_plan> prefill_faults(static_cast<size_t>(std::max(np, dtp)));
  fault_odds odds{cfg.p_transfer, cfg.p_abort, cfg.p_kill, cfg.p_multi, cfg.p_late, cfg.p_flip};
  integrity_mode integrity = integrity_mode::off;
  if (!from_string(cfg.integrity, integrity))
    return bad("--integrity must be off or xxh3, not '" + cfg.integrity + "'");
  // A data-plane fault needs a rank that moves the room's bytes and aux
  // (an MLA dummy moves nothing): the aux sources of the decode ranks.
  std::vector<bool> moves_aux(static_cast<size_t>(np), true);
  if (*model) {
    std::vector<parallel_layout> ps, ds;
    for (int i = 0; i < np; ++i) {
      ps.push_back(**model);
      auto& x = ps.back();
      x.tp_size = ptp;
      x.tp_rank = i % ptp;
      x.pp_size = ppp;
      x.pp_rank = i / ptp;
      x.layers = (**model).layers / ppp;
      x.first_layer = x.pp_rank * x.layers;
    }
    for (int t = 0; t < dtp; ++t) {
      ds.push_back(**model);
      ds.back().tp_size = dtp;
      ds.back().tp_rank = t;
    }
    auto m = map_room(ps, ds);
    if (!m)
      return bad(describe(m.error()));
    moves_aux.assign(moves_aux.size(), false);
    for (auto& d : m->decode)
      moves_aux[static_cast<size_t>(d.aux_source.pp_rank * ptp + d.aux_source.tp_rank)] = true;
  }
  for (room_id r = 1; r <= static_cast<room_id>(cfg.rooms); ++r) {
    plans[r] = plan_for(seed, r, odds, std::max(ptp, dtp));
    if (cfg.pull && plans[r].kind == fault_kind::transfer) {
      // The decode rank of that slot reads the room: it meets the fault
      // (a read carries no aux of its own: its fault comes before the post).
      plans[r].side = role::decode;
      if (plans[r].point == fault_point::on_aux)
        plans[r].point = fault_point::before_post;
    }
    plans[r].tp %= size_of(plans[r].side);
    bool data_fault = plans[r].kind == fault_kind::transfer || plans[r].kind == fault_kind::flip;
    if (data_fault && !moves_aux[static_cast<size_t>(plans[r].tp)])
      plans[r].tp = 0;
    if (data_fault)
      prefill_faults[static_cast<size_t>(plans[r].tp)].targeted.push_back(
        {r, plans[r].point});
    if (plans[r].kind == fault_kind::stall_all || plans[r].kind == fault_kind::late_write)
      for (auto& f : prefill_faults)
        f.targeted.push_back({r, plans[r].point});
  }

  caf::actor_system sys{cfg};
  std::vector<violation> violations;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_fault; // success, failed
  uint64_t concluded = 0, failed_rooms = 0;
  double secs = 0;
  uint64_t rss_start = 0, rss_early = 0, rss_end = 0, rooms_early = 0;
  double bytes_per_room = 0;
  uint64_t path_retries = 0, path_rests = 0;
  {
    runtime rt{sys};
    // Kills a room as an actor: kvroom's actors drop exits that do not come
    // from the actor they name (an anonymous one could be a stranger's).
    caf::scoped_actor killer{sys};
    auto ms = static_cast<uint32_t>(cfg.timeout_ms);
    auto customize = [&](rank_config& rc) {
      // The side that does not move the bytes waits longer, so a data-plane
      // fault is always seen first where it happened and no second origin
      // races it: decode, or with --pull prefill (its hold is the lease).
      auto mover = cfg.pull ? role::decode : role::prefill;
      rc.timeouts = rc.side == mover ? room_timeouts{ms, ms, ms}
                                     : room_timeouts{2 * ms, 2 * ms, 2 * ms};
      if (rc.side == (cfg.pull ? role::decode : role::prefill))
        rc.faults = prefill_faults[static_cast<size_t>(
          (rc.parallel ? rc.parallel->pp_rank : 0) * rc.tp_size + rc.tp_rank)];
      rc.pull = cfg.pull && rc.side == role::decode;
      rc.chaos.delay_probability = cfg.p_delay;
      rc.chaos.max_delay_ms = static_cast<uint32_t>(cfg.max_delay_ms);
      rc.chaos.seed = seed;
      rc.chaos.drop_fan_out = cfg.sabotage == "drop-fan-out";
      rc.chaos.no_fence = cfg.sabotage == "no-fence";
      rc.chaos.local_decisions = cfg.sabotage == "local-decisions";
      rc.chaos.keep_room_monitors = cfg.sabotage == "keep-monitors";
      rc.limits.max_tombstones = static_cast<uint32_t>(cfg.max_tombstones);
      rc.integrity = integrity;
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
    };
    auto group = *model ? local_group::start(rt, ptp, dtp, **model, shape, customize, ppp)
                        : local_group::start(rt, tp, shape, customize);
    if (!group)
      return bad(describe(group.error()));
    auto& prefill = (*group)->prefill;
    auto& decode = (*group)->decode;
    auto& prefill_mem = (*group)->prefill_mem;
    auto& decode_mem = (*group)->decode_mem;
    // Ranks are up (managers, workers, inboxes): every actor beyond these
    // belongs to a room.
    auto actors_before = sys.registry().running();
    // Prefill source pages of a slot (decode pages come from free lists).
    auto source_pages = [&](size_t slot) {
      std::vector<int64_t> out;
      auto base = static_cast<int64_t>(slot) * cfg.pages_per_room;
      for (int64_t i = 0; i < cfg.pages_per_room; ++i)
        out.push_back(base + i);
      return out;
    };
    // Decode pages and aux slots come from FIFO free lists, as a scheduler's
    // allocator hands them out; each free one holds its canary.
    std::deque<int64_t> free_pages;
    std::deque<int64_t> free_aux;
    std::vector<room_id> page_owner(shape.num_pages, 0);
    std::vector<room_id> aux_owner(shape.aux_slots, 0);
    for (int64_t p = 0; p < static_cast<int64_t>(shape.num_pages); ++p)
      free_pages.push_back(p);
    for (int64_t a = 0; a < static_cast<int64_t>(shape.aux_slots); ++a)
      free_aux.push_back(a);
    for (auto& mem : decode_mem) {
      for (auto p : free_pages)
        write_canary(*mem, p, -1);
      for (auto a : free_aux)
        write_canary(*mem, -1, a);
    }
    uint64_t canaries_checked = 0;
    /// A freed page or slot that changed while free: a late write.
    auto check_free = [&](int64_t page, int64_t aux, const char* when) {
      for (int t = 0; t < dtp; ++t) {
        auto n = canary_damage(*decode_mem[static_cast<size_t>(t)], page, aux);
        ++canaries_checked;
        if (n == 0)
          continue;
        auto owner = page >= 0 ? page_owner[static_cast<size_t>(page)]
                               : aux_owner[static_cast<size_t>(aux)];
        violations.push_back(
          {owner, decode[static_cast<size_t>(t)]->ref().id,
           std::string{page >= 0 ? "page " + std::to_string(page)
                                 : "aux slot " + std::to_string(aux)}
             + " changed in " + std::to_string(n) + " bytes " + when
             + " after room " + std::to_string(owner)
             + " was terminal and released it (a late write)"});
      }
    };
    auto room_bound = std::chrono::milliseconds(7 * cfg.timeout_ms + 2000);
    auto start = clock_type::now();
    auto run_deadline = start + std::chrono::seconds(cfg.max_seconds);
    auto last_report = start;
    rss_start = rss_bytes();
    auto rank_of = [&](role side, int t) -> rank& {
      return side == role::prefill ? *prefill[static_cast<size_t>(t)]
                                   : *decode[static_cast<size_t>(t)];
    };
    // What the stress keeps about each room in flight, by the loop's slot.
    std::vector<live_room> by_slot(static_cast<size_t>(cfg.concurrency));
    auto handle_of = [&](loop_room& r, role side, int t) -> room_handle& {
      if (side == role::prefill)
        return r.senders[static_cast<size_t>(t)];
      return r.receivers[static_cast<size_t>(t)];
    };
    loop_hooks hooks;
    hooks.opened = [&](loop_room& lr) {
      auto& r = by_slot[lr.slot];
      r = live_room{};
      r.plan = plans[lr.id];
      r.fault.kind = r.plan.kind;
      r.fault.rank = rank_of(r.plan.side, r.plan.tp).ref().id;
      bool data_fault = r.plan.kind == fault_kind::transfer || r.plan.kind == fault_kind::flip;
      r.fault.fired = data_fault;
      r.fault.detail = data_fault ? to_string(r.plan.point) : "in " + to_string(r.plan.at);
      r.deadline = clock_type::now() + room_bound;
      for (int64_t i = 0; i < cfg.pages_per_room; ++i) {
        r.dst_pages.push_back(free_pages.front());
        free_pages.pop_front();
        check_free(r.dst_pages.back(), -1, "while free");
      }
      r.dst_aux = free_aux.front();
      free_aux.pop_front();
      check_free(-1, r.dst_aux, "while free");
      if (r.plan.kind == fault_kind::bad_indices_all || r.plan.kind == fault_kind::stall_all
          || r.plan.kind == fault_kind::abort_both) {
        r.fault.rank = -1;
        r.fault.fired = r.plan.kind != fault_kind::abort_both;
        r.fault.detail = r.plan.kind == fault_kind::abort_both ? "in " + to_string(r.plan.at)
                                                                : "on every rank";
      }
      for (int t = 0; t < np; ++t) {
        auto& layout = (*group)->layout(role::prefill, t);
        if (layout)
          prefill_mem[t]->write_room(lr.id, source_pages(lr.slot), static_cast<int64_t>(lr.slot),
                                     *layout);
        else
          prefill_mem[t]->write_room(key(lr.id, t), source_pages(lr.slot),
                                     static_cast<int64_t>(lr.slot));
        // A TP slot's own state (equal TP sizes): checked per slot.
        prefill_mem[t]->write_state(key(lr.id, t), state_of(shape, static_cast<int64_t>(lr.slot)));
      }
    };
    hooks.each = [&](loop_room& lr) {
      auto& r = by_slot[lr.slot];
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
            killer->send_exit(rank_of(r.plan.side, r.plan.tp).room_actor(lr.id),
                              caf::exit_reason::kill);
          r.fault.fired = true;
          r.fault.detail = "in " + to_string(st);
        }
      }
    };
    hooks.receiver_ready = [&](loop_room& lr, int t) {
      auto& r = by_slot[lr.slot];
      auto dst = r.dst_pages;
      // The same bad index on every decode rank (they share one allocation,
      // as TP ranks do).
      if (r.plan.kind == fault_kind::bad_indices_all)
        dst[0] = static_cast<int64_t>(shape.num_pages) + 3;
      (void) lr.receivers[static_cast<size_t>(t)].init(std::move(dst), r.dst_aux,
                                                       state_of(shape, r.dst_aux));
      return true;
    };
    hooks.sender_ready = [&](loop_room& lr, int t) {
      auto& send = lr.senders[static_cast<size_t>(t)];
      auto pages = source_pages(lr.slot);
      auto half = pages.size() / 2;
      (void) send.init(pages.size(), static_cast<int64_t>(lr.slot));
      (void) send.send({pages.begin(), pages.begin() + static_cast<long>(half)}, false);
      (void) send.send({pages.begin() + static_cast<long>(half), pages.end()}, true,
                       state_of(shape, static_cast<int64_t>(lr.slot)));
      return true;
    };
    hooks.give_up = [&](const loop_room& lr) {
      return clock_type::now() >= by_slot[lr.slot].deadline;
    };
    hooks.concluded = [&](loop_room& lr) {
      auto& r = by_slot[lr.slot];
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
            auto& mem = *decode_mem[static_cast<size_t>(t)];
            auto& layout = (*group)->layout(role::decode, t);
            if (!(layout ? mem.check_room(lr.id, r.dst_pages, r.dst_aux, *layout, &why)
                         : mem.check_room(key(lr.id, t), r.dst_pages, r.dst_aux, &why))
                || !mem.check_state(key(lr.id, t), state_of(shape, r.dst_aux), &why))
              rec.data_error = why;
          }
          rec.outcomes.push_back(std::move(o));
        }
      }
      if (rec.fault.kind == fault_kind::transfer && !any_failed)
        violations.push_back({lr.id, rec.fault.rank,
                              "Success reported over an injected transfer fault ("
                                + rec.fault.detail + ")"});
      // A flipped byte with the integrity check on: the room fails, and
      // every rank names the check as the cause. (With broken paths a flip
      // may never land: its batch's copy on another path came first, and
      // the receiver drops the flipped one as a duplicate; the pages are
      // then right, which the byte-exact check sees.)
      if (rec.fault.kind == fault_kind::flip && integrity != integrity_mode::off) {
        if (!any_failed && cfg.fault_path.empty())
          violations.push_back({lr.id, rec.fault.rank,
                                "Success reported over a flipped byte with integrity on"});
        for (auto& o : rec.outcomes)
          if (o.error && o.error->cause != failure_cause::integrity)
            violations.push_back({lr.id, o.rank.id,
                                  "a flipped byte failed the room with another cause: "
                                    + o.error->failure_reason});
      }
      for (auto& v : check_room(rec)) {
        v.what += " [fault: " + to_string(rec.fault.kind) + " " + rec.fault.detail
                  + " on rank " + std::to_string(rec.fault.rank)
                  + (rec.fault.fired ? "" : ", not fired") + "]";
        violations.push_back(v);
      }
      auto& tally = by_fault[to_string(rec.fault.fired ? rec.fault.kind : fault_kind::none)];
      (any_failed ? tally.second : tally.first) += 1;
      failed_rooms += any_failed ? 1 : 0;
      // Every decode rank's poll() was terminal: the pages are the
      // scheduler's again, and no byte of this room may land in them.
      for (auto p : r.dst_pages) {
        for (auto& mem : decode_mem)
          write_canary(*mem, p, -1);
        page_owner[static_cast<size_t>(p)] = lr.id;
        free_pages.push_back(p);
      }
      for (auto& mem : decode_mem)
        write_canary(*mem, -1, r.dst_aux);
      aux_owner[static_cast<size_t>(r.dst_aux)] = lr.id;
      free_aux.push_back(r.dst_aux);
      ++concluded;
      if (concluded == static_cast<uint64_t>(cfg.rooms) / 10) {
        rss_early = rss_bytes();
        rooms_early = concluded;
      }
      r = live_room{};
    };
    scheduler_loop loop{ranks_of(prefill), ranks_of(decode), 0, static_cast<size_t>(cfg.concurrency),
                        1, static_cast<uint64_t>(cfg.rooms), std::move(hooks)};
    while (!loop.done() && clock_type::now() < run_deadline) {
      bool progressed = loop.step();
      if (!loop.open_error().empty())
        return bad("cannot open room: " + loop.open_error());
      auto now = clock_type::now();
      if (now - last_report >= std::chrono::seconds(1)) {
        auto t = std::chrono::duration<double>(now - start).count();
        std::printf("  [%6.1fs] %llu/%lld rooms concluded, %llu failed, %zu violations, %.0f rooms/s\n",
                    t, static_cast<unsigned long long>(concluded),
                    static_cast<long long>(cfg.rooms),
                    static_cast<unsigned long long>(failed_rooms), violations.size(),
                    concluded / t);
        std::fflush(stdout);
        last_report = now;
      }
      if (!progressed)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    secs = std::chrono::duration<double>(clock_type::now() - start).count();
    if (concluded < static_cast<uint64_t>(cfg.rooms))
      violations.push_back({0, -1, "run bound of " + std::to_string(cfg.max_seconds)
                                     + " s passed with "
                                     + std::to_string(cfg.rooms - static_cast<int64_t>(concluded))
                                     + " rooms unconcluded"});
    // Every room was cleared: nothing may remain on any rank.
    auto all = ranks_of(prefill);
    for (auto* r : ranks_of(decode))
      all.push_back(r);
    auto quiet_deadline = clock_type::now() + std::chrono::seconds(10);
    bool quiet = false;
    while (!quiet && clock_type::now() < quiet_deadline) {
      quiet = sys.registry().running() <= actors_before;
      for (auto* r : all) {
        auto st = r->stats();
        quiet = quiet && st && st->live_rooms == 0 && st->failure_records == 0
                && st->parked == 0;
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
    if (origin_failures != failed_rooms)
      violations.push_back({0, -1, "managers counted " + std::to_string(origin_failures)
                                     + " origin failures for "
                                     + std::to_string(failed_rooms) + " failed rooms"});
    // Broken paths: their batches moved to other paths (so the fault was
    // real), and no room was lost to them (the fault table above).
    for (auto* r : all) {
      auto m = r->metrics().paths;
      for (auto x : m.retries)
        path_retries += x;
      path_rests += m.rests;
    }
    if (!cfg.fault_path.empty() && path_retries == 0)
      violations.push_back({0, -1, "--fault-path " + cfg.fault_path
                                     + " moved no batch to another path: the fault never fired"});
    // Late writes that land after the last room: every free page and slot.
    for (auto p : free_pages)
      check_free(p, -1, "by the end of the run");
    for (auto a : free_aux)
      check_free(-1, a, "by the end of the run");
    if (sys.registry().running() > actors_before)
      violations.push_back({0, -1, std::to_string(sys.registry().running() - actors_before)
                                     + " actors still running after every room was cleared"});
    rss_end = rss_bytes();
    // Memory is bounded by what is in flight: after the first tenth (caches
    // warm, tombstones at their bound) it must not grow with rooms passed.
    if (rss_early > 0 && concluded > rooms_early) {
      auto grown = rss_end > rss_early ? rss_end - rss_early : 0;
      bytes_per_room = static_cast<double>(grown) / static_cast<double>(concluded - rooms_early);
      if (cfg.rooms >= 10'000 && bytes_per_room > static_cast<double>(cfg.max_bytes_per_room))
        violations.push_back({0, -1, "resident memory grew by "
                                       + std::to_string(static_cast<uint64_t>(bytes_per_room))
                                       + " bytes per room after the first 10% of rooms (limit "
                                       + std::to_string(cfg.max_bytes_per_room) + ")"});
    }
  }

  std::printf("\nfault fired      rooms ok   rooms failed\n");
  for (auto& kvp : by_fault)
    std::printf("  %-12s %10llu %14llu\n", kvp.first.c_str(),
                static_cast<unsigned long long>(kvp.second.first),
                static_cast<unsigned long long>(kvp.second.second));
  std::printf("%llu rooms in %.2f s (%.0f rooms/s); resident memory %.1f -> %.1f MiB "
              "(%.1f bytes per room after the first tenth); seed %llu\n",
              static_cast<unsigned long long>(concluded), secs, concluded / secs,
              rss_start / 1048576.0, rss_end / 1048576.0, bytes_per_room,
              static_cast<unsigned long long>(seed));
  if (cfg.transport != "local")
    std::printf("data paths (%s over %s): %llu batches moved to another path, %llu rests\n",
                cfg.transport.c_str(), cfg.tcp_host.c_str(),
                static_cast<unsigned long long>(path_retries),
                static_cast<unsigned long long>(path_rests));
  for (size_t i = 0; i < violations.size() && i < 20; ++i)
    std::printf("invariant violated: %s\n", to_string(violations[i]).c_str());
  if (violations.size() > 20)
    std::printf("... and %zu more violations\n", violations.size() - 20);
  if (!cfg.json.empty()) {
    nlohmann::ordered_json j;
    j["seed"] = seed;
    j["prefill_tp"] = ptp;
    j["prefill_pp"] = ppp;
    j["decode_tp"] = dtp;
    j["layout"] = !*model ? "undeclared" : (*model)->mla ? "mla" : to_string((*model)->order);
    j["rooms"] = cfg.rooms;
    j["concurrency"] = cfg.concurrency;
    j["p_transfer"] = cfg.p_transfer;
    j["p_abort"] = cfg.p_abort;
    j["p_kill"] = cfg.p_kill;
    j["p_delay"] = cfg.p_delay;
    j["timeout_ms"] = cfg.timeout_ms;
    j["sabotage"] = cfg.sabotage;
    j["concluded"] = concluded;
    j["failed_rooms"] = failed_rooms;
    j["seconds"] = secs;
    j["rooms_per_second"] = secs > 0 ? concluded / secs : 0.0;
    j["rss_start_bytes"] = rss_start;
    j["rss_end_bytes"] = rss_end;
    j["bytes_per_room"] = bytes_per_room;
    j["transport"] = cfg.transport;
    j["path_retries"] = path_retries;
    j["path_rests"] = path_rests;
    j["by_fault"] = nlohmann::ordered_json::object();
    for (auto& kvp : by_fault)
      j["by_fault"][kvp.first] = {{"ok", kvp.second.first}, {"failed", kvp.second.second}};
    j["violations"] = nlohmann::ordered_json::array();
    for (auto& v : violations)
      j["violations"].push_back({{"room", v.room}, {"rank", v.rank}, {"what", v.what}});
    std::ofstream out{cfg.json};
    out << j.dump(2) << "\n";
  }
  std::printf("%s\n", violations.empty() ? "stress: all invariants hold"
                                         : "stress: INVARIANTS BROKEN");
  return violations.empty() ? 0 : 1;
}

} // namespace kvroom::cli
