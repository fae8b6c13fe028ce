"""kvroom's connector stats through vLLM's hooks: counts per interval from
every worker (summed), logged by vLLM's KVConnectorLogging and exported as
Prometheus counters (``vllm:kvroom_*_total``)."""

import dataclasses
from typing import Any, Dict

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                   KVConnectorStats)
from vllm.v1.metrics.utils import create_metric_per_engine

#: Counter names: rooms sent, failed sending (decode never came within the
#: hold, or the room failed), received, failed receiving, and blocks vLLM
#: was told could not load.
COUNTERS = ("sent", "send_failed", "received", "recv_failed", "load_error_blocks")


@dataclasses.dataclass
class KvroomConnectorStats(KVConnectorStats):

    def __post_init__(self):
        for k in COUNTERS:
            self.data.setdefault(k, 0)

    def reset(self):
        self.data = {k: 0 for k in COUNTERS}

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        for k in COUNTERS:
            self.data[k] = self.data.get(k, 0) + int(other.data.get(k, 0))
        return self

    def reduce(self) -> Dict[str, int]:
        return {k: int(self.data.get(k, 0)) for k in COUNTERS}

    def is_empty(self) -> bool:
        return not any(self.data.get(k, 0) for k in COUNTERS)


class KvroomPromMetrics(KVConnectorPromMetrics):

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self.counters = {}
        for k in COUNTERS:
            c = self._counter_cls(name=f"vllm:kvroom_{k}_total",
                                  documentation=f"kvroom connector: {k.replace('_', ' ')}",
                                  labelnames=labelnames)
            self.counters[k] = create_metric_per_engine(c, self.per_engine_labelvalues)

    def observe(self, transfer_stats_data: Dict[str, Any], engine_idx: int = 0):
        for k in COUNTERS:
            n = int(transfer_stats_data.get(k, 0))
            if n:
                self.counters[k][engine_idx].inc(n)
