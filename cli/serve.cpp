// `kvroom serve`: one rank in its own process. It joins the deployment
// through the bootstrap registry (`kvroom registry`, or published by one
// prefill rank with --publish-registry; reached with retry and backoff) or
// a directory on etcd (--directory=etcd://...),
// proves membership with the deployment secret, links to its peers
// directly, registers host KV buffers, offers
// its data plane (local, tcp) and then runs a synthetic scheduler over a
// range of rooms: the same room ids on every rank, as a router would assign
// them. Decode ranks verify every room byte-exact. A JSON report records
// each room's outcome and when it concluded, for tests and trials.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

#include "kvroom/api/config.hpp"
#include "kvroom/kit/harness.hpp"
#include "kvroom/kit/testkit.hpp"

#include "command_line.hpp"
#include "commands.hpp"
#include "layout_options.hpp"
#include "membership_options.hpp"
#include "metrics_http.hpp"
#include "stress_plan.hpp"

namespace kvroom::cli {

namespace {

using clock_type = std::chrono::steady_clock;

class serve_config : public caf::actor_system_config {
public:
  std::string role = "prefill";
  int64_t dp = 0;
  int64_t tp = 0;
  int64_t tp_size = 1;
  int64_t rank_id = -1;
  std::string bootstrap_host = "127.0.0.1";
  int64_t bootstrap_port = 0;
  bool publish_registry = false;
  std::string transport = "auto";
  std::string tcp_host = "127.0.0.1";
  std::string control_host;
  int64_t control_port = 0;
  // Prometheus /metrics and /health (-1: off).
  int64_t metrics_port = -1;
  std::string metrics_host;
  join_options join;
  directory_cli_options directory;
  int64_t threads = 0;
  bool caf_clock = false;
  std::string scheduler_policy = "central";
  int64_t idle_us = 50;
  int64_t idle_link_ms = 60'000;
  int64_t timeout_ms = 5000;
  int64_t layers = 4;
  int64_t page_bytes = 4096;
  // The parallel layout this rank declares (--kv-heads > 0 or --mla).
  layout_options parallel;
  // Hybrid-model state: none, mamba (a slot per room) or swa (a 2-page window).
  std::string state = "none";
  int64_t pages_per_room = 8;
  int64_t concurrency = 8;
  int64_t first_room = 1;
  int64_t rooms = 100;
  int64_t pace_us = 0;
  int64_t init_delay_ms = 0;
  std::string wait_file;
  int64_t then_rooms = 0;
  std::string then_wait_file;
  int64_t hold_ms = 2000;
  std::string report;
  std::string log_level = "info";
  std::string log_format = "text";
  int64_t fault_seed = 0;
  double p_transfer = 0.0;
  std::string fault_path;
  int64_t data_timeout_ms = 30'000;
  int64_t path_rest_ms = 30'000;
  int64_t streaming_copy_bytes = int64_t{16} << 20;
  std::string integrity = "off";
  bool pull = false;

  serve_config() {
    opt_group group{custom_options_, "global"};
    join.add_to(group);
    directory.add_to(group);
    parallel.add_to(group);
    group.add(role, "role", "prefill or decode")
      .add(dp, "dp", "data-parallel rank")
      .add(tp, "tp", "tensor-parallel rank")
      .add(tp_size, "tp-size", "tensor-parallel size")
      .add(rank_id, "rank-id", "deployment-wide rank id (-1: derived)")
      .add(bootstrap_host, "bootstrap-host", "host of the bootstrap registry")
      .add(bootstrap_port, "bootstrap-port", "port of the bootstrap registry")
      .add(publish_registry, "publish-registry", "host the registry here (one prefill rank)")
      .add(transport, "transport", "auto (nearest of local, shm, tcp), shm, tcp")
      .add(tcp_host, "tcp-host", "IPv4 addresses the tcp data plane binds and advertises, "
                                 "comma-separated: one data path each (a host's NICs)")
      .add(data_timeout_ms, "data-timeout-ms", "a data path silent this long fails its "
                                               "batches, which move to another path (at "
                                               "most a quarter of --timeout-ms)")
      .add(path_rest_ms, "path-rest-ms", "a path with 3 errors in 10 s rests this long "
                                         "(doubling while it keeps failing, up to 10x)")
      .add(streaming_copy_bytes, "streaming-copy-bytes",
           "same-host copies (local, shm) of this many bytes at once bypass the CPU cache "
           "(streaming stores); 0: never")
      .add(integrity, "integrity", "off, or xxh3: prefill hashes every part, decode checks "
                                   "what landed (every rank of a deployment the same)")
      .add(pull, "pull", "decode: read the prefill's pages (the prefill grants them) instead "
                         "of the prefill writing them")
      .add(control_host, "control-host", "IPv4 address of this rank's control endpoint (default: --tcp-host)")
      .add(control_port, "control-port", "port of this rank's control endpoint (0: any)")
      .add(metrics_port, "metrics-port", "serve Prometheus /metrics and /health here (0: any "
                                         "port; -1: off)")
      .add(metrics_host, "metrics-host", "address of the metrics endpoint (default: --tcp-host)")
      .add(threads, "threads", "CAF scheduler threads (0: the hardware's, at least 2)")
      .add(scheduler_policy, "scheduler-policy", "scheduling policy: central (kvroom's shared queue), "
                                   "sharing or stealing (CAF's)")
      .add(caf_clock, "caf-clock", "CAF's own clock, which its thread wakes for every actor's "
                                   "end (to measure what kvroom's quiet clock saves)")
      .add(idle_us, "idle-us", "the scheduler loop sleeps this long when nothing changed (0: yields)")
      .add(idle_link_ms, "idle-link-ms", "a link to a peer process that carried nothing this "
                                         "long, with no room here involving it, closes (0: never)")
      .add(timeout_ms, "timeout-ms", "room state timeouts (decode waits twice as long)")
      .add(layers, "layers", "layers (K and V buffer each)")
      .add(page_bytes, "page-bytes", "bytes per KV page (a declared layout sets it)")
      .add(pages_per_room, "pages-per-room", "KV pages per room")
      .add(concurrency, "concurrency", "rooms in flight")
      .add(first_room, "first-room", "first room id")
      .add(rooms, "rooms", "rooms to run (0: serve until killed)")
      .add(pace_us, "pace-us", "wait this long between opening rooms")
      .add(init_delay_ms, "init-delay-ms", "decode: wait this long before init (admission delay)")
      .add(state, "state", "hybrid-model state beside the KV pages: none, mamba (2 state "
                           "buffers, a 512 B slot per room) or swa (2 buffers, a 2-page window "
                           "of 256 B pages)")
      .add(wait_file, "wait-file", "start the rooms once this file exists")
      .add(then_rooms, "then-rooms", "a second batch of rooms after the first")
      .add(then_wait_file, "then-wait-file", "start the second batch once this file exists")
      .add(hold_ms, "hold-ms", "keep serving this long after the last room")
      .add(report, "report", "write a JSON report of every room here")
      .add(fault_seed, "fault-seed", "stress: seed of the data-plane fault schedule")
      .add(p_transfer, "p-transfer", "stress: probability a room gets a data-plane fault")
      .add(fault_path, "fault-path", "stress: every batch this rank sends on these paths "
                                     "fails (comma-separated transports or address "
                                     "prefixes, e.g. 127.0.0.2:)")
      .add(log_level, "log-level", "trace, debug, info, warn, error, off")
      .add(log_format, "log-format", "text, or json: one JSON object per line (a failed "
                                     "room's room, rank, origin_rank, propagated, cause, reason)");
  }
};

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

bool wait_for_file(const std::string& path, int64_t limit_ms) {
  auto deadline = clock_type::now() + std::chrono::milliseconds(limit_ms);
  while (clock_type::now() < deadline) {
    if (::access(path.c_str(), F_OK) == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

int bad(const std::string& what) {
  return usage_error("serve", what);
}

} // namespace

int run_serve(int argc, char** argv) {
  serve_config cfg;
  if (auto done = parse_command_line(cfg, argc, argv, "serve"))
    return *done;
  if (cfg.role != "prefill" && cfg.role != "decode")
    return bad("--role must be prefill or decode");
  if (!cfg.directory.on_etcd() && (cfg.bootstrap_port <= 0 || cfg.bootstrap_port > 65535))
    return bad("--bootstrap-port (or --directory) is required");
  if (cfg.directory.on_etcd() && cfg.publish_registry)
    return bad("--publish-registry and --directory exclude each other");
  if (cfg.publish_registry && cfg.role != "prefill")
    return bad("the registry is published by a prefill rank");
  if (cfg.metrics_port < -1 || cfg.metrics_port > 65535)
    return bad("--metrics-port must be in [-1, 65535]");
  if (cfg.control_port < 0 || cfg.control_port > 65535)
    return bad("--control-port must be in [0, 65535]");
  if (cfg.layers < 1 || cfg.page_bytes < 8 || cfg.pages_per_room < 1 || cfg.concurrency < 1
      || cfg.rooms < 0 || cfg.then_rooms < 0 || cfg.timeout_ms < 1)
    return bad("sizes must be positive");
  if (cfg.state != "none" && cfg.state != "mamba" && cfg.state != "swa")
    return bad("--state must be none, mamba or swa");
  // A declared layout says what the pages hold, and so their size.
  auto declared_or = cfg.parallel.layout(cfg.tp_size, cfg.tp, cfg.layers);
  if (!declared_or)
    return bad(describe(declared_or.error()));
  auto declared = *declared_or;
  if (declared)
    cfg.page_bytes = static_cast<int64_t>(declared->page_bytes());
  runtime_options opts;
  if (auto err = cfg.join.apply("serve", opts))
    return bad(describe(err));
  opts.network = true;
  if (cfg.threads < 0 || cfg.threads > 256)
    return bad("--threads must be in [0, 256]");
  opts.max_threads = static_cast<size_t>(cfg.threads);
  opts.scheduler_policy = cfg.scheduler_policy;
  opts.quiet_clock = !cfg.caf_clock;
  opts.log_level = cfg.log_level;
  if (!set_log_format(cfg.log_format))
    return bad("--log-format must be text or json");
  if (auto err = check_options(opts))
    return bad(describe(err));
  prepare_config(cfg, opts);
  caf::actor_system sys{cfg};
  auto side = cfg.role == "prefill" ? role::prefill : role::decode;
  // Every room's outcome only for a --report, which asks for each; the
  // counts always: a long run without one holds nothing per room it ran.
  std::vector<std::pair<room_id, harness::report_line>> outcomes;
  uint64_t succeeded = 0, failed = 0;
  rank_ref me;
  {
    runtime rt{sys, 4096, std::move(opts.secret)};
    if (cfg.directory.on_etcd()) {
      if (auto err = cfg.directory.apply(rt))
        return bad(describe(err));
    } else if (cfg.publish_registry) {
      auto port = rt.publish_registry(static_cast<uint16_t>(cfg.bootstrap_port),
                                      cfg.bootstrap_host);
      if (!port)
        return bad(describe(port.error()));
    } else if (auto err = rt.connect_registry(cfg.bootstrap_host,
                                              static_cast<uint16_t>(cfg.bootstrap_port))) {
      return bad(describe(err));
    }
    kv_shape shape;
    shape.num_buffers = static_cast<uint32_t>(declared ? declared->kv_buffers() : 2 * cfg.layers);
    shape.page_size_bytes = static_cast<uint64_t>(cfg.page_bytes);
    shape.num_pages = static_cast<uint64_t>(cfg.concurrency * cfg.pages_per_room);
    shape.num_aux = 1;
    shape.aux_slots = static_cast<uint64_t>(cfg.concurrency);
    shape.aux_item_bytes = 64;
    if (cfg.state != "none") {
      shape.num_state = 2;
      shape.state_pages = shape.aux_slots * (cfg.state == "swa" ? 2 : 1);
      shape.state_page_bytes = cfg.state == "swa" ? 256 : 512;
    }
    // A room's state pages follow its slot (decode: the window reversed).
    auto state_of = [&](size_t slot) {
      std::vector<int64_t> out;
      auto w = static_cast<int64_t>(cfg.state == "swa" ? 2 : 1);
      for (int64_t i = 0; cfg.state != "none" && i < w; ++i)
        out.push_back(static_cast<int64_t>(slot) * w + (side == role::decode ? w - 1 - i : i));
      return out;
    };
    host_kv_cache mem{shape, /*shared=*/true};
    rank_config rc;
    rc.side = side;
    rc.dp_rank = static_cast<int32_t>(cfg.dp);
    rc.tp_rank = static_cast<int32_t>(cfg.tp);
    rc.tp_size = static_cast<int32_t>(cfg.tp_size);
    rc.id = static_cast<rank_id>(cfg.rank_id);
    rc.memory = mem.layout();
    rc.parallel = declared;
    rc.transport = cfg.transport;
    rc.network = true;
    rc.tcp_host = cfg.tcp_host;
    auto first_host = split_hosts(cfg.tcp_host).empty() ? std::string{"127.0.0.1"}
                                                        : split_hosts(cfg.tcp_host).front();
    rc.control_host = cfg.control_host.empty() ? first_host : cfg.control_host;
    if (cfg.data_timeout_ms <= 0 || cfg.path_rest_ms <= 0)
      return bad("--data-timeout-ms and --path-rest-ms must be positive");
    rc.data_timeout_ms = static_cast<uint32_t>(cfg.data_timeout_ms);
    if (cfg.streaming_copy_bytes < 0)
      return bad("--streaming-copy-bytes must not be negative");
    rc.streaming_copy_bytes = static_cast<uint64_t>(cfg.streaming_copy_bytes);
    if (!from_string(cfg.integrity, rc.integrity))
      return bad("--integrity must be off or xxh3, not '" + cfg.integrity + "'");
    rc.pull = cfg.pull;
    rc.paths.rules.first_rest_ms = static_cast<uint32_t>(cfg.path_rest_ms);
    rc.paths.rules.max_rest_ms = static_cast<uint32_t>(std::min<int64_t>(10 * cfg.path_rest_ms,
                                                                         UINT32_MAX));
    rc.control_port = static_cast<uint16_t>(cfg.control_port);
    if (cfg.idle_link_ms < 0)
      return bad("--idle-link-ms must be 0 (never) or positive");
    rc.limits.idle_link_ms = static_cast<uint32_t>(std::min<int64_t>(cfg.idle_link_ms, UINT32_MAX));
    auto ms = static_cast<uint32_t>(cfg.timeout_ms);
    rc.timeouts = side == role::prefill ? room_timeouts{ms, ms, ms}
                                        : room_timeouts{2 * ms, 2 * ms, 2 * ms};
    if (side == role::prefill && cfg.p_transfer > 0.0)
      rc.faults = stress::transfer_faults(static_cast<uint64_t>(cfg.fault_seed),
                                          stress::fault_odds{cfg.p_transfer, 0, 0},
                                          static_cast<int>(cfg.tp_size), static_cast<int>(cfg.tp),
                                          static_cast<room_id>(cfg.first_room),
                                          static_cast<uint64_t>(cfg.rooms + cfg.then_rooms));
    rc.faults.paths = split_hosts(cfg.fault_path);
    auto made = rt.add_rank(rc);
    if (!made)
      return bad("cannot start rank: " + describe(made.error()));
    auto& r = **made;
    me = r.ref();
    std::unique_ptr<metrics_http> metrics;
    std::string metrics_at;
    if (cfg.metrics_port >= 0) {
      auto host = cfg.metrics_host.empty() ? first_host : cfg.metrics_host;
      auto started = metrics_http::start(host, static_cast<uint16_t>(cfg.metrics_port),
                                         [&r] { return std::vector<metrics_snapshot>{r.metrics()}; });
      if (!started)
        return bad(describe(started.error()));
      metrics = std::move(*started);
      metrics_at = host + ":" + std::to_string(metrics->port());
    }
    std::printf("%s\n", harness::event_line({{"event", "ready"},
                                              {"rank", to_string(me)},
                                              {"rank_id", int64_t{me.id}},
                                              {"pid", int64_t{::getpid()}},
                                              {"tcp", r.data_plane_address("tcp")},
                                              {"control", r.control_address()},
                                              {"metrics", metrics_at},
                                              // A decode rank pulls or is pushed to;
                                              // a prefill rank does what each asks.
                                              {"direction", side == role::prefill ? "either"
                                                            : cfg.pull ? "pull" : "push"}})
                           .c_str());
    std::fflush(stdout);
    auto key = [&](room_id room) { return room ^ (static_cast<room_id>(cfg.tp + 1) << 40); };
    auto pages_of = [&](size_t slot) {
      std::vector<int64_t> out;
      for (int64_t i = 0; i < cfg.pages_per_room; ++i)
        out.push_back(static_cast<int64_t>(slot) * cfg.pages_per_room
                      + (side == role::decode ? cfg.pages_per_room - 1 - i : i));
      return out;
    };
    // One batch of rooms through this rank's side, as a scheduler loop.
    auto run_rooms = [&](room_id first, int64_t count) {
      struct timing {
        int64_t opened_ms = 0;
        int64_t ready_ms = 0;  // decode: first seen waiting for input
        clock_type::time_point opened{};
      };
      std::vector<timing> by_slot(static_cast<size_t>(cfg.concurrency));
      auto last_open = clock_type::now();
      loop_hooks hooks;
      hooks.may_open = [&] {
        return clock_type::now() - last_open >= std::chrono::microseconds(cfg.pace_us);
      };
      hooks.opened = [&](loop_room& l) {
        by_slot[l.slot] = timing{wall_ms(), 0, clock_type::now()};
        last_open = clock_type::now();
        // A declared layout: the model's pattern of this rank's heads, which
        // decode ranks of any TP size check; else a pattern per TP slot.
        if (side == role::prefill && declared)
          mem.write_room(l.id, pages_of(l.slot), static_cast<int64_t>(l.slot), *declared);
        else if (side == role::prefill)
          mem.write_room(key(l.id), pages_of(l.slot), static_cast<int64_t>(l.slot));
        if (side == role::prefill)
          mem.write_state(key(l.id), state_of(l.slot));
      };
      hooks.receiver_ready = [&](loop_room& l, int) {
        // A decode scheduler admits the request once it has the memory.
        auto& t = by_slot[l.slot];
        if (cfg.init_delay_ms > 0) {
          if (t.ready_ms == 0)
            t.ready_ms = wall_ms();
          if (wall_ms() - t.ready_ms < cfg.init_delay_ms)
            return false;
        }
        (void) l.receivers[0].init(pages_of(l.slot), static_cast<int64_t>(l.slot),
                                   state_of(l.slot));
        return true;
      };
      hooks.sender_ready = [&](loop_room& l, int) {
        auto pages = pages_of(l.slot);
        (void) l.senders[0].init(pages.size(), static_cast<int64_t>(l.slot));
        (void) l.senders[0].send(std::move(pages), true, state_of(l.slot));
        return true;
      };
      hooks.concluded = [&](loop_room& l) {
        room_handle& h = side == role::prefill ? static_cast<room_handle&>(l.senders[0])
                                               : static_cast<room_handle&>(l.receivers[0]);
        // The report's line: times on the system clock, comparable across
        // processes; latency as this rank's scheduler saw it.
        harness::report_line o;
        o.state = h.poll();
        o.opened_ms = by_slot[l.slot].opened_ms;
        o.latency_us = std::chrono::duration_cast<std::chrono::microseconds>(
                         clock_type::now() - by_slot[l.slot].opened)
                         .count();
        o.at_ms = wall_ms();
        if (o.state == kv_poll::failed)
          o.error = h.failure();
        else if (side == role::decode
                 && (!(declared ? mem.check_room(l.id, pages_of(l.slot),
                                                 static_cast<int64_t>(l.slot), *declared,
                                                 &o.data_error)
                                : mem.check_room(key(l.id), pages_of(l.slot),
                                                 static_cast<int64_t>(l.slot), &o.data_error))
                     || !mem.check_state(key(l.id), state_of(l.slot), &o.data_error)))
          std::fprintf(stderr, "room %llu: %s\n", static_cast<unsigned long long>(l.id),
                       o.data_error.c_str());
        (o.state == kv_poll::success && o.data_error.empty() ? succeeded : failed) += 1;
        if (!cfg.report.empty())
          outcomes.emplace_back(l.id, std::move(o));
      };
      std::vector<rank*> senders, receivers;
      (side == role::prefill ? senders : receivers).push_back(&r);
      scheduler_loop loop{senders, receivers, static_cast<int32_t>(cfg.dp),
                          static_cast<size_t>(cfg.concurrency), first,
                          static_cast<uint64_t>(count), std::move(hooks)};
      auto last_progress = clock_type::now();
      while (!loop.done()) {
        bool progressed = loop.step();
        if (!loop.open_error().empty())
          std::fprintf(stderr, "cannot open a room: %s\n", loop.open_error().c_str());
        if (progressed) {
          last_progress = clock_type::now();
        } else if (clock_type::now() - last_progress > std::chrono::seconds(5)) {
          // A stall report: what this rank's manager and rooms believe.
          auto st = r.stats();
          std::string rooms_text;
          for (auto& l : loop.in_flight()) {
            auto h = side == role::prefill ? static_cast<room_handle>(l.senders[0])
                                           : static_cast<room_handle>(l.receivers[0]);
            rooms_text += " " + std::to_string(l.id) + ":" + to_string(h.poll());
          }
          // Peers too: a rank that never linked to a peer waits for it.
          auto m = r.metrics();
          std::fprintf(stderr, "stall: no progress for 5 s; manager: %s live rooms, %s records, %s parked,"
                       " %s strangers' messages dropped; peers: %llu usable, %llu listed, %llu lost;"
                       " rooms:%s\n",
                       st ? std::to_string(st->live_rooms).c_str() : "?",
                       st ? std::to_string(st->failure_records).c_str() : "?",
                       st ? std::to_string(st->parked).c_str() : "?",
                       st ? std::to_string(st->stranger_messages).c_str() : "?",
                       static_cast<unsigned long long>(m.peers_usable),
                       static_cast<unsigned long long>(m.peers_listed),
                       static_cast<unsigned long long>(m.peers_lost), rooms_text.c_str());
          last_progress = clock_type::now();
        }
        if (!progressed) {
          if (cfg.idle_us > 0)
            std::this_thread::sleep_for(std::chrono::microseconds(cfg.idle_us));
          else
            std::this_thread::yield();
        }
      }
    };
    if (!cfg.wait_file.empty() && !wait_for_file(cfg.wait_file, 120'000))
      return bad("timed out waiting for " + cfg.wait_file);
    if (cfg.rooms > 0) {
      run_rooms(static_cast<room_id>(cfg.first_room), cfg.rooms);
      std::printf("%s\n",
                  harness::event_line({{"event", "batch_done"}, {"rooms", int64_t{cfg.rooms}}})
                    .c_str());
      std::fflush(stdout);
    }
    if (cfg.then_rooms > 0) {
      if (!cfg.then_wait_file.empty() && !wait_for_file(cfg.then_wait_file, 120'000))
        return bad("timed out waiting for " + cfg.then_wait_file);
      run_rooms(static_cast<room_id>(cfg.first_room + cfg.rooms), cfg.then_rooms);
    }
    if (cfg.rooms == 0 && cfg.then_rooms == 0)
      for (;;)
        std::this_thread::sleep_for(std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(cfg.hold_ms));
    made->reset();
  }
  if (!cfg.report.empty()) {
    std::ofstream out{cfg.report};
    out << harness::report_json(to_string(me), me.id, outcomes);
  }
  std::printf("%s\n", harness::event_line({{"event", "done"},
                                            {"rank", to_string(me)},
                                            {"succeeded", static_cast<int64_t>(succeeded)},
                                            {"failed", static_cast<int64_t>(failed)}})
                         .c_str());
  return 0;
}

} // namespace kvroom::cli
