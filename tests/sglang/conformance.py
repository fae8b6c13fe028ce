"""One SGLang prefill or decode scheduler process over kvroom, for the
conformance suite (test_sglang_conformance.py).

What runs is SGLang's own code, unmodified, from KVROOM_SGLANG_SRC:
`PrefillBootstrapQueue` (which builds kvroom's KVManager through
`get_kv_class`), `pop_bootstrapped` and `process_disagg_prefill_inflight_queue`
with `poll_and_all_reduce` over a real gloo group, `send_kv_chunk`,
`DecodePreallocQueue` (`add`, `pop_preallocated`, the radix prefix match,
`send_metadata`), `DecodeTransferQueue.pop_transferred`, and
`Scheduler.abort_request`, on SGLang's CPU pools (`MHATokenToKVPool`,
`ReqToTokenPool`, `MetadataBuffers`, its paged allocator, `ChunkCache` or
`RadixCache`). The stand-in scheduler (`_Scheduler`) holds only what those
methods read; the model's forward pass is replaced by the pages a seeded
prefill pool holds already.

A side reports, per request, how it ended (finished or aborted, once), a
digest of the KV bytes it sent or received, the first output token the
metadata carried, and what it still holds at the end (pages, request slots,
metadata slots), so the test can check byte-exactness and leaks.
"""

import hashlib
import os
import sys
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as H  # noqa: E402


def _scheduler_class():
    from sglang.srt.disaggregation.decode import SchedulerDisaggregationDecodeMixin
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin
    from sglang.srt.managers.scheduler import Scheduler

    class _Scheduler(SchedulerDisaggregationPrefillMixin, SchedulerDisaggregationDecodeMixin):
        """What SGLang's disaggregation methods read of their Scheduler,
        and its own abort_request."""
        abort_request = Scheduler.abort_request

        def __init__(self, ns):
            self.__dict__.update(vars(ns))

    return _Scheduler


class _Outputs:
    """SGLang's output streamer: what the scheduler tells its clients."""

    def __init__(self):
        self.aborted = {}

    def stream_output(self, reqs, return_logprob=False, *args, **kwargs):
        from sglang.srt.managers.schedule_batch import FINISH_ABORT
        for r in reqs:
            if isinstance(r.finished_reason, FINISH_ABORT):
                self.aborted[r.rid] = self.aborted.get(r.rid, 0) + 1


def _common(ns, side_name, outputs, tp_rank, tp_size):
    from sglang.srt.disaggregation.utils import DisaggregationMode
    ns.tp_rank, ns.tp_size = tp_rank, tp_size
    ns.disaggregation_mode = (DisaggregationMode.PREFILL if side_name == "prefill"
                              else DisaggregationMode.DECODE)
    ns.output_streamer = outputs
    ns.chunked_req = None
    ns.waiting_queue = []
    ns.enable_hicache_storage = False
    ns.dllm_config = None
    ns.grammar_manager = types.SimpleNamespace(abort_requests=lambda recv: None)
    ns.ps.pp_size = 1
    ns.ps.pp_rank = 0
    ns.ps.tp_rank = ns.tp_rank
    ns.ps.tp_size = ns.tp_size
    ns.running_batch = getattr(ns, "running_batch", types.SimpleNamespace(reqs=[]))
    ns.last_batch = None
    ns.metrics_reporter = types.SimpleNamespace(enable_metrics=False)
    ns.enable_metrics = False
    ns.enable_hisparse = False
    ns.enable_decode_hicache = False
    ns.enable_priority_scheduling = False
    ns.req_to_metadata_buffer_idx_allocator = None


def _dp_flags(dp_size):
    """SGLang's launch flags for `dp_size` DP-attention groups."""
    return ["--dp-size", str(dp_size), "--enable-dp-attention"] if dp_size > 1 else []


def _digest(side, req, start, end):
    """The KV bytes of tokens [start, end) of `req`, every layer (K and V),
    by model head: {head: sha1} (MLA: the latent, head 0). Ranks of other TP
    sizes hold other heads; each head is compared with the rank that sent it."""
    import torch
    locs = side.req_to_token.req_to_token[req.req_pool_idx, start:end].long()
    out = {}
    if side.by_layer:  # pipeline stages: each sent its layers (K and V)
        bufs = H.kv_buffers(side.kv_pool)
        n = len(bufs) // 2
        for h in range(side.heads):
            for layer in range(n):
                digest = hashlib.sha1()
                for buf in (bufs[layer], bufs[n + layer]):
                    digest.update(buf[locs][:, h].contiguous().view(-1).view(torch.uint8)
                                  .numpy().tobytes())
                out[(side.first_head() + h, side.first_layer + layer)] = digest.hexdigest()
        return out
    for h in range(side.heads):
        digest = hashlib.sha1()
        for buf in H.kv_buffers(side.kv_pool):
            digest.update(buf[locs][:, h].contiguous().view(-1).view(torch.uint8).numpy()
                          .tobytes())
        out[side.first_head() + h] = digest.hexdigest()
    if side.mamba:  # the request's Mamba state (conv and SSM of every layer)
        digest = hashlib.sha1()
        for view in side.state_slots(req):
            digest.update(view.tobytes())
        out["state"] = digest.hexdigest()
    if side.swa and end == len(req.origin_input_ids):
        # The window's bytes in the SWA pool, by head (the last chunk, and
        # decode: what SGLang's state_type swa names).
        locs = side.window_locs(req, end)
        for h in range(side.heads):
            digest = hashlib.sha1()
            for buf in H.kv_buffers(side.kv_pool.swa_kv_pool):
                digest.update(buf[locs][:, h].contiguous().view(-1).view(torch.uint8).numpy()
                              .tobytes())
            out[("window", side.first_head() + h)] = digest.hexdigest()
    return out


def _abort(sched, rid):
    from sglang.srt.managers.io_struct import AbortReq
    sched.abort_request(AbortReq(rid=rid))


class _Events:
    """Cross-process marks (multiprocessing Events by name) for the race
    windows the suite forces: set by one side, waited for by the other."""

    def __init__(self, events):
        self.events = events or {}

    def set(self, name):
        if name in self.events:
            self.events[name].set()

    def wait(self, name, seconds=20):
        if name in self.events:
            return self.events[name].wait(seconds)
        return True


class _Watch:
    """Instrumentation for the fault scenarios, outside SGLang's code and
    kvroom's: rooms this rank's data plane fails (the `fail_rooms` test hook
    of kvroom's ranks), every KVTransferError that `failure_exception()`
    raised to SGLang, and what this process logged at warning or above
    (Python's loggers, and kvroom's own log on fd 2)."""

    def __init__(self, spec):
        import logging
        import kvroom
        import kvroom.sglang as ks
        self.raised = {}
        self.records = []
        self.stderr = None
        if spec.get("fail_rooms"):
            add_rank = kvroom.Runtime.add_rank
            rooms = list(spec["fail_rooms"])

            def failing(rt, *args, **kwargs):
                kwargs["fail_rooms"] = rooms
                return add_rank(rt, *args, **kwargs)
            kvroom.Runtime.add_rank = failing
        if not spec.get("watch"):
            return
        raise_it = ks._Room.failure_exception
        raised = self.raised

        def recorded(room):
            try:
                raise_it(room)
            except ks.KVTransferError as e:
                raised.setdefault(int(room.bootstrap_room), []).append(
                    (bool(e.is_from_another_rank), int(e.origin_rank), e.failure_reason))
                raise
        ks._Room.failure_exception = recorded
        records = self.records

        class _Keep(logging.Handler):
            def emit(self, record):
                records.append((record.levelname, record.getMessage()))
        handler = _Keep(level=logging.WARNING)
        logging.getLogger().addHandler(handler)
        # kvroom's C++ log (spdlog) writes to fd 2: into a file of ours.
        import tempfile
        self.stderr = tempfile.NamedTemporaryFile(prefix="kvroom-log-", delete=False)
        os.dup2(self.stderr.fileno(), 2)

    def fill(self, report):
        report["raised"] = self.raised
        logged = list(self.records)
        if self.stderr is not None:
            with open(self.stderr.name, errors="replace") as f:
                for line in f:
                    for level in ("error", "critical", "warning"):
                        if f"[{level}]" in line:
                            logged.append((level.upper(), line.strip()))
        report["logged"] = logged


def run_prefill(spec, conn, events):
    """A prefill scheduler: bootstrap queue, forward (chunked), inflight
    queue, until every request ended."""
    try:
        H.sglang_env.install(os.environ["KVROOM_SGLANG_SRC"])
        from sglang.srt.plugins import load_plugins
        load_plugins()  # kvroom's entry point registers the backend
        from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue
        from sglang.srt.disaggregation.utils import DisaggregationMode, TransferBackend
        import kvroom.sglang as ks

        watch = _Watch(spec)
        ev = _Events(events)
        # The attention TP place (gloo group, heads) and the DP group: SGLang's
        # scheduler TP rank and size span every DP group (DP attention).
        tp_rank, tp_size = spec.get("tp_rank", 0), spec.get("tp_size", 1)
        dp_rank, dp_size = spec.get("dp_rank", 0), spec.get("dp_size", 1)
        pp_rank, pp_size = spec.get("pp_rank", 0), spec.get("pp_size", 1)
        global_rank, global_tp = dp_rank * tp_size + tp_rank, dp_size * tp_size
        first = global_rank == 0 and pp_rank == 0
        if first:
            boot = ks.KVBootstrapServer("127.0.0.1", spec.get("bootstrap_port", 0))
            conn.send(("port", boot.port))
        port = boot.port if first else spec["bootstrap_port"]
        pp_group = None
        if pp_size > 1:
            group, pp_group = H.gloo_groups(tp_rank, tp_size, pp_rank, pp_size, spec["gloo_port"])
        else:
            group = H.gloo_group(tp_rank, tp_size, spec["gloo_port"])
        sargs = H.server_args("prefill", port, ["--tp-size", str(global_tp), *_dp_flags(dp_size),
                                                "--pp-size", str(pp_size)])
        side = H.Side("prefill", sargs, group, seed=1000, tokens=spec.get("pool_tokens", 8192),
                      tp_size=tp_size, tp_rank=tp_rank, mla=bool(spec.get("mla")),
                      mamba=bool(spec.get("mamba")), swa=bool(spec.get("swa")),
                      pp_size=pp_size, pp_rank=pp_rank)
        side.by_layer = bool(spec.get("by_layer"))
        outputs = _Outputs()
        ns = side.scheduler
        _common(ns, "prefill", outputs, global_rank, global_tp)
        ns.ps.dp_rank = dp_rank
        ns.ps.pp_size, ns.ps.pp_rank = pp_size, pp_rank
        ns.tree_cache = side.chunk_cache()
        ns.req_to_metadata_buffer_idx_allocator = side.metadata_alloc
        ns.disagg_prefill_inflight_queue = []
        sched = _scheduler_class()(ns)
        queue = PrefillBootstrapQueue(side.kv_pool, None, side.metadata_alloc, side.metadata,
                                      global_rank, global_tp, 0, port, group, H.TOKENS, sched,
                                      pp_rank, pp_size,
                                      TransferBackend("kvroom"))
        sched.disagg_prefill_bootstrap_queue = queue
        report = {"finished": {}, "aborted": outputs.aborted, "digest": {}, "token": {},
                  "errors": [], "given": [r["rid"] for r in spec["requests"]]}
        reqs = {}
        for r in spec["requests"]:
            req = H.make_req(r["rid"], r["tokens"], r["room"], port, DisaggregationMode.PREFILL)
            side.place(req, r["tokens"])
            if side.mamba:
                side.seed_state(req, r["room"])
            req.output_ids = [r["token"]]
            reqs[r["rid"]] = (req, r)
            queue.add(req, side.heads)
            if r.get("abort") == ("prefill", "bootstrapping"):
                _abort(sched, req.rid)
        chunk = spec.get("chunk_tokens") or 10 ** 9
        forwarding = []  # bootstrapped, prefill "running" (chunk by chunk)
        deadline = time.monotonic() + spec.get("seconds", 60)
        while True:
            past = time.monotonic() >= deadline
            if pp_group is not None:
                # Stages end together: each one's collective waits for all.
                done = past or _all_ended(reqs, report, queue, forwarding,
                                          sched.disagg_prefill_inflight_queue)
                popped, all_done = _pp_pop_bootstrapped(sched, queue, pp_group, done)
                if all_done:
                    break
            elif past:
                break
            elif not spec.get("forward", True):
                # A prefill that bootstraps and then computes forever (until
                # the test kills it).
                queue.pop_bootstrapped()
                time.sleep(0.001)
                continue
            else:
                popped = queue.pop_bootstrapped()
            for req in popped:
                # Decode's cached prefix is skipped from here on.
                req.kv_from = req.start_send_idx
                forwarding.append(req)
            for rid, (req, r) in reqs.items():
                if r.get("race") == "before_metadata" and ev.wait(f"{rid}:abort_prefill", 0):
                    r["race"] = None
                    _abort(sched, rid)
                    assert _wait_concluded(req.disagg_kv_sender)
                    ev.set(f"{rid}:prefill_aborted")
            still = []
            for req in forwarding:
                r = reqs[req.rid][1]
                if r.get("abort") == ("decode", "transferring") and not ev.wait(
                        f"{req.rid}:decode_aborted", 0):
                    still.append(req)  # forwarded once decode aborted
                    continue
                n = len(req.origin_input_ids)
                start = req.extend_range.end if req.extend_range else 0
                end = min(n, start + chunk)
                req.set_extend_range(start, end)
                if end < n:
                    sched.send_kv_chunk(req)  # a chunk of chunked prefill
                    still.append(req)
                    continue
                if r.get("race") == "before_send":
                    # The decode side aborts after this scheduler's last poll
                    # said the room goes on; the send lands on a room that
                    # concluded meanwhile.
                    ev.set(f"{req.rid}:prefill_polled")
                    assert ev.wait(f"{req.rid}:decode_aborted")
                    assert _wait_concluded(req.disagg_kv_sender)
                report["digest"][req.rid] = _digest(side, req, req.kv_from, n)
                sched.disagg_prefill_inflight_queue.append(req)
                sched.send_kv_chunk(req, last_chunk=True)
                if r.get("abort") == ("prefill", "inflight"):
                    _abort(sched, req.rid)
            forwarding = still
            for req in sched.process_disagg_prefill_inflight_queue():
                from sglang.srt.managers.schedule_batch import FINISH_ABORT
                if not isinstance(req.finished_reason, FINISH_ABORT):
                    report["finished"][req.rid] = report["finished"].get(req.rid, 0) + 1
            if pp_group is None and _all_ended(reqs, report, queue, forwarding,
                                               sched.disagg_prefill_inflight_queue):
                break
            time.sleep(0.001)
        for req, _ in reqs.values():
            if req.disagg_kv_sender is not None:
                req.disagg_kv_sender.clear()
        report["metadata_free"] = side.metadata_alloc.available_size()
        report["calls_after_conclusion"] = queue.kv_manager.calls_after_conclusion
        watch.fill(report)
        conn.send(("report", report))
    except Exception:
        conn.send(("error", traceback.format_exc()))
    finally:
        H.close_groups()


def _pp_pop_bootstrapped(sched, queue, pp_group, done):
    """SGLang's PP consensus on bootstrapping (scheduler_pp_mixin
    `_pp_pd_get_bootstrapped_ids`, `process_bootstrapped_queue`): a request
    leaves the bootstrap queue on every stage once it is ready on every
    stage, and fails on every stage once it failed (or was aborted) on one.
    SGLang hands the lists from stage to stage over its PP group inside the
    PP event loop, which drives the model too; here one all_gather over the
    stages' gloo group makes the same intersection and union, with SGLang's
    own `get_rids`. Returns the bootstrapped requests, and whether every
    stage is `done`."""
    import inspect
    import torch.distributed as dist
    from sglang.srt.disaggregation.base import KVPoll
    from sglang.srt.managers.schedule_batch import FINISH_ABORT
    from sglang.srt.managers.scheduler_pp_mixin import SchedulerPPMixin
    good, bad = [], []
    if queue.queue:  # the same on every TP rank of the stage
        good, bad = SchedulerPPMixin.get_rids(sched, queue.queue, True,
                                              [KVPoll.WaitingForInput], [KVPoll.Failed])
    aborted = {req.rid for req in queue.queue if isinstance(req.finished_reason, FINISH_ABORT)}
    views = [None] * dist.get_world_size(pp_group)
    dist.all_gather_object(views, ([r for r in good if r not in aborted],
                                   sorted(set(bad) | aborted), done), group=pp_group)
    if all(v[2] for v in views):
        return [], True
    if not queue.queue:
        return [], False
    good = sorted(set.intersection(*(set(v[0]) for v in views)))
    bad = sorted(set().union(*(set(v[1]) for v in views)))
    if "pp_good_rids" in inspect.signature(queue.pop_bootstrapped).parameters:
        popped, _ = queue.pop_bootstrapped(return_failed_reqs=True, pp_good_rids=good,
                                           pp_bad_rids=bad)
    else:  # SGLang before 2026-07-30 (#31869)
        popped, _ = queue.pop_bootstrapped(return_failed_reqs=True, rids_to_check=good)
    return popped, False


def _wait_concluded(room, seconds=20):
    """Until kvroom's own handle says the room concluded (not SGLang's
    poll: the scheduler has not looked since)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        h = getattr(room, "_handle", None)
        if h is None or h.poll() in (0, 4):
            return True
        time.sleep(0.001)
    return False


def _all_ended(reqs, report, queue, forwarding, inflight):
    if queue.queue or forwarding or inflight:
        return False
    return all(rid in report["finished"] or rid in report["aborted"] for rid in reqs)


def run_decode(spec, conn, events):
    """A decode scheduler: prealloc queue (with memory pressure when the
    pool is small), transfer queue, until every request ended."""
    try:
        H.sglang_env.install(os.environ["KVROOM_SGLANG_SRC"])
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.schedule_batch import FINISH_ABORT
        from sglang.srt.mem_cache.common import release_kv_cache

        watch = _Watch(spec)
        ev = _Events(events)
        tp_rank, tp_size = spec.get("tp_rank", 0), spec.get("tp_size", 1)
        dp_rank, dp_size = spec.get("dp_rank", 0), spec.get("dp_size", 1)
        global_rank, global_tp = dp_rank * tp_size + tp_rank, dp_size * tp_size
        port = spec["bootstrap_port"]
        group = H.gloo_group(tp_rank, tp_size, spec["gloo_port"])
        extra = ["--tp-size", str(global_tp), *_dp_flags(dp_size)]
        radix = bool(spec.get("radix_prefix"))
        if radix:
            extra.append("--disaggregation-decode-enable-radix-cache")
        else:
            extra.append("--disable-radix-cache")
        sargs = H.server_args("decode", port, extra)
        side = H.decode_side(sargs, group, port, radix=radix, tokens=spec.get("pool_tokens"),
                             tp_rank=tp_rank, tp_size=tp_size, mla=bool(spec.get("mla")),
                             dp_rank=dp_rank, dp_size=dp_size, mamba=bool(spec.get("mamba")),
                             swa=bool(spec.get("swa")))
        side.by_layer = bool(spec.get("by_layer"))
        outputs = _Outputs()
        ns = side.scheduler
        _common(ns, "decode", outputs, global_rank, global_tp)
        ns.ps.dp_rank = dp_rank
        ns.req_to_metadata_buffer_idx_allocator = side.metadata_alloc
        sched = _scheduler_class()(ns)
        side.prealloc.scheduler = sched
        side.transfer.scheduler = sched

        def between_handshake_and_metadata():
            # pop_preallocated reads the running batch after its handshake
            # poll and before send_metadata: a prefill abort (or this
            # scheduler's own) lands here, deterministically.
            for dreq in side.prealloc.queue:
                r = reqs[dreq.req.rid][1]
                if r.get("abort") == ("decode", "waiting") and dreq.waiting_for_input:
                    r["abort"] = None
                    _abort(sched, dreq.req.rid)
                    assert _wait_concluded(dreq.kv_receiver)
                if r.get("race") == "before_metadata" and dreq.waiting_for_input:
                    r["race"] = None
                    ev.set(f"{dreq.req.rid}:abort_prefill")
                    assert ev.wait(f"{dreq.req.rid}:prefill_aborted")
                    assert _wait_concluded(dreq.kv_receiver)
            return []

        sched.running_batch = _Batch(between_handshake_and_metadata)
        def state_free():
            return side.req_to_token.mamba_allocator.available_size() if side.mamba else 0

        free0 = (side.allocator.available_size(), side.req_to_token.available_size(),
                 side.metadata_alloc.available_size(), state_free())
        if radix:
            prefix = H.seed_radix_prefix(side, spec["radix_prefix"])
        report = {"finished": {}, "aborted": outputs.aborted, "digest": {}, "token": {},
                  "prefix": {}, "errors": [], "given": [r["rid"] for r in spec["requests"]]}
        pending = list(spec["requests"])
        reqs = {}
        deadline = time.monotonic() + spec.get("seconds", 60)
        in_transfer = []
        while time.monotonic() < deadline:
            # Requests arrive a few per iteration, as from the router.
            for r in pending[:4]:
                req = H.make_req(r["rid"], r["tokens"], r["room"], port,
                                 DisaggregationMode.DECODE)
                if radix and r.get("shares_prefix"):
                    req.origin_input_ids = prefix + req.origin_input_ids[len(prefix):]
                reqs[r["rid"]] = (req, r)
                side.prealloc.add(req)
            pending = pending[4:]
            out = side.prealloc.pop_preallocated()
            pre = out[0] if isinstance(out, tuple) else out
            if pre:
                ev.set("decode_preallocated")
            for dreq in pre:
                r = reqs[dreq.req.rid][1]
                report["prefix"][dreq.req.rid] = dreq.req.prefix_indices.numel() if hasattr(
                    dreq.req.prefix_indices, "numel") else len(dreq.req.prefix_indices or [])
            side.transfer.extend(pre)
            for dreq in pre:
                r = reqs[dreq.req.rid][1]
                if r.get("race") == "before_send":
                    ev.wait(f"{dreq.req.rid}:prefill_polled")
                    _abort(sched, dreq.req.rid)
                    assert _wait_concluded(dreq.kv_receiver)
                    ev.set(f"{dreq.req.rid}:decode_aborted")
                if r.get("abort") == ("decode", "transferring"):
                    _abort(sched, dreq.req.rid)
                    assert _wait_concluded(dreq.kv_receiver)
                    ev.set(f"{dreq.req.rid}:decode_aborted")
            for req in side.transfer.pop_transferred():
                if isinstance(req.finished_reason, FINISH_ABORT):
                    continue
                r = reqs[req.rid][1]
                n = len(req.origin_input_ids)
                start = r.get("expect_prefix", 0)
                report["digest"][req.rid] = _digest(side, req, start, n)
                report["token"][req.rid] = list(req.output_ids)[:1]
                report["finished"][req.rid] = report["finished"].get(req.rid, 0) + 1
                release_kv_cache(req, side.tree, is_insert=False)
            if not pending and not side.prealloc.queue and not side.transfer.queue \
                    and not side.prealloc.pending_reqs:
                break
            time.sleep(0.001)
        if radix:
            H.release_radix_prefix(side)
        report["leaks"] = {
            "pages": free0[0] - side.allocator.available_size(),
            "request_slots": free0[1] - side.req_to_token.available_size(),
            "metadata_slots": free0[2] - side.metadata_alloc.available_size(),
            "state_slots": free0[3] - state_free(),
        }
        report["calls_after_conclusion"] = side.prealloc.kv_manager.calls_after_conclusion
        watch.fill(report)
        conn.send(("report", report))
    except Exception:
        conn.send(("error", traceback.format_exc()))
    finally:
        H.close_groups()


class _Batch:
    """The decode scheduler's running batch (empty: nothing decodes here);
    reading its requests runs `hook`."""

    def __init__(self, hook):
        self.hook = hook

    @property
    def reqs(self):
        return self.hook()


def run_exit(spec, conn, events=None):
    """A TP-2 prefill scheduler's life cut to what its exit needs: a
    kvroom.sglang KVManager and a room, polled as SGLang polls
    (poll_and_all_reduce: a MIN all-reduce over gloo) until both ranks are
    up, then the process ends one of three ways (`way`): its target
    returns, it calls sys.exit, or a SIGTERM reaches its handler (which
    exits, as a scheduler's does). Whatever the way, the process must exit
    0: no thread or actor system of kvroom's left to the interpreter's
    teardown."""
    import signal
    import numpy as np
    import torch
    import torch.distributed as dist
    import kvroom.sglang as ks

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        tp = spec["tp_rank"]
        if tp == 0:
            boot = ks.KVBootstrapServer("127.0.0.1", 0)
            conn.send(("port", boot.port))
            port = boot.port
        else:
            port = spec["bootstrap_port"]
        group = H.gloo_group(tp, 2, spec["gloo_port"])
        kv = [np.zeros(H.PAGE * 64 * 8, np.uint8) for _ in range(4)]
        aux = np.zeros(64 * 8, np.uint8)
        a = ks.KVArgs()
        a.engine_rank = tp
        a.kv_data_ptrs = [b.ctypes.data for b in kv]
        a.kv_data_lens = [b.nbytes for b in kv]
        a.kv_item_lens = [H.PAGE * 64] * len(kv)
        a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [aux.ctypes.data], [aux.nbytes], [64]
        mgr = ks.KVManager(a, ks.DisaggregationMode.PREFILL,
                           ks.ServerArgs(tp_size=2, disaggregation_bootstrap_port=port))
        sender = ks.KVSender(mgr, f"127.0.0.1:{port}", spec["room"], [tp], 0)
        for _ in range(100):
            polls = torch.tensor([int(sender.poll())], dtype=torch.uint8)
            dist.all_reduce(polls, op=dist.ReduceOp.MIN, group=group)
        conn.send(("ready", None))
        if spec["way"] == "sigterm":
            time.sleep(60)  # until the SIGTERM's handler exits
        elif spec["way"] == "exit":
            sys.exit(0)
    finally:
        H.close_groups()
