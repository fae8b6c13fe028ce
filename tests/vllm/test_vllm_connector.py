"""kvroom's vLLM connector under vLLM's own scheduler code: a producer and
a consumer engine (engine.py), each in a process of its own, and this test
as the proxy that carries ``kv_transfer_params`` from one to the other (what
vLLM's toy proxy does). The kvroom bootstrap registry lives in this
process, so a killed engine takes nothing of the deployment's directory
with it.

Needs a checkout of vLLM named by KVROOM_VLLM_SRC (the suite was written
against github:local-inference-lab/vllm 28be48fa9, a fork of vLLM of
2026-05) and the Debian packages of tests/vllm/install-deps; skipped, with
that reason, without them.
"""

import multiprocessing as mp
import os
import signal
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SRC = os.environ.get("KVROOM_VLLM_SRC", "")
if not SRC:
    pytest.skip("KVROOM_VLLM_SRC is not set (a checkout of vLLM, e.g. "
                "github:local-inference-lab/vllm 28be48fa9)", allow_module_level=True)
try:
    import torch  # noqa: F401
except ImportError:
    pytest.skip("python3-torch is not installed (bash tests/vllm/install-deps)",
                allow_module_level=True)

import kvroom  # noqa: E402

import engine  # noqa: E402


@pytest.fixture(autouse=True)
def _no_process_left():
    yield
    for p in mp.active_children():
        p.kill()
        p.join(10)


@pytest.fixture(scope="module")
def registry():
    rt = kvroom.Runtime(network=True)
    port = rt.publish_registry(0, "127.0.0.1")
    yield f"127.0.0.1:{port}"


class Proc:
    """One engine process and its command pipe."""

    def __init__(self, role, registry, policy="fail", num_blocks=400, **extra):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        cfg = {"registry": registry, "transport": "tcp", **extra}
        self.p = ctx.Process(target=engine.serve,
                             args=(child, role, cfg, policy, num_blocks, SRC), daemon=True)
        self.p.start()
        kind, what = self._reply(120)
        if kind != "ready":
            raise RuntimeError(f"{role} engine did not start:\n{what}")

    def _reply(self, timeout):
        if not self.conn.poll(timeout):
            raise TimeoutError("the engine did not answer")
        return self.conn.recv()

    def call(self, cmd, arg=None, timeout=60):
        self.conn.send((cmd, arg))
        kind, what = self._reply(timeout)
        if kind != "ok":
            raise RuntimeError(f"{cmd}: {what}")
        return what

    def wait_finished(self, rids, seconds=60):
        deadline = time.monotonic() + seconds
        while True:
            out = self.call("outputs")
            if all(r in out for r in rids):
                return out
            if time.monotonic() > deadline:
                missing = [r for r in rids if r not in out]
                raise AssertionError(f"not finished in {seconds} s: {missing[:5]} "
                                     f"({len(missing)}); {self.call('report')['status']}")
            time.sleep(0.05)

    def wait_status(self, rids, status, seconds=30, or_finished=False):
        """Until every one of `rids` is in vLLM's `status` (or, with
        `or_finished`, finished already)."""
        deadline = time.monotonic() + seconds
        while True:
            rep = self.call("report")
            st, out = rep["status"], rep["outputs"]
            if all(st.get(r) == status or (or_finished and (out.get(r) or {}).get("finish"))
                   for r in rids):
                return
            assert time.monotonic() < deadline, (status, st)
            time.sleep(0.02)

    def settle(self, seconds=30):
        """Steps until vLLM holds no request and no block (a prefill frees a
        sent request's blocks at its next step); returns the last report."""
        deadline = time.monotonic() + seconds
        while True:
            self.call("step", 1)
            rep = self.call("report")
            lk = rep["leaks"]
            if lk["requests"] == 0 and lk["held_blocks"] == 0:
                return rep
            if time.monotonic() > deadline:
                return rep
            time.sleep(0.05)

    def close(self):
        if self.p.is_alive():
            try:
                self.call("exit", timeout=30)
            except (OSError, EOFError, TimeoutError, RuntimeError):
                pass
            self.p.join(30)
        if self.p.is_alive():
            self.p.kill()


def prompts(n, base=0, length=lambda i: 20 + (i * 37) % 180):
    return [(f"req-{base + i:04d}", [1000 + (base + i) * 7 + j for j in range(length(i))])
            for i in range(n)]


def prefill_all(p, reqs):
    return prefill_all_with(p, reqs, lambda rid: {"do_remote_decode": True})


def prefill_all_with(p, reqs, params_of):
    """The proxy's first leg: each request to the prefill with max_tokens 1;
    returns the kv_transfer_params each answered."""
    p.call("add", [(rid, toks, 1, params_of(rid)) for rid, toks in reqs])
    out = p.wait_finished([rid for rid, _ in reqs])
    return {rid: out[rid]["params"] for rid, _ in reqs}


def assert_clean(rep, who):
    lk = rep["leaks"]
    assert lk["requests"] == 0 and lk["waiting"] == 0 and lk["running"] == 0, (who, rep["status"])
    assert lk["held_blocks"] == 0 and lk["free_blocks"] == lk["blocks"], (who, lk)
    assert not rep["mismatches"], (who, rep["mismatches"])


def assert_loads_failed_by_policy(d, reqs, policy, tokens=3):
    """Every load of `reqs` failed: vLLM's policy ended each ('fail': with
    an error; 'recompute': computed here, byte-exact), every block was a
    load error, and nothing is left held. Returns decode's last report."""
    out = d.wait_finished([r for r, _ in reqs], seconds=90)
    for r, _ in reqs:
        if policy == "fail":
            assert "error" in out[r]["finish"].lower(), out[r]
        else:
            assert out[r]["finish"] == "length" and len(out[r]["tokens"]) == tokens, out[r]
    rep_d = d.settle()
    assert_clean(rep_d, "decode")
    assert rep_d["stats"].get("recv_failed", 0) == len(reqs)
    assert rep_d["stats"].get("load_error_blocks", 0) > 0
    return rep_d


# Both directions of the data plane: the producer writes the consumer's
# blocks (push), or the consumer reads the producer's (pull: NIXL's way).
DIRECTIONS = ["push", "pull"]


def pulls(direction):
    return {"pull": direction == "pull"}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("roles", [("kv_producer", "kv_consumer"), ("kv_both", "kv_both")])
def test_24_requests_byte_exact(registry, roles, direction):
    """vLLM's examples run both instances as kv_both: each worker then
    holds a prefill and a decode rank over the same blocks, and each
    instance is its own kvroom group ('instance')."""
    p = Proc(roles[0], registry, instance=0)
    d = Proc(roles[1], registry, instance=1, **pulls(direction))
    try:
        reqs = prompts(24)
        params = prefill_all(p, reqs)
        assert all(v and v.get("do_remote_prefill") and "kvroom_room" in v
                   for v in params.values()), params
        d.call("add", [(rid, toks, 4, params[rid]) for rid, toks in reqs])
        out = d.wait_finished([rid for rid, _ in reqs])
        assert all(out[rid]["finish"] == "length" and len(out[rid]["tokens"]) == 4
                   for rid, _ in reqs), out
        rep_d = d.settle()
        rep_p = p.settle()
        # Every decode request attended to its whole prompt on its first
        # step: no token differed from the prefill's.
        assert_clean(rep_d, "decode")
        assert_clean(rep_p, "prefill")
        assert rep_d["stats"]["received"] == 24 and rep_p["stats"]["sent"] == 24
    finally:
        d.close()
        p.close()


def test_decode_first_with_a_room_the_proxy_chose(registry):
    """A proxy that names the room and sends the request to both at once:
    decode allocates and waits while the prefill computes, then the blocks
    land, byte-exact (kvroom's rooms do not care which side comes first).
    Both engines name the connector alone, "KvroomConnector": vLLM's plugin
    loader registers it from kvroom's entry point."""
    p = Proc("kv_producer", registry, by_name=True)
    d = Proc("kv_consumer", registry, by_name=True)
    try:
        reqs = prompts(12, base=500)
        rooms = {rid: 7_000_000 + i for i, (rid, _) in enumerate(reqs)}
        d.call("add", [(rid, toks, 3, {"do_remote_prefill": True, "kvroom_room": rooms[rid]})
                       for rid, toks in reqs])
        params = prefill_all_with(p, reqs, lambda rid: {"do_remote_decode": True,
                                                      "kvroom_room": rooms[rid]})
        assert all(params[rid]["kvroom_room"] == rooms[rid] for rid, _ in reqs)
        out = d.wait_finished([rid for rid, _ in reqs])
        assert all(out[rid]["finish"] == "length" for rid, _ in reqs), out
        rep_d = d.settle()
        assert_clean(rep_d, "decode")
        assert_clean(p.settle(), "prefill")
        # vLLM's own stats path (the mixin's get_kv_connector_stats, summed
        # per step) counted every room.
        assert rep_d["vllm_stats"].get("received") == len(reqs)
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_prefix_hit_on_decode_moves_only_the_missing_blocks(registry, direction):
    """Decode holds a prompt's first blocks in its prefix cache (an earlier
    request's): the prefill sends (or decode reads) only the blocks after
    them, and the request attends to both, byte-exact."""
    p = Proc("kv_producer", registry)
    d = Proc("kv_consumer", registry, **pulls(direction))
    try:
        (rid, base), = prompts(1, base=100, length=lambda i: 160)
        params = prefill_all(p, [(rid, base)])
        d.call("add", [(rid, base, 2, params[rid])])
        d.wait_finished([rid])
        d.settle()
        sent_first = p.settle()["stats"]["blocks_sent"]
        assert sent_first == 10  # 160 tokens, 16 per block
        # Requests sharing k full blocks of it, then a tail of their own.
        hits = [1, 3, 5, 8]
        reqs = [(f"req-hit{k}", base[:16 * k] + [50000 + 100 * k + j for j in range(40)])
                for k in hits]
        params = prefill_all(p, reqs)
        d.call("add", [(r, toks, 2, params[r]) for r, toks in reqs])
        d.wait_finished([r for r, _ in reqs])
        rep_d = d.settle()
        rep_p = p.settle()
        assert_clean(rep_d, "decode")
        assert_clean(rep_p, "prefill")
        want = sum(-(-len(toks) // 16) - k for k, (_, toks) in zip(hits, reqs))
        assert rep_p["stats"]["blocks_sent"] - sent_first == want
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_aborts_at_every_stage(registry, direction):
    """Prefill aborts a request while it is prefilling (no room, blocks
    back); decode aborts one before it was scheduled (its prefill lets go at
    once, not at its hold) and one waiting for a prefill that never comes
    (decode frees its blocks, nothing lands later)."""
    p = Proc("kv_producer", registry, hold_ms=120000)
    d = Proc("kv_consumer", registry, **pulls(direction))
    try:
        # Prefill, mid-prefill: 3000 tokens take six steps of 512; the
        # engine takes two, then the abort comes.
        p.call("pause", True)
        p.call("add", [("req-long", [7] * 3000, 1, {"do_remote_decode": True})])
        p.call("step", 2)
        assert p.call("report")["status"]["req-long"] == "RUNNING"
        p.call("abort", ["req-long"])
        p.call("pause", False)
        rep_p = p.settle(seconds=30)
        assert_clean(rep_p, "prefill")
        assert rep_p["stats"].get("blocks_sent", 0) == 0 and "req-long" not in rep_p["outputs"]
        # Decode, before it was scheduled: the prefill frees at once.
        reqs = prompts(3, base=200)
        params = prefill_all(p, reqs)
        rep = p.call("report")
        assert rep["leaks"]["held_blocks"] > 0  # held for the decodes
        # Added and aborted in one command: no step between them.
        d.conn.send(("add", [(r, t, 4, params[r]) for r, t in reqs]))
        d.conn.send(("abort", [r for r, _ in reqs]))
        assert d._reply(60)[0] == "ok" and d._reply(60)[0] == "ok"
        rep_p = p.settle(seconds=30)
        assert_clean(rep_p, "prefill")
        # Decode, waiting for a prefill that never comes.
        ghost = [("req-ghost", list(range(300, 400)))]
        d.call("add", [(r, t, 4, {"do_remote_prefill": True, "kvroom_room": 987654321})
                       for r, t in ghost])
        d.wait_status(["req-ghost"], "WAITING_FOR_REMOTE_KVS")
        d.call("abort", ["req-ghost"])
        rep_d = d.settle(seconds=30)
        assert_clean(rep_d, "decode")
        assert rep_d["stats"].get("received", 0) == 0
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_producer_sigkilled_with_requests_in_flight(registry, policy, direction):
    """The producer is stopped before decode asks for its rooms, then
    SIGKILLed: decode's loads fail (every block reported), and vLLM's
    policy decides: 'fail' ends the requests with an error, 'recompute'
    computes them locally, byte-exact. Nothing hangs, nothing leaks."""
    p = Proc("kv_producer", registry)
    d = Proc("kv_consumer", registry, policy=policy, **pulls(direction))
    try:
        reqs = prompts(8, base=300)
        params = prefill_all(p, reqs)
        os.kill(p.p.pid, signal.SIGSTOP)
        d.call("add", [(r, t, 3, params[r]) for r, t in reqs])
        # Each load is under way (or failed already: a producer stopped past
        # the connection timeout is lost to the registry before its kill).
        d.wait_status([r for r, _ in reqs], "WAITING_FOR_REMOTE_KVS", or_finished=True)
        os.kill(p.p.pid, signal.SIGKILL)
        assert_loads_failed_by_policy(d, reqs, policy)
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_prefill_hold_expires(registry, direction):
    """No decode comes: the prefill holds the blocks for its hold (a pull's
    read lease), then frees them; a decode that comes later fails its load
    cleanly, and reads nothing of them."""
    p = Proc("kv_producer", registry, hold_ms=3000)
    d = Proc("kv_consumer", registry, **pulls(direction))
    try:
        reqs = prompts(4, base=400)
        params = prefill_all(p, reqs)
        assert p.call("report")["leaks"]["held_blocks"] > 0
        rep_p = p.settle(seconds=60)
        assert_clean(rep_p, "prefill")
        assert rep_p["stats"].get("send_failed", 0) == len(reqs)
        d.call("add", [(r, t, 2, params[r]) for r, t in reqs])
        out = d.wait_finished([r for r, _ in reqs], seconds=90)
        assert all("error" in out[r]["finish"].lower() for r, _ in reqs), out
        assert_clean(d.settle(), "decode")
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_layer_by_layer(registry, direction):
    """The producer sends each layer as its forward pass computes it
    (save_kv_layer, 'layerwise'): with the proxy naming the room and the
    consumer asking first (its destination is there during the pass), then
    in the usual order (the layers wait in the room for the destination).
    Byte-exact either way, every layer a chunk of its own, nothing left
    held."""
    p = Proc("kv_producer", registry, layerwise=True, layer_ms=2)
    d = Proc("kv_consumer", registry, **pulls(direction))
    try:
        first = prompts(8, base=700)
        rooms = {rid: 8_000_000 + i for i, (rid, _) in enumerate(first)}
        d.call("add", [(rid, toks, 3, {"do_remote_prefill": True, "kvroom_room": rooms[rid]})
                       for rid, toks in first])
        d.wait_status([rid for rid, _ in first], "WAITING_FOR_REMOTE_KVS")
        params = prefill_all_with(p, first, lambda rid: {"do_remote_decode": True,
                                                       "kvroom_room": rooms[rid]})
        assert all(params[rid]["kvroom_room"] == rooms[rid] for rid, _ in first)
        d.wait_finished([rid for rid, _ in first])
        then = prompts(8, base=800)
        params = prefill_all(p, then)
        d.call("add", [(rid, toks, 3, params[rid]) for rid, toks in then])
        out = d.wait_finished([rid for rid, _ in then])
        assert all(out[rid]["finish"] == "length" for rid, _ in then), out
        rep_d = d.settle()
        rep_p = p.settle()
        assert_clean(rep_d, "decode")
        assert_clean(rep_p, "prefill")
        assert rep_p["stats"]["sent"] == 16 and rep_d["stats"]["received"] == 16
        assert rep_p["stats"]["layer_chunks"] == 16 * engine.LAYERS
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layerwise", [True, False], ids=["sent-by-layer", "sent-whole"])
def test_layer_by_layer_load(registry, direction, layerwise):
    """The consumer loads synchronously, layer by layer ('layer_load'): each
    request runs in the step its blocks were allocated, and every layer's
    attention waits only for that layer (the stand-in forward checks each
    layer's bytes right after wait_for_layer_load, so a layer read before
    it landed is a mismatch). Then requests sharing blocks with an earlier
    one: only the blocks after the hit move."""
    p = Proc("kv_producer", registry, layerwise=layerwise)
    d = Proc("kv_consumer", registry, layer_load=True, **pulls(direction))
    try:
        reqs = prompts(24, base=900)
        params = prefill_all(p, reqs)
        d.call("add", [(rid, toks, 4, params[rid]) for rid, toks in reqs])
        out = d.wait_finished([rid for rid, _ in reqs])
        assert all(out[rid]["finish"] == "length" and len(out[rid]["tokens"]) == 4
                   for rid, _ in reqs), out
        rep_d = d.settle()
        sent_first = p.settle()["stats"]["blocks_sent"]
        assert_clean(rep_d, "decode")
        assert rep_d["stats"]["received"] == 24 and rep_d["stats"]["recv_failed"] == 0
        (_, base), = [r for r in reqs if len(r[1]) >= 64][:1]
        hits = [1, 3]
        more = [(f"req-lhit{k}", base[:16 * k] + [60000 + 100 * k + j for j in range(40)])
                for k in hits]
        params = prefill_all(p, more)
        d.call("add", [(r, toks, 2, params[r]) for r, toks in more])
        d.wait_finished([r for r, _ in more])
        rep_d = d.settle()
        rep_p = p.settle()
        assert_clean(rep_d, "decode")
        assert_clean(rep_p, "prefill")
        want = sum(-(-len(toks) // 16) - k for k, (_, toks) in zip(hits, more))
        assert rep_p["stats"]["blocks_sent"] - sent_first == want
    finally:
        d.close()
        p.close()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("policy", ["fail", "recompute"])
def test_producer_sigkilled_under_a_layer_by_layer_load(registry, policy, direction):
    """Loading layer by layer, decode's forward pass waits in
    wait_for_layer_load for a stopped producer; it is SIGKILLed: the loads
    fail within the pass (every block a load error of it), vLLM drops what
    the pass computed from them and its policy decides. Nothing hangs."""
    p = Proc("kv_producer", registry, layerwise=True)
    d = Proc("kv_consumer", registry, policy=policy, layer_load=True, **pulls(direction))
    try:
        reqs = prompts(6, base=950)
        params = prefill_all(p, reqs)
        os.kill(p.p.pid, signal.SIGSTOP)
        d.call("add", [(r, t, 3, params[r]) for r, t in reqs])
        # The engine is inside the pass now, waiting for layer 0.
        time.sleep(1.0)
        os.kill(p.p.pid, signal.SIGKILL)
        rep_d = assert_loads_failed_by_policy(d, reqs, policy)
        # The failing pass did run over blocks that never landed, and vLLM
        # dropped what it computed for each of them.
        assert set(rep_d["dropped"]) == {r for r, _ in reqs}, rep_d["dropped"]
    finally:
        d.close()
        p.close()


def test_a_layer_that_never_lands_is_aborted_at_layer_wait(registry):
    """A decode that asks for a room its prefill will never fill (a proxy's
    bug) while loading layer by layer: its pass would wait for the room's
    whole wait; 'layer_wait_ms' aborts the load instead, which fails, and
    the engine goes on ('recompute': the request is computed here)."""
    p = Proc("kv_producer", registry)
    d = Proc("kv_consumer", registry, policy="recompute", layer_load=True, layer_wait_ms=1500)
    try:
        ghost = [("req-lghost", list(range(500, 600)))]
        d.call("add", [(r, t, 2, {"do_remote_prefill": True, "kvroom_room": 987654399})
                       for r, t in ghost])
        out = d.wait_finished([r for r, _ in ghost], seconds=60)
        assert out["req-lghost"]["finish"] == "length", out
        rep_d = d.settle()
        assert_clean(rep_d, "decode")
        assert rep_d["stats"].get("recv_failed", 0) == 1
        assert_clean(p.settle(), "prefill")
    finally:
        d.close()
        p.close()
