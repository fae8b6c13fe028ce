"""SGLang's own prefill and decode scheduler code over kvroom.sglang, each
scheduler in a process of its own (conformance.py says what runs).

Needs a checkout of SGLang (upstream main 8905cbd4 or later) named by
KVROOM_SGLANG_SRC and the Debian packages of tests/sglang/install-deps;
skipped, with that reason, without them.
"""

import multiprocessing as mp
import os
import signal
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SRC = os.environ.get("KVROOM_SGLANG_SRC", "")
if not SRC:
    pytest.skip("KVROOM_SGLANG_SRC is not set (a checkout of SGLang 8905cbd4 or later)",
                allow_module_level=True)
try:
    import torch  # noqa: F401
except ImportError:
    pytest.skip("python3-torch is not installed (bash tests/sglang/install-deps)",
                allow_module_level=True)

import conformance  # noqa: E402
import harness as H  # noqa: E402


@pytest.fixture(autouse=True)
def _no_process_left():
    # A scheduler process of a failed test may wait in C code (gloo's
    # TCPStore for a peer that died at import), where no Python signal
    # handler runs: multiprocessing's exit handler would SIGTERM and then
    # join it forever, holding pytest at exit. Each test's leftovers are
    # killed when it ends.
    yield
    for p in mp.active_children():
        p.kill()
        p.join(10)


def requests(n, first_room=1, tokens=lambda i: 17 + (i * 37) % 150, **extra):
    # Zero-padded: SGLang aborts every rid that starts with the one named.
    return [dict(rid=f"req-{first_room + i:04d}", room=first_room + i, tokens=tokens(i),
                 token=1000 + i, **extra) for i in range(n)]


def run_pair(reqs, prefill=None, decode=None, events=(), kill_prefill_after=None, tp=1,
             seconds=60, secret=None, ranks=None, decode_tp=None, dp=1, decode_dp=None, pp=1):
    """Runs `dp` DP groups of TP `tp` prefill schedulers and `decode_dp` (default
    `dp`) groups of TP `decode_tp` (default `tp`) decode schedulers over
    `reqs` (with DP attention when a side has more than one group; TP is the
    attention TP); returns their reports (prefill ranks first, each side by
    DP group, then TP rank). A request goes to prefill group room % dp (as
    SGLang's router sends it, following the bootstrap room) and to decode
    group (room // dp) % decode_dp, so rooms cross groups. `ranks`: more of
    the spec for one rank, by ("prefill" or "decode", its index in the
    reports). `pp`: prefill pipeline stages (each DP group TP x PP ranks,
    reported stage by stage); digests are then by (head, layer)."""
    ranks = ranks or {}
    ptp, dtp = tp, decode_tp or tp
    pdp, ddp = dp, decode_dp or dp
    ctx = mp.get_context("spawn")
    ev = {name: ctx.Event() for name in events}
    # `watch`: each scheduler reports the failures SGLang asked it for and
    # what it logged at warning or above (check_outcomes reads both).
    staged = dict(by_layer=True) if pp > 1 else {}
    pspec = dict(dict(tp_size=ptp, dp_size=pdp, pp_size=pp, seconds=seconds, watch=True,
                      **staged), **(prefill or {}))
    dspec = dict(dict(tp_size=dtp, dp_size=ddp, seconds=seconds, watch=True, **staged),
                 **(decode or {}))
    procs, pipes = [], []
    n_prefill = pdp * pp * ptp
    port = None
    for g, stage in ((g, stage) for g in range(pdp) for stage in range(pp)):
        if stage == 0:
            gloo = H._free_port()  # the group's gloo world (TP x PP ranks)
        mine_reqs = [r for r in reqs if r["room"] % pdp == g]
        for t in range(ptp):
            i = (g * pp + stage) * ptp + t
            mine, theirs = ctx.Pipe()
            spec = dict(pspec, requests=mine_reqs, gloo_port=gloo, tp_rank=t, dp_rank=g,
                        pp_rank=stage, **ranks.get(("prefill", i), {}))
            if i > 0:
                spec["bootstrap_port"] = port
            p = ctx.Process(target=conformance.run_prefill, args=(spec, theirs, ev), daemon=True)
            p.start()
            procs.append(p)
            pipes.append(mine)
            if i == 0:
                kind, port = _recv(mine, 120)
                assert kind == "port", port
    for g in range(ddp):
        gloo = H._free_port()
        mine_reqs = [dict(r) for r in reqs if (r["room"] // pdp) % ddp == g]
        for t in range(dtp):
            mine, theirs = ctx.Pipe()
            spec = dict(dspec, requests=mine_reqs, gloo_port=gloo, tp_rank=t, dp_rank=g,
                        bootstrap_port=port, **ranks.get(("decode", g * dtp + t), {}))
            p = ctx.Process(target=conformance.run_decode, args=(spec, theirs, ev), daemon=True)
            p.start()
            procs.append(p)
            pipes.append(mine)
    if kill_prefill_after is not None:
        # Once decode holds rooms in flight (preallocated, metadata sent).
        assert ev["decode_preallocated"].wait(120), "decode never preallocated"
        time.sleep(kill_prefill_after)
        for p in procs[:n_prefill]:
            os.kill(p.pid, signal.SIGKILL)
    reports = []
    for i, pipe in enumerate(pipes):
        if kill_prefill_after is not None and i < n_prefill:
            reports.append(None)
            continue
        kind, value = _recv(pipe, seconds + 120)
        assert kind == "report", f"a scheduler process died (raised):\n{value}"
        reports.append(value)
    for i, p in enumerate(procs):
        p.join(30)
        if kill_prefill_after is not None and i < n_prefill:
            continue
        # A scheduler process that holds kvroom exits cleanly: no abort
        # (SIGABRT: -6) from a thread or actor system left behind.
        assert p.exitcode == 0, f"scheduler process {i} exited with {p.exitcode}"
    return reports


def _recv(pipe, seconds):
    if not pipe.poll(seconds):
        raise AssertionError(f"no answer within {seconds} s")
    return pipe.recv()


def check_outcomes(reqs, reports, aborted=(), tp=1):
    """Every request ended once on every rank: finished (byte-exact, its
    first token carried) or, for `aborted`, aborted on both sides. Bytes
    are compared head by head (each decode rank's heads against the prefill
    rank that holds them, any TP sizes), and the decode ranks together hold
    every head the prefill ranks sent."""
    prefill, decode = reports[:tp], reports[tp:]
    for r in reqs:
        rid = r["rid"]
        for rep in prefill + decode:
            if rep is None or rid not in rep["given"]:
                continue  # killed, or another DP group's request
            ends = rep["finished"].get(rid, 0) + rep["aborted"].get(rid, 0)
            assert ends == 1, f"{rid} ended {ends} times: {rep['finished'].get(rid)} " \
                              f"finished, {rep['aborted'].get(rid)} aborted"
            if rid in aborted:
                assert rid in rep["aborted"], f"{rid} was not aborted"
            else:
                assert rid in rep["finished"], f"{rid} did not finish"
        if rid in aborted:
            continue
        sent = {}
        for p in prefill:
            if p is not None and rid in p["given"]:
                sent.update(p["digest"][rid])
        held = set()
        for i, d in enumerate(decode):
            if rid not in d["given"]:
                continue
            for head, digest in d["digest"][rid].items():
                assert head in sent, f"{rid}: decode rank {i} holds head {head}, no prefill " \
                                     f"rank sent it"
                assert digest == sent[head], f"{rid}: KV bytes of head {head} differ on " \
                                             f"decode rank {i}"
                held.add(head)
            assert d["token"][rid] == [r["token"]], f"{rid}: metadata differs"
        if sent and all(p is not None for p in prefill):
            assert held == set(sent), f"{rid}: decode holds heads {sorted(held)} of " \
                                      f"{sorted(sent)}"
    for d in decode:
        assert d["leaks"] == {"pages": 0, "request_slots": 0, "metadata_slots": 0,
                              "state_slots": 0}, d["leaks"]
    # A failure is logged at error once, at its origin: a rank that is the
    # origin of none of its failed rooms logs nothing at error.
    for rep in prefill + decode:
        if rep is None:
            continue
        origin = any(not from_another for errs in rep.get("raised", {}).values()
                     for from_another, _, _ in errs)
        errors = [m for level, m in rep.get("logged", []) if level in ("ERROR", "CRITICAL")]
        assert origin or not errors, f"a rank that is no failure's origin logged at error: " \
                                     f"{errors[:3]}"
    for p in prefill:
        if p is not None:
            assert p["metadata_free"] == H.SLOTS


def test_prefill_and_decode_schedulers_move_every_request_byte_exact():
    reqs = requests(24)
    reports = run_pair(reqs)
    check_outcomes(reqs, reports)


def test_chunked_prefill_sends_chunk_by_chunk():
    reqs = requests(8, tokens=lambda i: 100 + 23 * i)
    reports = run_pair(reqs, prefill=dict(chunk_tokens=32))
    check_outcomes(reqs, reports)


def test_decode_memory_pressure_keeps_requests_waiting_then_moves_them():
    reqs = requests(12, tokens=lambda i: 90 + i)
    reports = run_pair(reqs, decode=dict(pool_tokens=256))
    check_outcomes(reqs, reports)


def test_decode_radix_prefix_hits_make_prefill_send_only_the_suffix():
    reqs = requests(6, tokens=lambda i: 100 + 16 * i)
    for r in reqs[::2]:
        r.update(shares_prefix=True, expect_prefix=64)
    reports = run_pair(reqs, decode=dict(radix_prefix=64))
    check_outcomes(reqs, reports)
    decode = reports[1]
    for r in reqs:
        assert decode["prefix"][r["rid"]] == (64 if r.get("shares_prefix") else 0)


def test_aborts_from_either_side_at_every_state_reach_the_other_and_never_raise():
    reqs = requests(10)
    reqs[0]["abort"] = ("decode", "waiting")       # decode: handshake done, not allocated
    reqs[1]["abort"] = ("decode", "transferring")  # decode: metadata sent
    reqs[2]["abort"] = ("prefill", "bootstrapping")
    reqs[3]["abort"] = ("prefill", "inflight")     # prefill: last chunk sent
    reqs[4]["race"] = "before_send"  # decode aborts between prefill's poll and send
    reqs[5]["race"] = "before_metadata"  # prefill aborts between decode's poll and
    #                                      send_metadata
    events = [f"{reqs[4]['rid']}:prefill_polled", f"{reqs[4]['rid']}:decode_aborted",
              f"{reqs[1]['rid']}:decode_aborted", f"{reqs[5]['rid']}:abort_prefill",
              f"{reqs[5]['rid']}:prefill_aborted"]
    reports = run_pair(reqs, events=events)
    aborted = {r["rid"] for r in reqs[:6]}
    check_outcomes(reqs, reports, aborted=aborted)
    # The send after the abort did nothing, and said so (counted).
    assert reports[0]["calls_after_conclusion"] >= 1
    assert reports[1]["calls_after_conclusion"] >= 1


def test_a_killed_prefill_process_fails_its_rooms_on_decode():
    # The prefill bootstraps every request and then "computes" until it is
    # killed: every decode request is waiting or preallocated by then.
    reqs = requests(12)
    reports = run_pair(reqs, prefill=dict(forward=False, seconds=60),
                       decode=dict(pool_tokens=512), kill_prefill_after=0.5, seconds=60,
                       events=["decode_preallocated"])
    check_outcomes(reqs, [None] + reports[1:], aborted={r["rid"] for r in reqs})


def test_decode_tp2_with_sglangs_gloo_all_reduce():
    reqs = requests(8)
    reports = run_pair(reqs, tp=2)
    check_outcomes(reqs, reports, tp=2)


@pytest.mark.parametrize("prefill_tp,decode_tp", [(2, 1), (1, 2), (4, 2)])
def test_unequal_tp_mha_maps_heads_without_staging(prefill_tp, decode_tp):
    # SGLang's decode declares no heads outside its staging path (decode.py:
    # kv_head_num only with SGLANG_DISAGG_STAGING_BUFFER); kvroom maps the
    # model's heads from the prefill's declared layout at the decode's TP
    # size, straight into SGLang's decode pages. Staging stays off.
    reqs = requests(8)
    reports = run_pair(reqs, tp=prefill_tp, decode_tp=decode_tp)
    check_outcomes(reqs, reports, tp=prefill_tp)


@pytest.mark.parametrize("prefill_tp,decode_tp", [(2, 1), (1, 2)])
def test_mla_pools_move_the_latent_from_one_rank_per_decode_rank(prefill_tp, decode_tp):
    # SGLang's MLATokenToKVPool on both sides (one latent buffer per layer,
    # the same on every TP rank): one prefill rank writes each decode rank,
    # the others are dummies that conclude with the room.
    reqs = requests(8)
    reports = run_pair(reqs, tp=prefill_tp, decode_tp=decode_tp, prefill=dict(mla=True),
                       decode=dict(mla=True))
    check_outcomes(reqs, reports, tp=prefill_tp)


# Hybrid and sliding-window models: the request's state moves with the last
# chunk, as SGLang's state_type says, beside the full-attention KV.
# - mamba: full attention on layers 0 and 2, Mamba2 on 1 and 3. SGLang's
#   HybridReqToTokenPool gives each request a state slot, setup_state_kv_args
#   registers the conv and SSM buffers, and the decode's
#   HybridMambaDecodeReqToTokenPool slot receives it; each request's state is
#   seeded apart from every other's, and every state slot is free at the end.
# - swa: a 40-token window on layers 1 and 3. SGLang's SWAKVPool,
#   SWATokenToKVPoolAllocator and SWAChunkCache; the prefill sends the
#   window's pages of the SWA pool, the decode names its own (allocated for
#   the window's tail only, alloc_extend_swa_tail); every window page is
#   compared by head.
# One request is aborted on decode in flight; nothing leaks.
STATE_MODELS = {
    "mamba": (5, lambda key: key == "state"),
    "swa": (4, lambda key: isinstance(key, tuple) and key[0] == "window"),
}


@pytest.mark.parametrize("model", sorted(STATE_MODELS))
def test_hybrid_state_moves_byte_exact_beside_the_kv(model):
    aborted, is_state = STATE_MODELS[model]
    reqs = requests(12)
    reqs[aborted]["abort"] = ("decode", "transferring")
    reports = run_pair(reqs, prefill={model: True, "chunk_tokens": 48}, decode={model: True})
    check_outcomes(reqs, reports, aborted={reqs[aborted]["rid"]})
    for rep in reports:
        for rid, digest in rep["digest"].items():
            assert any(is_state(k) for k in digest), f"{rid}: no {model} state digest"


@pytest.mark.parametrize("tp", [1, 2])
def test_pp_prefill_stages_each_send_their_layers(tp):
    # --pp-size 2 on prefill: each stage's ranks hold half the layers
    # (MHATokenToKVPool start_layer; KVArgs pp_rank, prefill_start_layer) and
    # run SGLang's bootstrap queue, send_kv_chunk and inflight queue; the
    # decode (no PP) receives every layer from its stage. Byte-exact by
    # (head, layer); a request leaves bootstrapping by SGLang's PP consensus
    # (every stage ready). SGLang's PP event loop itself (it drives the
    # model) is not run: see the README.
    reqs = requests(10)
    reqs[3]["abort"] = ("decode", "transferring")
    reports = run_pair(reqs, tp=tp, pp=2, prefill=dict(chunk_tokens=64))
    check_outcomes(reqs, reports, aborted={reqs[3]["rid"]}, tp=2 * tp)
    layers = {k[1] for rep in reports[2 * tp:] for d in rep["digest"].values() for k in d}
    assert layers == set(range(H.LAYERS)), layers


@pytest.mark.parametrize("attn_tp", [1, 2])
def test_dp_attention_sends_each_room_to_its_prefill_dp_group(attn_tp):
    # --enable-dp-attention, dp_size 2 on both sides (TP 2 x attention TP 1,
    # or TP 4 x attention TP 2). SGLang's decode reads the prefill's DP size
    # from prefill_info_table and routes room % 2 (DecodePreallocQueue.
    # _resolve_prefill_dp_rank); each decode group gets rooms of both
    # prefill groups.
    reqs = requests(8)
    reports = run_pair(reqs, tp=attn_tp, dp=2)
    check_outcomes(reqs, reports, tp=2 * attn_tp)


def test_a_failure_in_one_dp_group_leaves_the_other_untouched():
    # Prefill DP group 1 fails rooms 3 and 7 (its own: room % 2 == 1); both
    # go to decode group 1. Prefill group 0 and decode group 0 hear of no
    # failure and log nothing at error; every other room moves byte-exact.
    reqs = requests(8)
    failing = {3, 7}
    reports = run_pair(reqs, dp=2, ranks={("prefill", 1): dict(fail_rooms=sorted(failing))})
    check_outcomes(reqs, reports, aborted={r["rid"] for r in reqs if r["room"] in failing},
                   tp=2)
    prefill0, prefill1, decode0, decode1 = reports
    for name, rep in (("prefill dp0", prefill0), ("decode dp0", decode0)):
        assert not rep["raised"], f"{name} was told of failures: {rep['raised']}"
        errors = [m for level, m in rep["logged"] if level in ("ERROR", "CRITICAL")]
        assert not errors, f"{name} logged at error: {errors[:3]}"
    for room in failing:
        assert prefill1["raised"].get(room), f"prefill dp1 was not told of room {room}"
        assert decode1["raised"].get(room), f"decode dp1 was not told of room {room}"


def test_a_failure_on_one_tp_rank_reaches_the_others_marked_from_another_rank():
    # TP 2 on both sides; SGLang polls with poll_and_all_reduce over gloo, so
    # a rank is told Failed by its group, possibly before kvroom's fan-out
    # reached it. Prefill tp1's data plane fails rooms 3 and 6: it is their
    # one origin. Every other rank's KVTransferError is marked from another
    # rank (SGLang then logs it at debug), and nothing but the origin logs
    # at error; the rooms end once everywhere, no page leaks.
    reqs = requests(8)
    failing = {3, 6}
    reports = run_pair(reqs, tp=2, prefill=dict(watch=True), decode=dict(watch=True),
                       ranks={("prefill", 1): dict(fail_rooms=sorted(failing))})
    check_outcomes(reqs, reports, aborted={r["rid"] for r in reqs if r["room"] in failing},
                   tp=2)
    names = ["prefill tp0", "prefill tp1", "decode tp0", "decode tp1"]
    for name, rep in zip(names, reports):
        origin = name == "prefill tp1"
        for room in failing:
            errs = rep["raised"].get(room, [])
            assert errs, f"{name}: SGLang asked for no failure of room {room}"
            for from_another, origin_rank, reason in errs:
                assert from_another != origin, \
                    f"{name}, room {room}: is_from_another_rank={from_another}: {reason}"
                assert "no failure recorded" not in reason, f"{name}: {reason}"
        if origin:
            continue
        errors = [m for level, m in rep["logged"] if level in ("ERROR", "CRITICAL")]
        assert not errors, f"{name} (not the origin) logged at error: {errors[:3]}"
        told = [m for level, m in rep["logged"] if "failed for request" in m]
        assert not told, f"{name} (not the origin) logged the failure above debug: {told[:3]}"


def test_scheduler_processes_exit_cleanly_every_way_twenty_times():
    # TP 2 over gloo with kvroom in each process; each pair ends by its
    # target returning, sys.exit, or SIGTERM (its handler exits), in turn.
    ctx = mp.get_context("spawn")
    ways = ["return", "exit", "sigterm"]
    for i in range(20):
        way = ways[i % 3]
        spec = dict(gloo_port=H._free_port(), way=way, room=7000 + i)
        procs, pipes = [], []
        for t in range(2):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=conformance.run_exit, args=(dict(spec, tp_rank=t), theirs),
                            daemon=True)
            p.start()
            procs.append(p)
            pipes.append(mine)
            if t == 0:
                kind, spec["bootstrap_port"] = _recv(mine, 120)
                assert kind == "port"
        for pipe in pipes:
            kind, _ = _recv(pipe, 120)
            assert kind == "ready"
        if way == "sigterm":
            for p in procs:
                os.kill(p.pid, signal.SIGTERM)
        for t, p in enumerate(procs):
            p.join(60)
            assert p.exitcode == 0, f"run {i} ({way}): tp{t} exited with {p.exitcode}"


def _fresh_python(code):
    """Runs `code` in a new interpreter with SGLang importable; its stdout."""
    import subprocess
    prelude = (f"import sys; sys.path.insert(0, {HERE!r}); import sglang_env; "
               f"sglang_env.install({SRC!r}); ")
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


LAUNCH = ["--model-path", "dummy", "--disaggregation-mode", "prefill",
          "--disaggregation-transfer-backend", "kvroom"]


def test_the_launch_line_parses_with_sglangs_own_parser():
    # python3 -m kvroom.sglang.launch_server <SGLang's arguments>: importing
    # it registers kvroom; SGLang's prepare_server_args (what its
    # launch_server calls) then takes the backend's name.
    assert _fresh_python(
        "import kvroom.sglang.launch_server; "
        "from sglang.srt.server_args import prepare_server_args; "
        f"print(prepare_server_args({LAUNCH!r}).disaggregation_transfer_backend)") == "kvroom"
    # SGLang's own launch line: its plugin loader finds kvroom's entry point.
    assert _fresh_python(
        "from sglang.srt.plugins import load_plugins; load_plugins(); "
        "from sglang.srt.server_args import prepare_server_args; "
        "from sglang.srt.disaggregation.utils import TransferBackend, get_kv_class, KVClassType; "
        f"a = prepare_server_args({LAUNCH!r}); "
        "print(get_kv_class(TransferBackend(a.disaggregation_transfer_backend), "
        "KVClassType.MANAGER).__module__)") == "kvroom.sglang"
    # Without kvroom registered, SGLang refuses the name: the test can fail.
    import subprocess
    out = subprocess.run([sys.executable, "-c",
                          f"import sys; sys.path.insert(0, {HERE!r}); import sglang_env; "
                          f"sglang_env.install({SRC!r}); "
                          "from sglang.srt.server_args import prepare_server_args; "
                          f"prepare_server_args({LAUNCH!r})"],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, SGLANG_PLUGINS="none"))
    assert out.returncode != 0 and "kvroom" in out.stderr


def test_kvroom_classes_follow_sglangs_base_classes():
    """Every method of SGLang's base classes (the abstract ones among them:
    get_transfer_metric, poll, failure_exception...), with its parameter
    names, and every KVArgs field, read from the SGLang checkout itself."""
    import inspect
    from sglang.srt.disaggregation.base import conn as base
    import kvroom.sglang as ks
    pairs = [(base.BaseKVManager, ks.KVManager), (base.BaseKVSender, ks.KVSender),
             (base.BaseKVReceiver, ks.KVReceiver), (base.BaseKVBootstrapServer,
                                                     ks.KVBootstrapServer)]
    for theirs, ours in pairs:
        for name, fn in vars(theirs).items():
            if not callable(fn) or (name.startswith("_") and name != "__init__"):
                continue
            want = list(inspect.signature(fn).parameters)
            have = inspect.signature(getattr(ours, name)).parameters
            got = list(have)
            # SGLang's parameters in SGLang's order; more only with defaults
            # (a newer SGLang's, e.g. send's num_kv_tokens after 2026-07),
            # so one kvroom serves older and newer SGLang alike.
            assert got[:len(want)] == want, f"{ours.__name__}.{name}: {got} != {want}"
            extra = [p for p in got[len(want):] if have[p].default is inspect.Parameter.empty]
            assert not extra, f"{ours.__name__}.{name}: {extra} without defaults"
    fields = set(getattr(base.KVArgs, "__annotations__", {}))
    assert fields, "SGLang's KVArgs declares no fields?"
    assert fields <= set(vars(ks.KVArgs())), fields - set(vars(ks.KVArgs()))
    assert [m.value for m in ks.KVPoll] == [0, 1, 2, 3, 4]
    assert [int(getattr(base.KVPoll, m.name)) for m in ks.KVPoll] == [0, 1, 2, 3, 4]

