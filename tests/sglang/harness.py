"""SGLang's own prefill and decode pieces on CPU pools, for the conformance
suite: SGLang's MHATokenToKVPool, ReqToTokenPool, MetadataBuffers and
ReqToMetadataIdxAllocator, SGLang's PrefillBootstrapQueue (which builds the
KVManager through get_kv_class) and its scheduler methods called on a
scheduler stand-in that holds what those methods read. SGLang's code is
imported from KVROOM_SGLANG_SRC and runs unmodified; the stand-ins replace
only the model and the GPU.
"""

import os
import sys
import types
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sglang_env  # noqa: E402

SRC = os.environ.get("KVROOM_SGLANG_SRC", "")
if SRC:
    sglang_env.install(SRC)

PAGE = 16        # tokens per page
MODEL_HEADS = 4  # the model's KV heads; a rank of TP t holds MODEL_HEADS // t
HEADS = 2        # KV heads per rank at TP 2
HEAD_DIM = 64
KV_LORA_RANK = 32   # MLA: the latent and rope dims of one token's cache
QK_ROPE_DIM = 16
LAYERS = 2
# A hybrid model: full attention on even layers, Mamba on odd ones.
ATTENTION_LAYERS = [0, 2]
MAMBA_LAYERS = [1, 3]
# A sliding-window model (Gemma/GPT-OSS style): full attention on even
# layers, a window of WINDOW tokens on odd ones.
SWA_LAYERS = [1, 3]
WINDOW = 40
TOKENS = 1024    # KV pool size in tokens
SLOTS = 32       # metadata slots


def gloo_group(rank=0, world=1, port=None):
    """A real gloo process group (SGLang's poll_and_all_reduce runs over it)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        port = port or _free_port()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    return dist.new_group(backend="gloo")


def gloo_groups(tp_rank, tp_size, pp_rank, pp_size, port):
    """A pipeline-parallel prefill's groups over one gloo world of its
    TP x PP ranks: this stage's TP group (SGLang's poll_and_all_reduce) and
    this TP rank's PP group (the stages' consensus). Every rank creates
    every group, in one order, as torch.distributed requires."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=pp_rank * tp_size + tp_rank, world_size=tp_size * pp_size)
    tp_groups = [dist.new_group([s * tp_size + t for t in range(tp_size)], backend="gloo")
                 for s in range(pp_size)]
    pp_groups = [dist.new_group([s * tp_size + t for s in range(pp_size)], backend="gloo")
                 for t in range(tp_size)]
    return tp_groups[pp_rank], pp_groups[tp_rank]


def close_groups():
    """Ends this process's torch.distributed groups, as SGLang's own
    shutdown does (parallel_state.destroy_distributed_environment). Left to
    interpreter exit, a gloo worker thread may drop the last reference to
    its tensor while Python finalizes: it takes the GIL, is ended by
    pthread_exit inside torch's noexcept run loop, and the process aborts
    ("terminate called without an active exception"; core dump, thread
    c10d::ProcessGroupGloo::runLoop)."""
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_args(mode, bootstrap_port, extra=()):
    """SGLang's ServerArgs from SGLang's own parser, as a user's launch line
    makes it."""
    import argparse
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "dummy", "--disaggregation-mode", mode,
                              "--disaggregation-transfer-backend", "kvroom",
                              "--disaggregation-bootstrap-port", str(bootstrap_port),
                              "--host", "127.0.0.1", "--page-size", str(PAGE), *extra])
    return ServerArgs.from_cli_args(args)


def heads_per_rank(tp_size):
    """The KV heads one rank of attention TP `tp_size` holds (SGLang splits
    the model's heads; beyond them it replicates)."""
    return max(1, MODEL_HEADS // int(tp_size))


def kv_buffers(pool):
    """A pool's KV buffers in SGLang's order (MHA: K of every layer, then V;
    MLA: one latent buffer per layer; a hybrid pool: its full-attention
    layers')."""
    pool = getattr(pool, "full_kv_pool", pool)
    if hasattr(pool, "kv_buffer"):
        return list(pool.kv_buffer)
    return list(pool.k_buffer) + list(pool.v_buffer)


def mamba_params():
    """A small Mamba2 model's state (Qwen3-Next/Nemotron-H style): a conv and
    a temporal (SSM) state per Mamba layer, per request slot."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=1,
                                    num_heads=4, head_dim=16, state_size=8, conv_kernel=4)
    return Mamba2CacheParams(shape=shape, layers=MAMBA_LAYERS)


def slot_bytes(ptr, item):
    """A writable numpy view of `item` bytes at `ptr` (one state slot)."""
    import ctypes
    import numpy as np
    return np.ctypeslib.as_array((ctypes.c_uint8 * item).from_address(ptr))


class Side:
    """One scheduler's pools and the stand-in scheduler SGLang's methods
    run on. `tp_size`, `tp_rank`: its attention TP place (its heads are
    heads [tp_rank * h, (tp_rank + 1) * h) of the model's); `mla`: SGLang's
    MLATokenToKVPool (one latent buffer per layer, the same on every rank);
    `mamba`: a hybrid model (SGLang's HybridReqToTokenPool, or the decode's
    HybridMambaDecodeReqToTokenPool, with a Mamba state slot per request,
    beside HybridLinearKVPool for the full-attention layers)."""

    def __init__(self, mode, sargs, group, seed=None, tokens=None, tp_size=1, tp_rank=0,
                 mla=False, mamba=False, swa=False, pp_size=1, pp_rank=0):
        import torch
        from sglang.srt.disaggregation.utils import (MetadataBuffers,
                                                      ReqToMetadataIdxAllocator)
        from sglang.srt.mem_cache.memory_pool import (MHATokenToKVPool, MLATokenToKVPool,
                                                      ReqToTokenPool)
        self.tokens = tokens or TOKENS
        self.mla = mla
        self.mamba = mamba
        self.swa = swa
        # A pipeline stage holds layers [first_layer, first_layer + layers).
        self.layers = LAYERS // int(pp_size)
        self.first_layer = int(pp_rank) * self.layers
        self.by_layer = False  # digests by (head, layer): set where a side has stages
        self.tp_size, self.tp_rank = int(tp_size), int(tp_rank)
        self.heads = 1 if mla else heads_per_rank(tp_size)
        if mamba:
            self.req_to_token = self._hybrid_req_pool(mode)
            from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool
            self.kv_pool = HybridLinearKVPool(
                size=self.tokens, dtype=torch.bfloat16, page_size=PAGE, head_num=self.heads,
                head_dim=HEAD_DIM, full_attention_layer_ids=ATTENTION_LAYERS, device="cpu",
                mamba_pool=self.req_to_token.mamba_pool)
        elif swa:
            from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
            self.kv_pool = SWAKVPool(
                size=self.tokens, size_swa=self.tokens, page_size=PAGE, dtype=torch.bfloat16,
                head_num=self.heads, head_dim=HEAD_DIM, swa_attention_layer_ids=SWA_LAYERS,
                full_attention_layer_ids=ATTENTION_LAYERS, device="cpu")
        elif mla:
            self.kv_pool = MLATokenToKVPool(size=self.tokens, page_size=PAGE,
                                            dtype=torch.bfloat16, kv_lora_rank=KV_LORA_RANK,
                                            qk_rope_head_dim=QK_ROPE_DIM, layer_num=LAYERS,
                                            device="cpu", enable_memory_saver=False)
        else:
            self.kv_pool = MHATokenToKVPool(size=self.tokens, page_size=PAGE,
                                            dtype=torch.bfloat16, head_num=self.heads,
                                            head_dim=HEAD_DIM, layer_num=self.layers,
                                            device="cpu", enable_memory_saver=False,
                                            start_layer=self.first_layer,
                                            end_layer=self.first_layer + self.layers - 1)
        if seed is not None:
            # Per model head, so that every rank holding a head holds the
            # same bytes of it (the MLA latent: one "head" on every rank).
            pools = [(0, kv_buffers(self.kv_pool))]
            if swa:  # the window layers' own pool, seeded apart
                pools.append((500, kv_buffers(self.kv_pool.swa_kv_pool)))
            for base, bufs in pools:
                for b, buf in enumerate(bufs):
                    # By the model's buffer (a stage's local buffer b is K
                    # or V of layer first_layer + b % layers).
                    if not mla and self.layers != LAYERS:
                        b = (b // self.layers) * LAYERS + self.first_layer + b % self.layers
                    for h in range(self.heads):
                        g = torch.Generator().manual_seed(
                            seed * 1000 + base + b * 64 + self.first_head() + h)
                        part = buf[:, h]
                        part.view(torch.int16).copy_(torch.randint(
                            -2**15, 2**15 - 1, part.shape, generator=g, dtype=torch.int16))
        if not mamba:
            self.req_to_token = ReqToTokenPool(size=SLOTS, max_context_len=TOKENS,
                                               device="cpu", enable_memory_saver=False)
        self.metadata = MetadataBuffers(SLOTS, hidden_size=HEAD_DIM,
                                        hidden_states_dtype=torch.float32)
        self.metadata_alloc = ReqToMetadataIdxAllocator(SLOTS)
        if swa:
            from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
            self.allocator = SWATokenToKVPoolAllocator(self.tokens, self.tokens, PAGE,
                                                       torch.bfloat16, "cpu", self.kv_pool,
                                                       need_sort=False)
        else:
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
            self.allocator = PagedTokenToKVPoolAllocator(self.tokens, PAGE, torch.bfloat16,
                                                         "cpu", self.kv_pool, need_sort=False)
        from sglang.srt.runtime_context import get_context
        get_context().set_server_args(sargs)
        self.group = group
        self.sargs = sargs
        self.scheduler = types.SimpleNamespace(
            server_args=sargs,
            # SGLang passes its GPU id; its decode reads the PP place as it
            # builds its queues (after 2026-07).
            ps=types.SimpleNamespace(dp_rank=0, gpu_id=0, pp_size=1, pp_rank=0),
            model_config=types.SimpleNamespace(
                get_total_num_kv_heads=lambda: MODEL_HEADS,
                num_hidden_layers=len(ATTENTION_LAYERS + MAMBA_LAYERS) if mamba else LAYERS),
            tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(
                effective_max_total_num_tokens=self.tokens,
                swa_max_total_num_tokens=self.tokens,
                kv_cache_dtype_str="bfloat16"),  # read by SGLang after 2026-07
                is_hybrid_swa=swa),
            # attention CP of size 1: SGLang all-reduces over it too
            attn_cp_cpu_group=group, attn_tp_cpu_group=group,
            req_to_token_pool=self.req_to_token,
            token_to_kv_pool_allocator=self.allocator,
            disagg_metadata_buffers=self.metadata,
            enable_hisparse=False,
            sliding_window_size=WINDOW if swa else None,
        )

    def _hybrid_req_pool(self, mode):
        if mode == "decode":
            from sglang.srt.disaggregation.decode import HybridMambaDecodeReqToTokenPool
            return HybridMambaDecodeReqToTokenPool(
                size=SLOTS, max_context_len=TOKENS, device="cpu", enable_memory_saver=False,
                cache_params=mamba_params(), mamba_layer_ids=MAMBA_LAYERS,
                speculative_num_draft_tokens=None, enable_mamba_extra_buffer=False,
                pre_alloc_size=0, enable_overlap_schedule=False)
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
        pool = HybridReqToTokenPool(
            size=SLOTS, mamba_size=SLOTS + 3, mamba_spec_state_size=SLOTS,
            max_context_len=TOKENS, device="cpu", enable_memory_saver=False,
            cache_params=mamba_params(), mamba_layer_ids=MAMBA_LAYERS,
            enable_mamba_extra_buffer=False, enable_overlap_schedule=False)
        # Slots held by other requests: a request's slot differs between
        # prefill and decode, as it does in a running server.
        pool.mamba_allocator.alloc(3)
        return pool

    def state_slots(self, req):
        """A request's Mamba state: one byte view per state buffer (conv and
        temporal of every Mamba layer) of its slot, in SGLang's buffer order
        (what kvroom registers from ``get_state_buf_infos``)."""
        idx = int(self.req_to_token.req_index_to_mamba_index_mapping[req.req_pool_idx])
        ptrs, _, items = self.kv_pool.get_state_buf_infos()
        return [slot_bytes(p + idx * i, i) for p, i in zip(ptrs, items)]

    def seed_state(self, req, seed):
        """Fills the request's state slot with bytes only it has: what the
        prefill's forward pass left there."""
        import numpy as np
        rng = np.random.default_rng(seed)
        for view in self.state_slots(req):
            view[:] = rng.integers(0, 256, view.size, dtype=np.uint8)

    def chunk_cache(self):
        """SGLang's prefix cache when the radix cache is off: ChunkCache,
        or SWAChunkCache for a sliding-window model."""
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.chunk_cache import ChunkCache, SWAChunkCache
        params = CacheInitParams(disable=True, req_to_token_pool=self.req_to_token,
                                 token_to_kv_pool_allocator=self.allocator, page_size=PAGE,
                                 sliding_window_size=WINDOW if self.swa else None)
        return SWAChunkCache(params) if self.swa else ChunkCache(params)

    def window_locs(self, req, seq_len):
        """The SWA pool locations of a request's window, as SGLang's
        send_kv_chunk and send_metadata name them: the last WINDOW tokens
        from a page boundary."""
        start = (max(0, seq_len - WINDOW) // PAGE) * PAGE
        full = self.req_to_token.req_to_token[req.req_pool_idx, start:seq_len]
        return self.allocator.translate_loc_from_full_to_swa(full.long()).long()

    def first_head(self):
        """The model head this rank's local head 0 is."""
        if self.mla:
            return 0
        return (self.tp_rank * self.heads) % MODEL_HEADS

    def place(self, req, n_tokens):
        """What SGLang's extend allocation leaves on a prefill request: a
        request slot, whole pages from SGLang's paged allocator for its
        tokens, their locations in req_to_token, and its KV record."""
        import torch
        from sglang.srt.managers.schedule_batch import ReqKvInfo
        self.req_to_token.alloc([req])  # sets req.req_pool_idx
        if self.swa:
            # SGLang's paged SWA allocator allocates by extend only (full and
            # window locations together).
            locs = self.allocator.alloc_extend(
                prefix_lens=torch.tensor([0]), prefix_lens_cpu=torch.tensor([0]),
                seq_lens=torch.tensor([n_tokens]), seq_lens_cpu=torch.tensor([n_tokens]),
                last_loc=torch.tensor([-1]), extend_num_tokens=n_tokens)
            assert locs is not None, "the prefill pool is too small for the scenario"
            self.req_to_token.req_to_token[req.req_pool_idx, :n_tokens] = locs.to(torch.int32)
            req.kv = ReqKvInfo(kv_allocated_len=n_tokens, swa_evicted_seqlen=0)
            req.kv_committed_len = n_tokens
            return locs
        pages = (n_tokens + PAGE - 1) // PAGE
        locs = self.allocator.alloc(pages * PAGE)
        assert locs is not None, "the prefill pool is too small for the scenario"
        self.req_to_token.req_to_token[req.req_pool_idx, :n_tokens] = locs[:n_tokens].to(
            torch.int32)
        if n_tokens < pages * PAGE:  # the rest of the last page: its own
            self.allocator.free(locs[n_tokens:])
        req.kv = ReqKvInfo(kv_allocated_len=n_tokens, swa_evicted_seqlen=0)
        req.kv_committed_len = n_tokens
        return locs[:n_tokens]


def make_req(rid, n_tokens, room, bootstrap_port, mode):
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams
    req = Req(rid, "", array("q", range(1, n_tokens + 1)), SamplingParams(max_new_tokens=1),
              bootstrap_host="127.0.0.1", bootstrap_port=bootstrap_port, bootstrap_room=room,
              disagg_mode=mode)
    return req


def decode_side(sargs, group, bootstrap_port, radix=False, tokens=None, tp_rank=0, tp_size=1,
                mla=False, dp_rank=0, dp_size=1, mamba=False, swa=False):
    """SGLang's DecodePreallocQueue and DecodeTransferQueue over its real
    paged allocator and prefix cache (ChunkCache, or RadixCache when the
    decode radix cache is on), on a scheduler stand-in."""
    import torch
    from sglang.srt.disaggregation.decode import DecodePreallocQueue, DecodeTransferQueue
    from sglang.srt.disaggregation.utils import TransferBackend
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.runtime_context import get_parallel
    get_parallel()._overrides.update(attn_tp_size=tp_size, attn_tp_rank=tp_rank,
                                     attn_cp_size=1, attn_cp_rank=0, attn_dp_size=dp_size,
                                     attn_dp_rank=dp_rank)
    side = Side("decode", sargs, group, tokens=tokens, tp_size=tp_size, tp_rank=tp_rank,
                mla=mla, mamba=mamba, swa=swa)
    alloc = side.allocator
    params = CacheInitParams(disable=not radix, req_to_token_pool=side.req_to_token,
                             token_to_kv_pool_allocator=alloc, page_size=PAGE)
    if radix:
        from sglang.srt.mem_cache.radix_cache import RadixCache
        tree = RadixCache(params)
    else:
        tree = side.chunk_cache()
    s = side.scheduler
    s.ps.dp_rank = dp_rank  # the KVManager reads it as it is built
    s.token_to_kv_pool_allocator = alloc
    s.tree_cache = tree
    s.running_batch = types.SimpleNamespace(reqs=[])
    s.waiting_queue = []
    s.enable_priority_scheduling = False
    s.last_batch = None
    s.enable_decode_hicache = False
    s.spec_algorithm = types.SimpleNamespace(is_none=lambda: True)
    side.allocator = alloc
    side.tree = tree
    side.transfer = DecodeTransferQueue(group, side.metadata_alloc, 0, side.metadata, s, tree)
    side.prealloc = DecodePreallocQueue(
        side.req_to_token, alloc, None, side.metadata_alloc, side.metadata, s, side.transfer,
        tree, group, dp_rank * tp_size + tp_rank, dp_size * tp_size, dp_size, 0, bootstrap_port,
        side.tokens, 0, 0,
        TransferBackend("kvroom"))
    s.disagg_decode_transfer_queue = side.transfer
    s.disagg_decode_prealloc_queue = side.prealloc
    return side


def seed_radix_prefix(side, n_tokens):
    """Puts a cached prefix of `n_tokens` (whole pages) into the decode's
    RadixCache, as an earlier request would have left it: returns its token
    ids. Requests whose prompt starts with them hit it."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    ids = array("q", range(90_000, 90_000 + n_tokens))
    locs = side.allocator.alloc(n_tokens)
    side.tree.insert(InsertParams(key=RadixKey(ids), value=locs.to(torch.int64)))
    side.prefix_locs = locs
    return ids


def release_radix_prefix(side):
    """Evicts what the tree holds, so the leak check sees every page."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    side.tree.evict(EvictParams(num_tokens=side.tokens))
