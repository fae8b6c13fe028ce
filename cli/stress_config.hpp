#pragma once

// `kvroom stress`'s options, through CAF's config system.

#include <cstdint>
#include <string>

#include "caf/actor_system_config.hpp"

#include "layout_options.hpp"

namespace kvroom::cli {

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

/// Why `cfg` cannot run, for the command line (empty: it can).
std::string invalid_options(const stress_config& cfg);

} // namespace kvroom::cli
