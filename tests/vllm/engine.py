"""One vLLM engine of the suite, in a process of its own: vLLM's own
``Scheduler`` (with its ``KVCacheManager`` and prefix cache), the connector
made by vLLM's own ``KVConnectorFactory`` in both roles, and a stand-in
model runner that drives the worker connector through vLLM's own
``KVConnectorModelRunnerMixin._get_kv_connector_output`` (bind metadata,
start_load_kv, forward, wait_for_save, get_finished, load errors, clear),
as vLLM's GPU model runner does.

The forward is the stand-in's: per scheduled token it writes known bytes
into every layer's K and V (a function of the prompt prefix up to the token,
the layer, K or V, the head and the lane, so equal prefixes give equal
bytes on both engines) and, before it writes, checks every token the
request attends to holds those bytes: a block that landed wrong, late or
not at all is a mismatch, counted per request.

What is not vLLM's: the model config (its HF config needs transformers,
not in Debian 12: a stand-in with the fields the scheduler reads), and the
VllmConfig is assembled from vLLM's real sub-configs without its
model-verification ``__post_init__``.
"""

import dataclasses
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LAYERS = 4
HEADS = 2
HEAD_SIZE = 8
BLOCK_SIZE = 16


def _vllm_config(role, extra, policy, num_blocks, max_model_len=4096):
    import torch
    from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                             SchedulerConfig, VllmConfig)

    class StandInModelConfig(ModelConfig):
        """The fields of a model config vLLM's scheduler and process groups
        read: a dense, unquantized decoder."""
        is_moe = False
        is_quantized = False

    mc = StandInModelConfig.__new__(StandInModelConfig)
    mc.__dict__.update(model="kvroom-suite", max_model_len=max_model_len,
                       is_encoder_decoder=False, enable_return_routed_experts=False,
                       dtype=torch.float16, skip_tokenizer_init=True, runner_type="generate",
                       architectures=["KvroomSuiteForCausalLM"])
    sc = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=512,
                         max_model_len=max_model_len, enable_chunked_prefill=True,
                         is_encoder_decoder=False, disable_hybrid_kv_cache_manager=True)
    cc = CacheConfig(block_size=BLOCK_SIZE, gpu_memory_utilization=0.9, cache_dtype="auto",
                     enable_prefix_caching=True)
    cc.num_gpu_blocks = num_blocks
    # By name alone: vLLM's load_general_plugins() finds kvroom's entry
    # point (the package's dist-info) and registers the connector.
    by_name = bool(extra.pop("by_name", False))
    if by_name:
        from vllm.plugins import load_general_plugins
        load_general_plugins()
    kt = KVTransferConfig(kv_connector="KvroomConnector",
                          kv_connector_module_path=None if by_name else "kvroom.vllm",
                          kv_role=role, kv_connector_extra_config=extra,
                          kv_load_failure_policy=policy)
    given = {"model_config": mc, "scheduler_config": sc, "cache_config": cc,
             "kv_transfer_config": kt, "device_config": DeviceConfig("cpu")}
    vc = VllmConfig.__new__(VllmConfig)
    for f in dataclasses.fields(VllmConfig):
        if f.name in given:
            v = given[f.name]
        elif f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            v = None
        object.__setattr__(vc, f.name, v)
    return vc


def _init_distributed(vc):
    """vLLM's own process groups, as its CPU worker sets them up (gloo; one
    worker: TP 1, PP 1)."""
    import socket
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (ensure_model_parallel_initialized,
                                  init_distributed_environment)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(vc):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        ensure_model_parallel_initialized(1, 1)


def _hashes(tokens):
    """Per position, a rolling hash of the prompt prefix up to it."""
    out, h = [], 0
    for t in tokens:
        h = (h * 1000003 + int(t) + 1) % 2147483647
        out.append(h)
    return out


class Engine:
    def __init__(self, role, extra, policy="fail", num_blocks=400):
        # The stand-in forward's time per layer (extra "layer_ms", the
        # suite's own key): a model that takes time per layer.
        self.layer_s = float(extra.pop("layer_ms", 0) or 0) / 1000
        import torch
        from vllm.distributed.kv_transfer.kv_transfer_state import (
            ensure_kv_transfer_initialized, get_kv_transfer_group)
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec)
        from vllm.v1.structured_output import StructuredOutputManager
        self.torch = torch
        self.layers = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
        self.vc = _vllm_config(role, extra, policy, num_blocks)
        self.kcc = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
            KVCacheGroupSpec(self.layers, FullAttentionSpec(block_size=BLOCK_SIZE,
                                                            num_kv_heads=HEADS,
                                                            head_size=HEAD_SIZE,
                                                            dtype=torch.float16))])
        self.scheduler = Scheduler(vllm_config=self.vc, kv_cache_config=self.kcc, log_stats=True,
                                   structured_output_manager=StructuredOutputManager(self.vc),
                                   block_size=BLOCK_SIZE)
        _init_distributed(self.vc)
        ensure_kv_transfer_initialized(self.vc, self.kcc)
        self.worker = get_kv_transfer_group()
        # FlashAttention's layout: (2, num_blocks, block_size, heads, head_size).
        self.kv = {n: torch.zeros(2, num_blocks, BLOCK_SIZE, HEADS, HEAD_SIZE,
                                  dtype=torch.float16) for n in self.layers}
        self.worker.register_kv_caches(self.kv)
        self.num_blocks = num_blocks
        self.tables = {}       # req_id -> block ids (the runner's block table)
        self.tokens = {}       # req_id -> all token ids so far
        self.hashes = {}       # req_id -> rolling hashes of tokens
        self.mismatches = {}   # req_id -> mismatching tokens seen
        self.dropped = {}      # req_id -> those in passes vLLM dropped (failed loads)
        self.outputs = {}      # req_id -> dict(tokens, finish, params)
        self.vllm_stats = {}   # the connector's stats as vLLM's mixin collects them
        self.steps = 0

    # -- requests -----------------------------------------------------------

    def add(self, req_id, prompt, max_tokens, params=None):
        from vllm import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.request import Request
        if not getattr(Engine, "_hash_ready", False):
            init_none_hash(sha256)
            Engine._hash_ready = True
        sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        req = Request(request_id=req_id, prompt_token_ids=list(prompt), sampling_params=sp,
                      pooling_params=None,
                      block_hasher=get_request_block_hasher(BLOCK_SIZE, sha256))
        req.kv_transfer_params = dict(params) if params else None
        self.tokens[req_id] = list(prompt)
        self.scheduler.add_request(req)

    def abort(self, req_ids):
        from vllm.v1.request import RequestStatus
        self.scheduler.finish_requests(req_ids, RequestStatus.FINISHED_ABORTED)

    def status(self, req_id):
        r = self.scheduler.requests.get(req_id)
        return None if r is None else r.status.name

    # -- one engine step ------------------------------------------------------

    def step(self):
        from vllm.forward_context import set_forward_context
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin
        so = self.scheduler.schedule()
        self._update_tables(so)
        req_ids, sampled = [], []
        self._pass_mismatches = {}
        with set_forward_context(None, self.vc), \
                KVConnectorModelRunnerMixin._get_kv_connector_output(so) as kvo:
            batch = [(req_id, self._start[req_id], self._start[req_id] + n)
                     for req_id, n in so.num_scheduled_tokens.items()]
            self._forward(batch)
            for req_id, start, end in batch:
                n = end - start
                req_ids.append(req_id)
                r = self.scheduler.requests[req_id]
                # A token is sampled once the prompt is computed.
                done = start + n >= len(r.prompt_token_ids)
                sampled.append([self._next_token(req_id, start + n)] if done else [])
        # A request whose synchronous load failed in this pass attended to
        # blocks that did not land: vLLM drops what the pass computed for it
        # (load errors of this pass), so its mismatches are not counted.
        invalid = set(kvo.invalid_block_ids or ()) if kvo is not None else set()
        for req_id, bad in self._pass_mismatches.items():
            if invalid and invalid & set(self.tables.get(req_id, ())):
                self.dropped[req_id] = self.dropped.get(req_id, 0) + bad
            else:
                self.mismatches[req_id] = self.mismatches.get(req_id, 0) + bad
        out = ModelRunnerOutput(req_ids=req_ids,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=sampled, logprobs=None,
                                prompt_logprobs_dict={}, pooler_output=None,
                                kv_connector_output=kvo)
        if kvo is not None and kvo.kv_connector_stats is not None:
            for k, v in kvo.kv_connector_stats.reduce().items():
                self.vllm_stats[k] = self.vllm_stats.get(k, 0) + v
        results = self.scheduler.update_from_output(so, out)
        for eco in results.values():
            for o in eco.outputs:
                rec = self.outputs.setdefault(o.request_id, {"tokens": [], "finish": None,
                                                             "params": None})
                rec["tokens"].extend(o.new_token_ids)
                self.tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finish_reason is not None:
                    rec["finish"] = str(o.finish_reason)
                    rec["params"] = o.kv_transfer_params
        for req_id in so.finished_req_ids:
            self.tables.pop(req_id, None)
        self.steps += 1
        return so.total_num_scheduled_tokens

    def _update_tables(self, so):
        self._start = {}
        for nr in so.scheduled_new_reqs:
            self.tables[nr.req_id] = list(nr.block_ids[0])
            self._start[nr.req_id] = nr.num_computed_tokens
        c = so.scheduled_cached_reqs
        for i, req_id in enumerate(c.req_ids):
            nb = c.new_block_ids[i]
            if req_id in c.resumed_req_ids:
                self.tables[req_id] = list(nb[0]) if nb else []
            elif nb:
                self.tables.setdefault(req_id, []).extend(nb[0])
            self._start[req_id] = c.num_computed_tokens[i]

    def _expected(self, req_id, lo, hi, layer, kv):
        torch = self.torch
        toks = self.tokens[req_id]
        hs = self.hashes.get(req_id)
        if hs is None or len(hs) < hi:
            hs = self.hashes[req_id] = _hashes(toks[:max(hi, len(toks))])
        h = torch.tensor(hs[lo:hi], dtype=torch.int64).view(-1, 1, 1)
        lane = (torch.arange(HEADS).view(1, -1, 1) * 3 + torch.arange(HEAD_SIZE).view(1, 1, -1))
        return ((h + 7 * layer + 13 * kv + lane) % 2039).to(torch.float16) / 8

    def _slots(self, req_id, lo, hi):
        torch = self.torch
        table = self.tables[req_id]
        pos = torch.arange(lo, hi)
        blocks = torch.tensor(table, dtype=torch.int64)[pos // BLOCK_SIZE]
        return blocks * BLOCK_SIZE + pos % BLOCK_SIZE

    def _forward(self, batch):
        """One pass over every scheduled request, layer by layer as a model
        runs: per layer, vLLM's hooks around the attention
        (wait_for_layer_load before, save_kv_layer after, as its
        maybe_transfer_kv_layer does); each request attends to [0, start)
        (checked) and writes [start, end)."""
        plan = []
        for req_id, start, end in batch:
            if end > len(self.tokens[req_id]):
                raise RuntimeError(f"{req_id}: scheduled past its tokens")
            ctx = self._slots(req_id, 0, start) if start else None
            plan.append((req_id, start, end, ctx, self._slots(req_id, start, end)))
        for li, name in enumerate(self.layers):
            self.worker.wait_for_layer_load(name)
            flat = self.kv[name].view(2, self.num_blocks * BLOCK_SIZE, HEADS, HEAD_SIZE)
            for req_id, start, end, ctx, new in plan:
                for k in (0, 1):
                    if ctx is not None:
                        got = flat[k][ctx]
                        want = self._expected(req_id, 0, start, li, k)
                        bad = int((got != want).any(dim=2).any(dim=1).sum())
                        if bad:
                            self._pass_mismatches[req_id] = (
                                self._pass_mismatches.get(req_id, 0) + bad)
                    flat[k][new] = self._expected(req_id, start, end, li, k)
            if self.layer_s:
                time.sleep(self.layer_s)
            self.worker.save_kv_layer(name, self.kv[name], None)

    def _next_token(self, req_id, pos):
        hs = self.hashes.get(req_id) or _hashes(self.tokens[req_id])
        return 100 + (hs[min(pos, len(hs)) - 1] % 30000)

    # -- checks ----------------------------------------------------------------

    def leaks(self):
        """What vLLM's scheduler and block pool still hold."""
        s = self.scheduler
        pool = s.kv_cache_manager.block_pool
        return {"requests": len(s.requests), "waiting": len(s.waiting),
                "running": len(s.running),
                "free_blocks": pool.free_block_queue.num_free_blocks,
                "blocks": pool.num_gpu_blocks - 1,
                "held_blocks": sum(1 for b in pool.blocks if b.ref_cnt > 0)}

    def close(self):
        self.worker.shutdown()


def serve(conn, role, extra, policy, num_blocks, src):
    """The process's loop: commands from the suite over `conn`; between
    them, the engine steps while it has work."""
    import vllm_env
    vllm_env.install(src)
    try:
        eng = Engine(role, extra, policy, num_blocks)
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", None))
    fatal = None
    paused = False
    while True:
        while conn.poll(0):
            cmd, arg = conn.recv()
            if fatal is not None:
                # An engine step raised: every later command says so.
                conn.send(("error", fatal))
                if cmd == "exit":
                    return
                continue
            try:
                if cmd == "add":
                    for r in arg:
                        eng.add(*r)
                    reply = None
                elif cmd == "abort":
                    eng.abort(arg)
                    reply = None
                elif cmd == "outputs":
                    reply = {k: v for k, v in eng.outputs.items() if v["finish"]}
                elif cmd == "report":
                    reply = {"leaks": eng.leaks(), "mismatches": dict(eng.mismatches),
                             "dropped": dict(eng.dropped),
                             "steps": eng.steps, "outputs": eng.outputs,
                             "stats": eng.worker.totals(), "vllm_stats": dict(eng.vllm_stats),
                             "status": {r: eng.status(r) for r in eng.scheduler.requests}}
                elif cmd == "step":
                    for _ in range(int(arg)):
                        eng.step()
                    reply = None
                elif cmd == "pause":
                    # The engine steps only when told (a test that needs a
                    # request between two given steps).
                    paused = bool(arg)
                    reply = None
                elif cmd == "exit":
                    eng.close()
                    conn.send(("ok", None))
                    return
                else:
                    raise ValueError(f"unknown command {cmd}")
                conn.send(("ok", reply))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
        # vLLM's engine core steps while the scheduler has requests (it
        # sleeps on its input queue otherwise); so does this loop.
        if fatal is None and not paused and eng.scheduler.has_requests():
            try:
                eng.step()
            except BaseException:
                fatal = traceback.format_exc()
        else:
            time.sleep(0.002)
