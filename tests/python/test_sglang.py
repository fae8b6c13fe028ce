"""kvroom.sglang: SGLang's disaggregation classes over kvroom, driven the way
SGLang's prefill.py/decode.py drive them."""

import inspect
import time

import numpy as np
import pytest
from _helpers import secret_file, until

from kvroom import sglang as ks
from kvroom.sglang import (DisaggregationMode, KVArgs, KVBootstrapServer, KVManager, KVPoll,
                           KVReceiver, KVSender, KVTransferError, ServerArgs)

PAGE = 2048
PAGES = 32
AUX = 64
SLOTS = 8

# Parameter names of SGLang upstream main 8905cbd4 (2026-07-20),
# python/sglang/srt/disaggregation/base/conn.py (self left out), and what a
# newer SGLang added (1ea415af70, 2026-08-04), which takes a default.
SGLANG = {
    (KVManager, "__init__"): ["args", "disaggregation_mode", "server_args", "is_mla_backend"],
    (KVManager, "register_to_bootstrap"): [],
    (KVSender, "__init__"): ["mgr", "bootstrap_addr", "bootstrap_room", "dest_tp_ranks",
                             "pp_rank", "req_has_disagg_prefill_dp_rank"],
    (KVSender, "init"): ["num_kv_indices", "aux_index"],
    (KVSender, "send"): ["kv_indices", "state_indices", "num_kv_tokens"],
    (KVSender, "pop_decode_prefix_len"): [],
    (KVSender, "should_send_kv_chunk"): ["num_pages", "last_chunk"],
    (KVSender, "get_transfer_metric"): [],
    (KVSender, "poll"): [],
    (KVSender, "failure_exception"): [],
    (KVSender, "clear"): [],
    (KVSender, "abort"): [],
    (KVReceiver, "__init__"): ["mgr", "bootstrap_addr", "bootstrap_room"],
    (KVReceiver, "init"): ["prefill_dp_rank"],
    (KVReceiver, "send_metadata"): ["kv_indices", "aux_index", "state_indices",
                                    "decode_prefix_len"],
    (KVReceiver, "poll"): [],
    (KVReceiver, "failure_exception"): [],
    (KVReceiver, "clear"): [],
    (KVReceiver, "abort"): [],
    (KVBootstrapServer, "__init__"): ["host", "port"],
}


def test_signatures_match_sglang():
    for (cls, name), want in SGLANG.items():
        params = list(inspect.signature(getattr(cls, name)).parameters)[1:]
        assert params == want, f"{cls.__name__}.{name}"
    assert [(x.name, int(x)) for x in KVPoll] == [
        ("Failed", 0), ("Bootstrapping", 1), ("WaitingForInput", 2), ("Transferring", 3),
        ("Success", 4)]
    assert list(inspect.signature(KVTransferError).parameters)[:3] == [
        "bootstrap_room", "failure_reason", "is_from_another_rank"]
    assert [m.value for m in DisaggregationMode] == ["null", "prefill", "decode"]
    ServerArgs()


@pytest.fixture(scope="module")
def bootstrap():
    return KVBootstrapServer("127.0.0.1", 0)


def kv_args(dp, seed=None):
    rng = np.random.default_rng(seed)
    make = (lambda n: rng.integers(0, 256, n, dtype=np.uint8)) if seed is not None else (
        lambda n: np.zeros(n, np.uint8))
    kv = [make(PAGE * PAGES) for _ in range(4)]  # K and V of 2 layers
    aux = make(AUX * SLOTS)
    a = KVArgs()
    a.kv_data_ptrs = [b.ctypes.data for b in kv]
    a.kv_data_lens = [b.nbytes for b in kv]
    a.kv_item_lens = [PAGE] * len(kv)
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [aux.ctypes.data], [aux.nbytes], [AUX]
    a.system_dp_rank = dp
    return a, kv, aux


def managers(bootstrap, dp):
    sargs = ServerArgs(disaggregation_bootstrap_port=bootstrap.port)
    pa, pkv, paux = kv_args(dp, seed=dp + 1)
    da, dkv, daux = kv_args(dp)
    p = KVManager(pa, DisaggregationMode.PREFILL, sargs)
    d = KVManager(da, DisaggregationMode.DECODE, sargs)
    return p, d, (pkv, paux), (dkv, daux)


def test_one_room_the_way_sglang_drives_it(bootstrap):
    p, d, (pkv, paux), (dkv, daux) = managers(bootstrap, 0)
    addr = f"127.0.0.1:{bootstrap.port}"
    room = 101
    # Decode: bootstrap queue -> init -> send_metadata with its pages.
    receiver = KVReceiver(d, addr, room)
    assert receiver.poll() == KVPoll.Bootstrapping
    receiver.init(prefill_dp_rank=0)
    sender = KVSender(p, addr, room, dest_tp_ranks=[0], pp_rank=0)
    assert until(lambda: receiver.poll() == KVPoll.WaitingForInput)
    receiver.send_metadata(np.array([4, 5, 6], np.int32), aux_index=2)
    # Prefill: waits for the destination, then sends in chunks of pages.
    assert until(lambda: sender.poll() == KVPoll.WaitingForInput)
    sender.init(3, aux_index=1)
    sender.send(np.array([0, 1], np.int32))
    sender.send(np.array([9], np.int32))  # completes the 3 pages: the last chunk
    assert until(lambda: receiver.poll() == KVPoll.Success and sender.poll() == KVPoll.Success)
    for b in range(4):
        for sp, dp_ in zip([0, 1, 9], [4, 5, 6]):
            assert np.array_equal(dkv[b][dp_ * PAGE:(dp_ + 1) * PAGE], pkv[b][sp * PAGE:(sp + 1) * PAGE])
    assert np.array_equal(daux[2 * AUX:3 * AUX], paux[1 * AUX:2 * AUX])
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def waiting_room(bootstrap, dp, room):
    """A prefill and a decode manager of group `dp` and one room between
    them, both sides waiting for input (decode's pages sent)."""
    p, d, _, _ = managers(bootstrap, dp)
    addr = f"127.0.0.1:{bootstrap.port}"
    receiver = KVReceiver(d, addr, room)
    receiver.init(dp)
    sender = KVSender(p, addr, room, [0], 0)
    assert until(lambda: receiver.poll() == KVPoll.WaitingForInput)
    receiver.send_metadata(np.array([0], np.int32), 0)
    assert until(lambda: sender.poll() == KVPoll.WaitingForInput)
    return p, d, sender, receiver


def test_a_failure_raises_kvtransfererror_with_the_origin(bootstrap):
    p, d, sender, receiver = waiting_room(bootstrap, 1, 202)
    sender.abort()
    assert until(lambda: receiver.poll() == KVPoll.Failed and sender.poll() == KVPoll.Failed)
    with pytest.raises(KVTransferError) as mine:
        sender.failure_exception()
    with pytest.raises(KVTransferError) as theirs:
        receiver.failure_exception()
    assert not mine.value.is_from_another_rank
    assert theirs.value.is_from_another_rank
    assert "aborted by prefill scheduler" == theirs.value.failure_reason
    # The class, set where the failure was identified, reaches both.
    assert mine.value.cause == theirs.value.cause == "abort"
    assert str(theirs.value).startswith("KVTransferError(bootstrap_room=202): ")
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def test_told_failed_by_the_group_before_kvroom_knows_is_from_another_rank(bootstrap):
    # SGLang's poll_and_all_reduce: another TP rank's Failed reads Failed
    # here while this rank's room still waits. failure_exception() then
    # raises an error from another rank (logged at debug by SGLang), never
    # "no failure recorded", and the room goes on as it would have.
    p, d, sender, receiver = waiting_room(bootstrap, 4, 404)
    for room in (sender, receiver):
        with pytest.raises(KVTransferError) as told:
            room.failure_exception()
        assert told.value.is_from_another_rank
        assert told.value.origin_rank == -1
        assert "failed on another rank" in told.value.failure_reason
        assert told.value.cause == "other"
    assert receiver.poll() == KVPoll.WaitingForInput
    # Once the failure reached it, the same call carries the root cause.
    receiver.abort()
    assert until(lambda: sender.poll() == KVPoll.Failed)
    with pytest.raises(KVTransferError) as later:
        sender.failure_exception()
    assert later.value.is_from_another_rank
    assert later.value.failure_reason == "aborted by decode scheduler"
    assert later.value.origin_rank >= 0
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def test_what_is_not_supported_yet_is_refused_clearly(bootstrap):
    sargs = ServerArgs(disaggregation_bootstrap_port=bootstrap.port)
    a, _, _ = kv_args(2)
    with pytest.raises(ValueError, match="page_size"):
        KVManager(a, DisaggregationMode.PREFILL, sargs, is_mla_backend=True)
    with pytest.raises(ValueError, match="prefill or decode"):
        KVManager(a, DisaggregationMode.NULL, sargs)
    p, d, _, _ = managers(bootstrap, 3)
    a.state_types = ["mamba", "swa"]
    with pytest.raises(NotImplementedError, match="one state type"):
        KVManager(a, DisaggregationMode.PREFILL, sargs)
    sender = KVSender(p, "127.0.0.1:1", 303, [0], 0)
    sender.init(2, 0)
    # A bad call of the scheduler's own fails the room with the reason,
    # never raises into it (SGLang catches nothing from send).
    sender.send(np.array([0], np.int32), state_indices=[1])
    assert sender.poll() == KVPoll.Failed
    with pytest.raises(KVTransferError, match="last chunk"):
        sender.failure_exception()
    receiver = KVReceiver(d, "not-an-address", 303)
    receiver.init(0)
    assert receiver.poll() == KVPoll.Failed
    with pytest.raises(KVTransferError, match="host:port"):
        receiver.failure_exception()
    sender.clear()
    p.close()
    d.close()


def _rank_process(side, tp, tp_size, port_queue, result_queue, rooms, secret):
    """One SGLang-style rank in its own process; prefill tp0 hosts the
    bootstrap server and tells the others its port."""
    import os
    os.environ["KVROOM_SECRET_FILE"] = secret
    from kvroom import sglang as ks
    try:
        if side == "prefill" and tp == 0:
            server = ks.KVBootstrapServer("127.0.0.1", 0)
            for _ in range(2 * tp_size - 1):
                port_queue.put(server.port)
            port = server.port
        else:
            port = port_queue.get(timeout=30)
        mode = ks.DisaggregationMode.PREFILL if side == "prefill" else ks.DisaggregationMode.DECODE
        args, kv, aux = kv_args(0, seed=100 + tp if side == "prefill" else None)
        args.engine_rank = tp
        mgr = ks.KVManager(args, mode, ks.ServerArgs(tp_size=tp_size,
                                                     disaggregation_bootstrap_port=port))
        addr = f"127.0.0.1:{port}"
        handles = []
        for room in rooms:
            if side == "prefill":
                handles.append(ks.KVSender(mgr, addr, room, [tp], 0))
            else:
                h = ks.KVReceiver(mgr, addr, room)
                h.init(0)
                handles.append(h)
        ok = until(lambda: all(h.poll() == KVPoll.WaitingForInput for h in handles), 30)
        for i, h in enumerate(handles):
            if side == "prefill":
                h.init(2, aux_index=i % SLOTS)
                h.send(np.array([2 * i, 2 * i + 1], np.int32))
            else:
                h.send_metadata(np.array([2 * i + 10, 2 * i + 11], np.int32), aux_index=i % SLOTS)
        ok = ok and until(lambda: all(h.poll() == KVPoll.Success for h in handles), 30)
        if ok and side == "decode":
            _, ekv, eaux = kv_args(0, seed=100 + tp)
            for i in range(len(rooms)):
                for b in range(4):
                    for sp, dp_ in ((2 * i, 2 * i + 10), (2 * i + 1, 2 * i + 11)):
                        ok = ok and np.array_equal(kv[b][dp_ * PAGE:(dp_ + 1) * PAGE],
                                                   ekv[b][sp * PAGE:(sp + 1) * PAGE])
                s = i % SLOTS
                ok = ok and np.array_equal(aux[s * AUX:(s + 1) * AUX], eaux[s * AUX:(s + 1) * AUX])
        result_queue.put((side, tp, bool(ok)))
        # Prefill tp0 hosts the registry: it stays until every rank is done.
        time.sleep(0.5 if side == "prefill" and tp == 0 else 0)
        for h in handles:
            h.clear()
        mgr.close()
    except Exception as e:  # reported, not lost in a child's stderr
        result_queue.put((side, tp, f"{type(e).__name__}: {e}"))


@pytest.mark.parametrize("tp_size", [1, 2])
def test_one_process_per_rank(tmp_path, tp_size):
    import multiprocessing as mp
    secret = secret_file(tmp_path)
    ctx = mp.get_context("spawn")
    ports, results = ctx.Queue(), ctx.Queue()
    rooms = [1000 + tp_size * 10 + i for i in range(4)]
    procs = [ctx.Process(target=_rank_process,
                         args=(side, tp, tp_size, ports, results, rooms, secret))
             for side in ("prefill", "decode") for tp in range(tp_size)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert all(r[2] is True for r in got), got
    assert all(p.exitcode == 0 for p in procs)


def test_2p_2d_in_one_process(bootstrap):
    sargs = ServerArgs(tp_size=2, disaggregation_bootstrap_port=bootstrap.port)
    addr = f"127.0.0.1:{bootstrap.port}"
    mgrs, bufs = {}, {}
    for side, mode in (("prefill", DisaggregationMode.PREFILL), ("decode", DisaggregationMode.DECODE)):
        for tp in range(2):
            a, kv, aux = kv_args(5, seed=50 + tp if side == "prefill" else None)
            a.engine_rank = tp
            mgrs[(side, tp)] = KVManager(a, mode, sargs)
            bufs[(side, tp)] = (kv, aux)
    receivers = [KVReceiver(mgrs[("decode", tp)], addr, 505) for tp in range(2)]
    for r in receivers:
        r.init(5)
    senders = [KVSender(mgrs[("prefill", tp)], addr, 505, [tp], 0) for tp in range(2)]
    assert until(lambda: all(r.poll() == KVPoll.WaitingForInput for r in receivers))
    for r in receivers:
        r.send_metadata(np.array([7], np.int32), 3)
    assert until(lambda: all(s.poll() == KVPoll.WaitingForInput for s in senders))
    for s in senders:
        s.init(1, 4)
        s.send(np.array([2], np.int32))
    assert until(lambda: all(h.poll() == KVPoll.Success for h in senders + receivers))
    for tp in range(2):
        (pkv, paux), (dkv, daux) = bufs[("prefill", tp)], bufs[("decode", tp)]
        for b in range(4):
            assert np.array_equal(dkv[b][7 * PAGE:8 * PAGE], pkv[b][2 * PAGE:3 * PAGE])
        assert np.array_equal(daux[3 * AUX:4 * AUX], paux[4 * AUX:5 * AUX])
    for h in senders + receivers:
        h.clear()
    for m in mgrs.values():
        m.close()


FAKE_UTILS = '''
from enum import Enum


class TransferBackend(Enum):
    MOONCAKE = "mooncake"
    NIXL = "nixl"


class KVClassType(Enum):
    KVARGS = "kvargs"
    MANAGER = "manager"
    SENDER = "sender"
    RECEIVER = "receiver"
    BOOTSTRAP_SERVER = "bootstrap_server"


def get_kv_class(transfer_backend, class_type):
    raise ValueError(f"Unsupported transfer backend: {transfer_backend}")
'''


def test_register_hooks_sglangs_backend_table(tmp_path, monkeypatch):
    # A stand-in for SGLang's package layout: utils.get_kv_class and a module
    # that imported it by name before register() ran (as decode.py does).
    pkg = tmp_path / "sglang" / "srt" / "disaggregation"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "sglang", tmp_path / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(FAKE_UTILS)
    (pkg / "decode.py").write_text("from sglang.srt.disaggregation.utils import get_kv_class\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    import sys
    for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, m)
    utils = importlib.import_module("sglang.srt.disaggregation.utils")
    decode = importlib.import_module("sglang.srt.disaggregation.decode")
    assert ks.register()
    backend = utils.TransferBackend("kvroom")
    assert backend is utils.TransferBackend.KVROOM
    for table in (utils.get_kv_class, decode.get_kv_class):
        assert table(backend, utils.KVClassType.MANAGER) is KVManager
        assert table(backend, utils.KVClassType.SENDER) is KVSender
        assert table(backend, utils.KVClassType.RECEIVER) is KVReceiver
        assert table(backend, utils.KVClassType.BOOTSTRAP_SERVER) is KVBootstrapServer
        assert table(backend, utils.KVClassType.KVARGS) is KVArgs
        with pytest.raises(ValueError, match="Unsupported"):
            table(utils.TransferBackend.NIXL, utils.KVClassType.MANAGER)
    assert ks.register()  # twice is once
    for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[m]


def test_an_abort_on_decode_reaches_prefill(bootstrap):
    p, d, sender, receiver = waiting_room(bootstrap, 6, 707)
    receiver.abort()
    assert until(lambda: receiver.poll() == KVPoll.Failed and sender.poll() == KVPoll.Failed)
    with pytest.raises(KVTransferError) as theirs:
        sender.failure_exception()
    assert theirs.value.is_from_another_rank
    assert "aborted by decode scheduler" == theirs.value.failure_reason
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def _hybrid_process(secret, result_queue):
    """A Mamba-style deployment of its own (the state buffers are part of the
    deployment's layout): one prefill and one decode manager of this
    process, SGLang's calls with state_indices, the bytes checked."""
    import os
    os.environ["KVROOM_SECRET_FILE"] = secret
    from kvroom import sglang as ks
    try:
        server = ks.KVBootstrapServer("127.0.0.1", 0)
        sargs = ks.ServerArgs(disaggregation_bootstrap_port=server.port)
        rng = np.random.default_rng(5)
        made = {}
        for side in ("prefill", "decode"):
            a, kv, aux = kv_args(0, seed=9 if side == "prefill" else None)
            state = [rng.integers(0, 256, 256 * 4, dtype=np.uint8) if side == "prefill"
                     else np.zeros(256 * 4, np.uint8) for _ in range(2)]
            a.state_types = ["mamba"]
            a.state_data_ptrs = [[b.ctypes.data for b in state]]  # per state type
            a.state_data_lens = [[b.nbytes for b in state]]
            a.state_item_lens = [[256, 256]]
            mode = (ks.DisaggregationMode.PREFILL if side == "prefill"
                    else ks.DisaggregationMode.DECODE)
            made[side] = (ks.KVManager(a, mode, sargs), kv, aux, state)
        p, pkv, _, pstate = made["prefill"]
        d, dkv, _, dstate = made["decode"]
        addr = f"127.0.0.1:{server.port}"
        receiver = ks.KVReceiver(d, addr, 401)
        receiver.init(0)
        sender = ks.KVSender(p, addr, 401, [0], 0)
        ok = until(lambda: receiver.poll() == KVPoll.WaitingForInput, 30)
        receiver.send_metadata(np.array([7], np.int32), 0, state_indices=[2])
        ok = ok and until(lambda: sender.poll() == KVPoll.WaitingForInput, 30)
        sender.init(1, 0)
        sender.send(np.array([3], np.int32), state_indices=[1])
        ok = ok and until(lambda: receiver.poll() == KVPoll.Success
                          and sender.poll() == KVPoll.Success, 30)
        ok = ok and all(np.array_equal(dstate[b][512:768], pstate[b][256:512]) for b in range(2))
        ok = ok and np.array_equal(dkv[0][7 * PAGE:8 * PAGE], pkv[0][3 * PAGE:4 * PAGE])
        result_queue.put("ok" if ok else "mismatch")
        p.close()
        d.close()
    except Exception as e:  # reported to the test
        result_queue.put(f"error: {e!r}")


def test_hybrid_model_state_through_sglangs_calls(tmp_path):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_hybrid_process, args=(secret_file(tmp_path), q))
    child.start()
    try:
        assert q.get(timeout=60) == "ok"
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


def _mapped_process(secret, mla, result_queue):
    """A deployment of its own with unequal TP sizes, driven by SGLang's
    calls: head-sliced 2P -> 4D (token-major pages, 8 KV heads of 16 bytes,
    4 tokens per page), or MLA 4P -> 2D (one latent buffer per layer; two
    prefill ranks are dummies). Every decode page is checked against the
    heads its rank must hold."""
    import os
    os.environ["KVROOM_SECRET_FILE"] = secret
    from kvroom import sglang as ks
    try:
        server = ks.KVBootstrapServer("127.0.0.1", 0)
        tokens, head, heads, pages, layers = 4, 16, 8, 8, 2
        ptp, dtp = (4, 2) if mla else (2, 4)
        buffers = layers if mla else 2 * layers
        made = {"prefill": [], "decode": []}
        for side, tp in (("prefill", ptp), ("decode", dtp)):
            for t in range(tp):
                local = 1 if mla else heads // tp
                item = tokens * local * head
                rng = np.random.default_rng(50 + t)
                kv = [rng.integers(0, 256, item * pages, dtype=np.uint8) if side == "prefill"
                      and (mla is False or t == 0) else np.zeros(item * pages, np.uint8)
                      for _ in range(buffers)]
                if side == "prefill" and mla and t > 0:  # replicas of TP 0's latent KV
                    kv = [b.copy() for b in made["prefill"][0][1]]
                aux = np.zeros(AUX * SLOTS, np.uint8)
                a = ks.KVArgs()
                a.engine_rank = t
                a.kv_data_ptrs = [b.ctypes.data for b in kv]
                a.kv_data_lens = [b.nbytes for b in kv]
                a.kv_item_lens = [item] * buffers
                a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [aux.ctypes.data], [aux.nbytes], [AUX]
                a.kv_head_num, a.total_kv_head_num, a.page_size = local, heads, tokens
                mode = (ks.DisaggregationMode.PREFILL if side == "prefill"
                        else ks.DisaggregationMode.DECODE)
                sargs = ks.ServerArgs(tp_size=tp, disaggregation_bootstrap_port=server.port)
                made[side].append((ks.KVManager(a, mode, sargs, is_mla_backend=mla), kv))
        addr = f"127.0.0.1:{server.port}"
        room = 501
        receivers = [ks.KVReceiver(m, addr, room) for m, _ in made["decode"]]
        for r in receivers:
            r.init(0)
        senders = [ks.KVSender(m, addr, room, [0], 0) for m, _ in made["prefill"]]
        ok = until(lambda: all(r.poll() == KVPoll.WaitingForInput for r in receivers), 30)
        for r in receivers:
            r.send_metadata(np.array([5, 2], np.int32), 0)
        for s in senders:  # SGLang's scheduler drives dummies the same way
            s.init(2, 0)
            s.send(np.array([1, 6], np.int32))
        ok = ok and until(lambda: all(r.poll() == KVPoll.Success for r in receivers)
                          and all(s.poll() == KVPoll.Success for s in senders), 30)
        bad = []
        for d, (_, dkv) in enumerate(made["decode"]):
            dlocal = 1 if mla else heads // dtp
            for b in range(buffers):
                for sp, dpg in ((1, 5), (6, 2)):
                    for tok in range(tokens):
                        for h in range(dlocal):
                            if mla:
                                src_rank, sh, slocal = d % ptp, 0, 1
                            else:
                                g = d * dlocal + h
                                slocal = heads // ptp
                                src_rank, sh = g // slocal, g % slocal
                            skv = made["prefill"][src_rank][1][b]
                            s_off = sp * tokens * slocal * head + (tok * slocal + sh) * head
                            d_off = dpg * tokens * dlocal * head + (tok * dlocal + h) * head
                            if not np.array_equal(dkv[b][d_off:d_off + head], skv[s_off:s_off + head]):
                                bad.append((d, b, dpg, tok, h))
        result_queue.put("ok" if ok and not bad else f"mismatch ok={ok} {bad[:3]}")
        for m, _ in made["prefill"] + made["decode"]:
            m.close()
    except Exception as e:  # reported to the test
        result_queue.put(f"error: {e!r}")


@pytest.mark.parametrize("mla", [False, True])
def test_unequal_tp_and_mla_through_sglangs_calls(tmp_path, mla):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_mapped_process, args=(secret_file(tmp_path), mla, q))
    child.start()
    try:
        assert q.get(timeout=90) == "ok"
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


# -- what SGLang's scheduler code needs beyond base/conn.py (8905cbd4) -------

class SGLangMode(__import__("enum").Enum):
    """A stand-in for SGLang's own DisaggregationMode: another enum class,
    the same values."""
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


def sglang_managers(bootstrap, dp, gpu_id=0):
    """Prefill and decode managers as SGLang's queues build them: its own
    mode enum, gpu_id 0 with host pools, prefill naming its heads and decode
    only its page size (decode.py sets head counts on its staging path
    alone)."""
    sargs = ServerArgs(disaggregation_bootstrap_port=bootstrap.port)
    pa, pkv, paux = kv_args(dp, seed=dp + 11)
    da, dkv, daux = kv_args(dp)
    for a in (pa, da):
        a.page_size = 16
        a.gpu_id = gpu_id
    pa.kv_head_num, pa.total_kv_head_num = 2, 2  # 16 tokens x 2 heads x 64 B = PAGE
    p = KVManager(pa, SGLangMode.PREFILL, sargs, False)
    d = KVManager(da, "decode", sargs, False)
    return p, d, (pkv, paux), (dkv, daux)


def test_sglangs_own_calls_mode_gpu_id_decode_layout_and_attributes(bootstrap):
    p, d, (pkv, paux), (dkv, daux) = sglang_managers(bootstrap, 8)
    addr = f"127.0.0.1:{bootstrap.port}"
    assert p.kv_args.page_size == 16 and d.kv_args.kv_head_num is None
    # Decode's pending queue: parallel info, then the dp rank from the table.
    # The registry lists prefill DP group 8 alone: groups 0..7 have not
    # registered, so SGLang is told to ask again (it retries once a second).
    assert not d.try_ensure_parallel_info(addr)
    assert addr not in d.prefill_info_table
    sargs = ServerArgs(disaggregation_bootstrap_port=bootstrap.port)
    groups = [kv_args(g) for g in range(8)]
    others = [KVManager(a, SGLangMode.PREFILL, sargs, False) for a, _, _ in groups]
    assert until(lambda: d.try_ensure_parallel_info(addr))
    info = d.prefill_info_table[addr]
    assert (info.dp_size, info.attn_tp_size, info.pp_size) == (9, 1, 1)
    for m in others:
        m.close()
    receiver = KVReceiver(d, addr, 801)
    assert receiver.conclude_state is None
    receiver.init(8)
    sender = KVSender(p, addr, 801, [0], 0)
    assert sender.kv_mgr is p and receiver.kv_mgr is d
    assert until(lambda: receiver.poll() == KVPoll.WaitingForInput)
    receiver.send_metadata(np.array([3, 4], np.int32), 1, [], decode_prefix_len=0)
    assert until(lambda: sender.poll() == KVPoll.WaitingForInput)
    assert sender.pop_decode_prefix_len() == 0
    sender.init(2, 0)
    sender.send(np.array([5, 6], np.int32), [])
    assert until(lambda: receiver.poll() == KVPoll.Success and sender.poll() == KVPoll.Success)
    assert receiver.conclude_state == KVPoll.Success
    for b in range(4):
        for sp, dp_ in zip([5, 6], [3, 4]):
            assert np.array_equal(dkv[b][dp_ * PAGE:(dp_ + 1) * PAGE],
                                  pkv[b][sp * PAGE:(sp + 1) * PAGE])
    assert np.array_equal(daux[AUX:2 * AUX], paux[:AUX])
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def test_the_decode_radix_prefix_reaches_prefill_which_sends_only_the_suffix(bootstrap):
    p, d, (pkv, paux), (dkv, daux) = sglang_managers(bootstrap, 9)
    addr = f"127.0.0.1:{bootstrap.port}"
    page_tokens = 16
    # A 7-page prompt whose first 4 pages decode holds already (its radix
    # cache): decode allocated 3 pages, prefill sends pages 4..6 of its own.
    receiver = KVReceiver(d, addr, 901)
    receiver.init(9)
    sender = KVSender(p, addr, 901, [0], 0)
    assert until(lambda: receiver.poll() == KVPoll.WaitingForInput)
    receiver.send_metadata(np.array([20, 21, 22], np.int32), 2, [],
                           decode_prefix_len=4 * page_tokens)
    assert until(lambda: sender.poll() == KVPoll.WaitingForInput)
    prefix = sender.pop_decode_prefix_len()
    assert prefix == 4 * page_tokens
    own_pages = np.array([10, 11, 12, 13, 14, 15, 16], np.int32)
    suffix = own_pages[prefix // page_tokens:]
    sender.init(len(suffix), 1)  # what prefill.py declares: the suffix's pages
    sender.send(suffix[:2], None)  # a chunk...
    sender.send(suffix[2:], [])    # ...and the last
    assert until(lambda: receiver.poll() == KVPoll.Success and sender.poll() == KVPoll.Success)
    for b in range(4):
        for sp, dp_ in zip(suffix, [20, 21, 22]):
            assert np.array_equal(dkv[b][dp_ * PAGE:(dp_ + 1) * PAGE],
                                  pkv[b][sp * PAGE:(sp + 1) * PAGE])
    sender.clear()
    receiver.clear()
    p.close()
    d.close()


def test_a_peers_abort_between_poll_and_the_next_call_never_raises(bootstrap):
    # Decode aborts while prefill's scheduler, having polled WaitingForInput,
    # goes on to init and send (prefill.py:304, 1179): nothing raises, the
    # calls are counted, poll() and failure_exception() tell.
    p, d, sender, receiver = waiting_room(bootstrap, 10, 1001)
    receiver.abort()
    assert until(lambda: sender.poll() == KVPoll.Failed)
    sender.init(1, 0)
    sender.send(np.array([0], np.int32))
    sender.abort()
    assert p.calls_after_conclusion >= 2
    with pytest.raises(KVTransferError, match="aborted by decode scheduler$"):
        sender.failure_exception()
    with pytest.raises(KVTransferError):
        sender.failure_exception()  # twice: the same answer
    # Prefill aborts while decode's scheduler goes on to send_metadata
    # (decode.py:1175).
    receiver2 = KVReceiver(d, f"127.0.0.1:{bootstrap.port}", 1002)
    receiver2.init(10)
    sender2 = KVSender(p, f"127.0.0.1:{bootstrap.port}", 1002, [0], 0)
    assert until(lambda: receiver2.poll() == KVPoll.WaitingForInput)
    sender2.abort()
    assert until(lambda: receiver2.poll() == KVPoll.Failed)
    receiver2.send_metadata(np.array([0], np.int32), 0, [], 0)
    assert receiver2.conclude_state == KVPoll.Failed
    for x in (sender, receiver, sender2, receiver2):
        x.clear()
        x.clear()  # SGLang clears freely
    # A receiver aborted before init (decode's pending queue gives up on an
    # unreachable prefill) reads Failed from then on.
    orphan = KVReceiver(d, "127.0.0.1:1", 1003)
    orphan.abort()
    assert orphan.poll() == KVPoll.Failed and orphan.conclude_state == KVPoll.Failed
    orphan.init(0)  # too late: nothing happens
    # Calls after the manager closed do nothing either.
    p.close()
    d.close()
    sender2.abort()
    sender2.poll()


def _sglang_src():
    import os
    src = os.environ.get("KVROOM_SGLANG_SRC")
    if not src:
        pytest.skip("KVROOM_SGLANG_SRC is not set (a checkout of SGLang 8905cbd4 or later; "
                    "tests/sglang/README.md)")
    return src
