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
    p.call("add", [(rid, toks, 1, {"do_remote_decode": True}) for rid, toks in reqs])
    out = p.wait_finished([rid for rid, _ in reqs])
    return {rid: out[rid]["params"] for rid, _ in reqs}


def assert_clean(rep, who):
    lk = rep["leaks"]
    assert lk["requests"] == 0 and lk["waiting"] == 0 and lk["running"] == 0, (who, rep["status"])
    assert lk["held_blocks"] == 0 and lk["free_blocks"] == lk["blocks"], (who, lk)
    assert not rep["mismatches"], (who, rep["mismatches"])


def test_push_24_requests_byte_exact(registry):
    p = Proc("kv_producer", registry)
    d = Proc("kv_consumer", registry)
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
