"""The connector class vLLM loads: its calls, carried out by the scheduler
role (`scheduler_side`) and the worker role (`worker_side`); see the
package's docstring."""


from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional, Set, Tuple

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                KVConnectorMetadata,
                                                                KVConnectorRole)

from .. import Runtime, _process
from .scheduler_side import KvroomMetadata, KvroomScheduler
from .worker_side import FinishedTracker, RoomKeeper, kv_buffers, layer_buffers

logger = logging.getLogger("kvroom.vllm")


DEFAULT_HOLD_MS = 480_000
DEFAULT_WAIT_MS = 60_000
DEFAULT_LAYER_WAIT_MS = 30_000


class KvroomConnectorMetadata(KvroomMetadata, KVConnectorMetadata):
    """vLLM's connector metadata type, carrying kvroom's plan of a step."""


def _flag(value, key: str = "pull") -> bool:
    """A boolean from the extra config (JSON true, or a string from a CLI)."""
    if isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"kv_connector_extra_config: {key!r} must be true or false, "
                         f"got {value!r}")
    return bool(value)


def _parallel(vllm_config, extra) -> Tuple[int, int, int, int]:
    """(tp_rank, tp_size, group, dp_size) of this worker. ``group`` is the
    kvroom DP group of this engine on its side: every vLLM instance of a
    side needs its own (``instance`` in the extra config: 0, 1, ... per
    instance of a xPyD deployment; each of an instance's DP ranks is one
    group after it)."""
    pc = vllm_config.parallel_config
    tp_size = int(getattr(pc, "tensor_parallel_size", 1) or 1)
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        tp_rank = int(get_tensor_model_parallel_rank())
    except Exception:  # no TP group: one worker per engine
        tp_rank = 0
    dp_rank = int(getattr(pc, "data_parallel_rank", 0) or 0)
    dp_size = int(getattr(pc, "data_parallel_size", 1) or 1)
    instance = int(extra.get("instance", 0) or 0)
    if instance < 0:
        raise ValueError(f"kvroom: instance must be 0 or more, got {instance}")
    return tp_rank, tp_size, instance * dp_size + dp_rank, dp_size


def _endpoint(text: str) -> Tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"kvroom: registry must be host:port, got {text!r}")
    return host, int(port)


class KvroomConnector(KVConnectorBase_V1):

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        self._extra: Dict[str, Any] = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self._kv_role = getattr(ktc, "kv_role", None) or "kv_both"
        self._block_size = int(vllm_config.cache_config.block_size)
        tp_rank, tp_size, dp_rank, dp_size = _parallel(vllm_config, self._extra)
        self._parallel = (tp_rank, tp_size, dp_rank, dp_size)
        self._scheduler: Optional[KvroomScheduler] = None
        self._keeper: Optional[RoomKeeper] = None
        self._tracker = FinishedTracker()
        self._stats_seen: Dict[str, int] = {}
        self._saving_now = False
        # This step's synchronous loads (layer by layer), and how long a
        # layer may take to land before its load is aborted.
        self._step_loads = []
        self._layer_wait_s = float(self._extra.get("layer_wait_ms", DEFAULT_LAYER_WAIT_MS)) / 1000
        if self._layer_wait_s <= 0:
            raise ValueError(f"kvroom: layer_wait_ms must be positive, got "
                             f"{self._extra.get('layer_wait_ms')!r}")
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = KvroomScheduler(
                self._block_size, dp_rank,
                layerwise=_flag(self._extra.get("layerwise", False), "layerwise"),
                layer_load=_flag(self._extra.get("layer_load", False), "layer_load"))

    # -- scheduler side ----------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        plan = self._scheduler.build_connector_meta(scheduler_output)
        return KvroomConnectorMetadata(plan.sends, plan.recvs, plan.cancels, plan.saves,
                                       plan.drops)

    def request_finished(self, request, block_ids) -> Tuple[bool, Optional[Dict[str, Any]]]:
        return self._scheduler.request_finished(request, block_ids)

    def update_connector_output(self, connector_output) -> None:
        # The scheduler role keeps nothing of the workers' progress: what
        # finished comes back through vLLM's own finished_sending/recving.
        return

    def get_finished_count(self) -> Optional[int]:
        # Every worker of the engine holds its own room of each request (one
        # per TP rank) and reports it: vLLM's default, its world size.
        return None

    # -- worker side -------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        num_blocks = int(self._kv_cache_config.num_blocks)
        kv = kv_buffers(kv_caches, num_blocks)
        sides = {"kv_producer": ("prefill",), "kv_consumer": ("decode",),
                 "kv_both": ("prefill", "decode")}.get(self._kv_role)
        if sides is None:
            raise ValueError(f"kvroom: kv_role must be kv_producer, kv_consumer or kv_both, "
                             f"got {self._kv_role!r}")
        keep = tuple(kv_caches.values())
        self._keeper = RoomKeeper(lambda: self._make_ranks(sides, kv, keep), self._block_size,
                                  layer_buffers(kv_caches, num_blocks))
        _process.close_at_exit(self)

    def _make_ranks(self, sides, kv, keep):
        x = self._extra
        rt = _process.runtime(x.get("secret_file") or os.environ.get("KVROOM_SECRET_FILE"))
        tp_rank, tp_size, dp_rank, dp_size = self._parallel
        directory = x.get("directory") or _process.directory()
        if directory:
            _process.use_etcd(rt, directory, x.get("directory_prefix", "/kvroom/default"),
                              int(x.get("lease_ttl_ms", 5000)), 30000)
        else:
            host, port = _endpoint(x.get("registry", "127.0.0.1:8998"))
            if x.get("serve_registry") and tp_rank == 0 and dp_rank == 0:
                _process.publish_registry(rt, host, port)
            _process.join_registry(rt, host, port)
        ranks = {}
        try:
            for side in sides:
                ranks[side] = self._add_rank(rt, side, kv, keep)
        except Exception as e:
            for r in ranks.values():
                r.close()
            if "is held by the live" in str(e):
                raise ValueError(f"{e} (each vLLM instance of a side needs its own "
                                 "kv_connector_extra_config 'instance': 0, 1, ...)") from e
            raise
        return ranks

    def _add_rank(self, rt, side, kv, keep):
        x = self._extra
        tp_rank, tp_size, group, dp_size = self._parallel
        # A prefill's hold on a finished request's blocks, a decode's wait
        # for a room's prefill: each side's bootstrap deadline.
        hold = x.get("hold_ms", DEFAULT_HOLD_MS) if side == "prefill" else x.get("wait_ms",
                                                                               DEFAULT_WAIT_MS)
        return rt.add_rank(
            side, tp_rank=tp_rank, tp_size=tp_size, dp_rank=group, kv=kv,
            device_id=Runtime.DEVICE_FROM_POINTER,
            transport=x.get("transport") or os.environ.get("KVROOM_TRANSPORT") or "auto",
            network=True, host=x.get("host", "127.0.0.1"), keep=keep,
            integrity=x.get("integrity", "off"), timeouts={"bootstrap_ms": int(hold)},
            pull=side == "decode" and _flag(x.get("pull", False)))

    def start_load_kv(self, forward_context, **kwargs) -> None:
        meta = self._get_connector_metadata()
        if self._keeper is None or not isinstance(meta, KvroomMetadata):
            return
        self._tracker.submit(meta)
        self._step_loads = [r.req_id for r in meta.recvs if getattr(r, "sync", False)]
        if self._step_loads:
            self._keeper.expect_loads(self._step_loads)
        self._keeper.submit(meta)
        self._saving_now = bool(meta.saves)

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Asynchronous loads finish between steps: a request runs only once
        # every layer of it landed. Layer by layer ('layer_load'), this
        # step's loads are waited for here, one layer at a time.
        if self._step_loads and self._keeper is not None:
            self._keeper.wait_layer(layer_name, self._step_loads, self._layer_wait_s)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        # Layer by layer: this layer of every request whose prompt this pass
        # completes may go now (the keeper sends it once the room's decode
        # destination is there). Otherwise a request moves whole once vLLM
        # finished it.
        if self._keeper is not None and self._saving_now:
            self._keeper.layer_done(layer_name)

    def wait_for_save(self):
        # Every layer was computed: a layer vLLM did not name (none should
        # be) goes now too, so each room's last chunk is never held back.
        if self._keeper is not None and self._saving_now:
            self._keeper.pass_done()
        self._saving_now = False
        # This step's synchronous loads conclude within it: a failed one is
        # a load error of this pass (get_block_ids_with_load_errors).
        if self._step_loads and self._keeper is not None:
            self._keeper.wait_loads(self._step_loads, self._layer_wait_s)
        self._step_loads = []

    def get_finished(self, finished_req_ids: Set[str]):
        if self._keeper is None:
            return None, None
        self._keeper.finish(finished_req_ids)
        return self._tracker.step(finished_req_ids, self._keeper.collect())

    def get_block_ids_with_load_errors(self) -> Set[int]:
        errors = self._tracker.take_load_errors()
        if errors and self._keeper is not None:
            self._keeper.counters["load_error_blocks"] += len(errors)
        return errors

    def get_kv_connector_stats(self):
        if self._keeper is None:
            return None
        from .stats import COUNTERS, KvroomConnectorStats
        now = {k: int(self._keeper.counters.get(k, 0)) for k in COUNTERS}
        delta = {k: now[k] - self._stats_seen.get(k, 0) for k in COUNTERS}
        self._stats_seen = now
        stats = KvroomConnectorStats(data=delta)
        return None if stats.is_empty() else stats

    def totals(self) -> Dict[str, int]:
        """This worker's counts since it started (rooms sent, failed
        sending, received, failed receiving, blocks sent, load-error
        blocks)."""
        return dict(self._keeper.counters) if self._keeper is not None else {}

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        from .stats import KvroomConnectorStats
        return KvroomConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        from .stats import KvroomPromMetrics
        return KvroomPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self):
        self.close()

    def close(self):
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
