"""kvroom behind SGLang's disaggregation interface.

Pure-Python classes with the names and signatures of SGLang's
``python/sglang/srt/disaggregation/base/conn.py`` at sgl-project/sglang commit
0094505da74125a31ceb354f37ae7a1b6a97d3f5 (and ``DisaggregationMode`` of its
``utils.py``), over kvroom's core: ``KVArgs``, ``KVManager``, ``KVSender``,
``KVReceiver``, ``KVBootstrapServer``, ``KVPoll``, ``KVTransferError``.

One kvroom runtime per process (networked: ranks in other processes and
hosts), made on first use. ``server_args`` is read duck-typed; the attributes
read are those of :class:`ServerArgs` below (``tp_size``, ``dp_size``,
``disaggregation_bootstrap_port``, ``host``, ``kvroom_secret_file``,
``kvroom_transport``), each with a default when missing. The secret can also
come from the ``KVROOM_SECRET_FILE`` environment variable.

SGLang passes page indices (``kv_to_page_indices``) and page counts; so does
this. With ``KVArgs.page_size`` and ``total_kv_head_num`` set (SGLang sets
them), a rank declares its parallel layout, so prefill and decode TP sizes
may differ, and ``is_mla_backend`` declares MLA (one latent buffer per layer;
the prefill ranks the mapping gives nothing are dummies that conclude with
the room). Hybrid models: one state type (``state_types``: Mamba slots or SWA
window pages, its buffers ``state_data_ptrs``/``state_data_lens``/
``state_item_lens``), whose ``state_indices`` go with the last chunk and with
``send_metadata``. GPU pools (``gpu_id`` >= 0) register as device memory
for the cuda and verbs data planes, as in C++ (untested from Python: no GPU
where this was built). Not supported yet, refused with a clear error:
several state types at once.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from typing import List, Optional

from . import KVPoll, KVTransferError, Runtime

__all__ = ["KVArgs", "KVManager", "KVSender", "KVReceiver", "KVBootstrapServer", "KVPoll",
           "KVTransferError", "KVTransferMetric", "DisaggregationMode", "ServerArgs"]


class DisaggregationMode(enum.Enum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclasses.dataclass
class ServerArgs:
    """The few server arguments kvroom's classes read; SGLang's own
    ``ServerArgs`` works in its place."""
    tp_size: int = 1
    dp_size: int = 1
    host: str = "127.0.0.1"
    disaggregation_bootstrap_port: int = 8998
    kvroom_secret_file: Optional[str] = None
    kvroom_transport: str = "auto"


@dataclasses.dataclass
class KVTransferMetric:
    transfer_latency_s: Optional[float] = None
    alloc_latency_s: Optional[float] = None
    transfer_total_bytes: Optional[int] = None


class KVArgs:
    """SGLang's field names; kvroom reads the KV and aux buffers, the rank
    and the page size."""

    def __init__(self):
        self.engine_rank = 0
        self.kv_data_ptrs: List[int] = []
        self.kv_data_lens: List[int] = []
        self.kv_item_lens: List[int] = []
        self.aux_data_ptrs: List[int] = []
        self.aux_data_lens: List[int] = []
        self.aux_item_lens: List[int] = []
        self.state_types: list = []
        self.state_data_ptrs: list = []
        self.state_data_lens: list = []
        self.state_item_lens: list = []
        self.ib_device = ""
        self.ib_traffic_class = ""
        self.gpu_id = -1
        # Set by SGLang; when these are, the rank declares its layout (which
        # lets prefill and decode TP sizes differ, and MLA).
        self.kv_head_num = None
        self.total_kv_head_num = None
        self.page_size = None
        self.system_dp_rank = 0
        self.pp_rank = 0
        self.prefill_start_layer = 0
        self.prefill_end_layer = None


# -- the process's runtime ----------------------------------------------------

_process = {"runtime": None, "registry": None, "secret": None}


def _runtime(secret_file):
    if _process["runtime"] is None:
        _process["runtime"] = Runtime(network=True, secret_file=secret_file or "")
        _process["secret"] = secret_file
    elif (secret_file or None) != (_process["secret"] or None):
        raise ValueError("kvroom: this process's runtime uses another secret file")
    return _process["runtime"]


def _secret(server_args):
    return getattr(server_args, "kvroom_secret_file", None) or os.environ.get(
        "KVROOM_SECRET_FILE")


def _join_registry(rt, host, port):
    """This process's ranks register with the registry at host:port: the one
    it publishes itself (KVBootstrapServer), or one it connects to once."""
    where = (host, int(port))
    if _process["registry"] is None:
        rt.connect_registry(host, int(port))
        _process["registry"] = where
    elif _process["registry"][1] != where[1]:
        raise ValueError(f"kvroom: this process joined the registry at {_process['registry']}, "
                         f"not {where}")


class KVBootstrapServer:
    """The bootstrap registry, published by this process's runtime."""

    def __init__(self, host: str, port: int):
        rt = _runtime(os.environ.get("KVROOM_SECRET_FILE"))
        self.host = host
        self.port = rt.publish_registry(port, host)
        _process["registry"] = (host, self.port)

    def close(self):
        pass


class KVManager:
    """One prefill or decode rank of this process."""

    def __init__(self, args: KVArgs, disaggregation_mode: DisaggregationMode, server_args,
                 is_mla_backend: Optional[bool] = False):
        if disaggregation_mode not in (DisaggregationMode.PREFILL, DisaggregationMode.DECODE):
            raise ValueError(f"kvroom: a KVManager is prefill or decode, not {disaggregation_mode}")
        types = list(getattr(args, "state_types", None) or [])
        if len(set(map(str, types))) > 1:
            raise NotImplementedError("kvroom: one state type per model (Mamba slots or SWA "
                                      f"window pages), got {types}")
        self.args = args
        self.is_mla_backend = bool(is_mla_backend)
        if self.is_mla_backend and not getattr(args, "page_size", None):
            raise ValueError("kvroom: an MLA backend needs KVArgs.page_size (its layout is declared)")
        self.disaggregation_mode = disaggregation_mode
        self.server_args = server_args
        self.tp_size = int(getattr(server_args, "tp_size", 1) or 1)
        self._side = "prefill" if disaggregation_mode == DisaggregationMode.PREFILL else "decode"
        self._rank = None
        self._rt = _runtime(_secret(server_args))
        if self._side == "prefill":
            self.register_to_bootstrap()

    def register_to_bootstrap(self):
        """Registers this rank with the bootstrap registry (prefill: at
        start; decode: on its first receiver, which names the address)."""
        self._ensure_rank(*self._bootstrap())

    def _bootstrap(self):
        host = getattr(self.server_args, "host", "127.0.0.1") or "127.0.0.1"
        return host, getattr(self.server_args, "disaggregation_bootstrap_port", 8998)

    def _ensure_rank(self, host, port):
        if self._rank is not None:
            return self._rank
        _join_registry(self._rt, host, port)
        a = self.args
        n = len(a.kv_data_ptrs)
        if n == 0 or len(a.kv_data_lens) != n or len(a.kv_item_lens) != n:
            raise ValueError("kvroom: kv_data_ptrs, kv_data_lens and kv_item_lens must be "
                             "non-empty and of one length")
        if not (len(a.aux_data_ptrs) == len(a.aux_data_lens) == len(a.aux_item_lens)):
            raise ValueError("kvroom: aux_data_ptrs, aux_data_lens and aux_item_lens must be "
                             "of one length")
        kv = list(zip(map(int, a.kv_data_ptrs), map(int, a.kv_data_lens),
                      map(int, a.kv_item_lens)))
        aux = list(zip(map(int, a.aux_data_ptrs), map(int, a.aux_data_lens),
                       map(int, a.aux_item_lens)))
        state = _state_buffers(a)
        pp_size = int(getattr(self.server_args, "pp_size", 1) or 1) if self._side == "prefill" else 1
        layout = _layout_of(a, self.is_mla_backend, self.tp_size, pp_size)
        self._rank = self._rt.add_rank(
            self._side, tp_rank=int(a.engine_rank) % self.tp_size, tp_size=self.tp_size,
            dp_rank=int(getattr(a, "system_dp_rank", 0) or 0), kv=kv, aux=aux, state=state,
            layout=layout,
            # SGLang's KV pools live on its GPU: registered as device memory
            # (moved by the cuda/verbs data planes, refused with the reason
            # where this build has neither).
            device_id=int(a.gpu_id) if getattr(a, "gpu_id", -1) is not None
            and int(a.gpu_id) >= 0 else -1,
            transport=getattr(self.server_args, "kvroom_transport", "auto"), network=True,
            host=getattr(self.server_args, "host", "127.0.0.1") or "127.0.0.1")
        return self._rank

    def close(self):
        """Stops this rank (not in SGLang's interface: its managers live as
        long as the process)."""
        if self._rank is not None:
            self._rank.close()
            self._rank = None


def _flat(xs):
    """SGLang keeps state buffers per state type (lists of lists) or flat."""
    out = []
    for x in xs or []:
        out.extend(_flat(x) if isinstance(x, (list, tuple)) else [x])
    return out


def _state_buffers(a):
    ptrs = _flat(getattr(a, "state_data_ptrs", None))
    lens = _flat(getattr(a, "state_data_lens", None))
    items = _flat(getattr(a, "state_item_lens", None))
    if not (len(ptrs) == len(lens) == len(items)):
        raise ValueError("kvroom: state_data_ptrs, state_data_lens and state_item_lens must be "
                         "of one length")
    return list(zip(map(int, ptrs), map(int, lens), map(int, items)))


def _layout_of(a, mla, tp_size, pp_size):
    """The parallel layout SGLang's KVArgs describe, or None when they do not
    say (no page_size / total_kv_head_num): SGLang's pools are token-major
    pages ([token][head][dim], "NHD") of ``page_size`` tokens; one K and one
    V buffer per layer (MLA: one latent buffer); ``kv_item_lens`` bytes per
    page, so a head's bytes are item / (page_size x this rank's heads)."""
    page = getattr(a, "page_size", None)
    total = getattr(a, "total_kv_head_num", None)
    if not page or (not mla and not total):
        return None
    page = int(page)
    n = len(a.kv_data_ptrs)
    per_layer = 1 if mla else 2
    if n % per_layer:
        raise ValueError(f"kvroom: {n} KV buffers are not K and V of whole layers")
    layers = n // per_layer
    local = 1 if mla else int(getattr(a, "kv_head_num", 0) or 0)
    item = int(a.kv_item_lens[0])
    if local <= 0 or item % (page * local):
        raise ValueError(f"kvroom: kv_item_lens {item} is not page_size {page} x "
                         f"{local} heads x a head's bytes")
    layout = dict(kv_heads=1 if mla else int(total), head_dim=item // (page * local),
                  bytes_per_element=1, tokens_per_page=page, page_order="nhd", mla=bool(mla),
                  layers=layers)
    if pp_size > 1:
        layout.update(pp_size=pp_size, pp_rank=int(getattr(a, "pp_rank", 0) or 0),
                      first_layer=int(getattr(a, "prefill_start_layer", 0) or 0))
    return layout


def _bootstrap_endpoint(bootstrap_addr):
    host, _, port = str(bootstrap_addr).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"kvroom: bootstrap_addr must be 'host:port', got {bootstrap_addr!r}")
    return host, int(port)


def _raise_failure(handle, room):
    err = handle.failure() if handle is not None else None
    if err is None:
        raise KVTransferError(room, "no failure recorded for this room")
    raise err


class KVSender:
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int,
                 dest_tp_ranks: List[int], pp_rank: int,
                 req_has_disagg_prefill_dp_rank: bool = False):
        self.mgr = mgr
        self.bootstrap_room = int(bootstrap_room)
        rank = mgr._ensure_rank(*mgr._bootstrap())
        self._handle = rank.make_sender(self.bootstrap_room)
        self._num_pages = None
        self._sent = 0

    def init(self, num_kv_indices: int, aux_index: Optional[int] = None):
        self._num_pages = int(num_kv_indices)
        self._handle.init(self._num_pages, 0 if aux_index is None else int(aux_index))

    def send(self, kv_indices, state_indices: Optional[List] = None,
             token_position_offset: int = 0):
        if self._num_pages is None:
            raise RuntimeError(f"kvroom: room {self.bootstrap_room}: send before init")
        n = len(kv_indices)
        # The last chunk is the one that completes the pages init declared,
        # as SGLang's own senders decide it.
        is_last = self._sent + n >= self._num_pages
        if state_indices is not None and not is_last:
            raise ValueError(f"kvroom: room {self.bootstrap_room}: state_indices go with the "
                             "last chunk")
        self._handle.send(kv_indices, is_last, state_indices)
        self._sent += n

    def pop_decode_prefix_len(self) -> int:
        return 0

    def should_send_kv_chunk(self, num_pages: int, last_chunk: bool) -> bool:
        return num_pages > 0 or last_chunk

    def get_transfer_metric(self) -> KVTransferMetric:
        return KVTransferMetric()

    def poll(self) -> KVPoll:
        return self._handle.poll()

    def failure_exception(self):
        _raise_failure(self._handle, self.bootstrap_room)

    def clear(self):
        try:
            self._handle.clear()
        except Exception:  # cleared already: SGLang calls clear() freely
            pass

    def abort(self):
        try:
            self._handle.abort("aborted by the prefill scheduler")
        except Exception:  # concluded or cleared: nothing to abort
            pass


class KVReceiver:
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: Optional[int] = None):
        self.mgr = mgr
        self.bootstrap_addr = bootstrap_addr
        self.bootstrap_room = bootstrap_room
        self._handle = None

    def init(self, prefill_dp_rank: int):
        host, port = _bootstrap_endpoint(self.bootstrap_addr)
        rank = self.mgr._ensure_rank(host, port)
        self._handle = rank.make_receiver(int(self.bootstrap_room), int(prefill_dp_rank or 0))

    def send_metadata(self, kv_indices, aux_index: Optional[int] = None,
                      state_indices: Optional[List] = None,
                      decode_prefix_len: Optional[int] = None):
        if self._handle is None:
            raise RuntimeError(f"kvroom: room {self.bootstrap_room}: send_metadata before init")
        self._handle.init(kv_indices, 0 if aux_index is None else int(aux_index), state_indices)

    def poll(self) -> KVPoll:
        if self._handle is None:
            return KVPoll.Bootstrapping
        return self._handle.poll()

    def failure_exception(self):
        _raise_failure(self._handle, self.bootstrap_room)

    def clear(self):
        if self._handle is not None:
            try:
                self._handle.clear()
            except Exception:
                pass

    def abort(self):
        if self._handle is not None:
            try:
                self._handle.abort("aborted by the decode scheduler")
            except Exception:
                pass


# -- SGLang's backend table -----------------------------------------------------

_CLASSES = {"kvargs": KVArgs, "manager": KVManager, "sender": KVSender, "receiver": KVReceiver,
            "bootstrap_server": KVBootstrapServer}


def register():
    """Makes SGLang's ``get_kv_class`` return kvroom's classes for a
    transfer backend named "kvroom" (``TransferBackend`` gains a ``KVROOM``
    member). Call it before SGLang builds its schedulers, e.g. from a
    ``sitecustomize`` or a launcher:

        python -c "import kvroom.sglang as k; k.register(); \\
                   import runpy; runpy.run_module('sglang.launch_server', run_name='__main__')" \\
            --model-path ... --disaggregation-mode prefill \\
            --disaggregation-transfer-backend kvroom

    Returns False (and changes nothing) when SGLang is not importable. Modules
    that imported ``get_kv_class`` already (prefill.py, decode.py) get the
    hook too."""
    import sys
    try:
        from sglang.srt.disaggregation import utils
    except ImportError:
        return False
    original = utils.get_kv_class
    if getattr(original, "_kvroom", False):
        return True
    backend = utils.TransferBackend
    if "kvroom" not in backend._value2member_map_:
        # What aenum's extend_enum does: one more member of the enum.
        member = object.__new__(backend)
        member._name_, member._value_ = "KVROOM", "kvroom"
        backend._member_map_["KVROOM"] = member
        backend._value2member_map_["kvroom"] = member
        backend._member_names_.append("KVROOM")
        type.__setattr__(backend, "KVROOM", member)

    def get_kv_class(transfer_backend, class_type):
        if getattr(transfer_backend, "value", transfer_backend) == "kvroom":
            return _CLASSES.get(getattr(class_type, "value", class_type))
        return original(transfer_backend, class_type)

    get_kv_class._kvroom = True
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang.") and getattr(module, "get_kv_class", None) is original:
            module.get_kv_class = get_kv_class
    return True
