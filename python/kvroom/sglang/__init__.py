"""kvroom behind SGLang's disaggregation interface.

Pure-Python classes with the names and signatures of SGLang's
``python/sglang/srt/disaggregation/base/conn.py`` at upstream main 8905cbd4
(2026-07-20; ``DisaggregationMode`` of its ``utils.py``), and the attributes
SGLang's scheduler reads beyond it (``common/conn.py``: ``KVManager.kv_args``,
``prefill_info_table``, ``try_ensure_parallel_info``, ``KVReceiver.conclude_state``,
``KVSender.kv_mgr``), over kvroom's core: ``KVArgs``, ``KVManager``, ``KVSender``,
``KVReceiver``, ``KVBootstrapServer``, ``KVPoll``, ``KVTransferError``.

SGLang's scheduler catches nothing from ``init``, ``send`` or
``send_metadata``: a room that concluded meanwhile (a peer's abort, a lost
rank, a timeout) makes those calls do nothing, and ``poll()`` and
``failure_exception()`` report it. Bad calls of the scheduler's own (an
index out of range, more pages than declared) fail the room with the reason
and are reported the same way.

One kvroom runtime per process (networked: ranks in other processes and
hosts), made on first use. ``server_args`` is read duck-typed (``tp_size``,
``host``, ``disaggregation_bootstrap_port``, ``pp_size``,
``disaggregation_enable_kv_checksum`` (newer SGLang: kvroom's xxh3 integrity
check, else ``KVROOM_INTEGRITY``), and kvroom's own
``kvroom_secret_file``, ``kvroom_transport``, which SGLang's ServerArgs lacks:
then the ``KVROOM_SECRET_FILE`` and ``KVROOM_TRANSPORT`` environment
variables), each with a default. ``DisaggregationMode`` may be SGLang's enum,
kvroom's or a string: compared by value.

SGLang passes page indices (``kv_to_page_indices``) and page counts; so does
this. A buffer's memory kind (host or GPU) comes from its pointer, never from
``gpu_id`` (SGLang passes its GPU id with CPU pools, and its aux buffers are
host memory on GPU deployments). With ``KVArgs.page_size`` and
``total_kv_head_num`` set (SGLang's prefill sets them) a rank declares its
parallel layout, so prefill and decode TP sizes may differ, and
``is_mla_backend`` declares MLA; SGLang's decode names no heads outside its
staging path, and at equal TP it needs none (it holds the prefill's model at
its TP size). The decode radix prefix (``send_metadata(...,
decode_prefix_len)``) reaches prefill's ``pop_decode_prefix_len()``: prefill
sends only the pages after it. Hybrid models: one state type (``state_types``:
Mamba slots or SWA window pages), whose ``state_indices`` go with the last
chunk and with ``send_metadata``. Not supported yet, refused with a clear
error: several state types at once; aux buffers in host memory beside KV on a
GPU.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
from typing import Dict, List, Optional

from .. import Error, KVPoll, KVTransferError, Runtime, _process

logger = logging.getLogger("kvroom.sglang")

__all__ = ["KVArgs", "KVManager", "KVSender", "KVReceiver", "KVBootstrapServer", "KVPoll",
           "KVTransferError", "KVTransferMetric", "DisaggregationMode", "ServerArgs",
           "PrefillServerInfo", "register"]


class DisaggregationMode(enum.Enum):
    NULL = "null"
    PREFILL = "prefill"
    DECODE = "decode"


def _mode(x):
    """'prefill', 'decode' or another string, from SGLang's enum, ours or a
    string: by value, never by identity (SGLang passes its own enum)."""
    return str(getattr(x, "value", x)).lower()


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
    """Every field of SGLang's KVArgs (8905cbd4), with its defaults; kvroom
    reads the KV, aux and state buffers, the rank, the page size and the
    head counts."""

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
        self.state_dim_per_tensor: list = []
        self.is_hybrid_mla_backend = False
        self.state_conv_shard_groups: list = []
        self.ib_device = ""
        self.ib_traffic_class = ""
        self.gpu_id = -1
        # SGLang after 2026-07 sets it on both sides (its own backends check
        # that they match); kvroom checks page bytes, not the dtype.
        self.kv_cache_dtype_str = None
        # SGLang after 2026-07: which model layer each KV / state buffer
        # holds, and the rows before a state tensor's TP slice axis (for its
        # unequal-TP state slicing; kvroom moves state between equal TP).
        self.kv_layer_ids: list = []
        self.state_layer_ids: list = []
        self.state_slice_outer_counts: list = []
        # Set by SGLang's prefill; when these are, the rank declares its
        # layout (which lets prefill and decode TP sizes differ, and MLA).
        self.kv_head_num = None
        self.total_kv_head_num = None
        self.page_size = None
        self.system_dp_rank = 0
        self.pp_rank = 0
        self.prefill_start_layer = 0
        self.prefill_end_layer = None
        self.mla_compression_ratios = None
        self.kv_buf_groups = 1
        self.total_kv_layers = 0


@dataclasses.dataclass
class PrefillServerInfo:
    """What SGLang's decode reads of a prefill deployment
    (``KVManager.prefill_info_table[bootstrap_addr]``): its fields are those of
    SGLang's ``common.conn.PrefillServerInfo``. kvroom routes a room to the
    prefill DP group the decode names, by ``room % dp_size`` when it names
    none."""
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    page_size: Optional[int] = None
    kv_cache_dtype: Optional[str] = None
    follow_bootstrap_room: bool = True
    enable_dsa_cache_layer_split: bool = False
    prefill_http_port: Optional[int] = None
    target_tp_rank: Optional[int] = None
    target_tp_ranks: Optional[List[int]] = None
    target_cp_ranks: Optional[List[int]] = None
    target_pp_ranks: Optional[List[int]] = None
    required_dst_info_num: Optional[int] = None
    required_prefill_response_num: Optional[int] = None


# -- the process's runtime ----------------------------------------------------

def _runtime(secret_file):
    return _process.runtime(secret_file)


def _secret(server_args):
    return getattr(server_args, "kvroom_secret_file", None) or os.environ.get(
        "KVROOM_SECRET_FILE")


def _transport(server_args):
    return (getattr(server_args, "kvroom_transport", None) or os.environ.get("KVROOM_TRANSPORT")
            or "auto")


def _integrity(server_args):
    """'xxh3' when SGLang's ``--disaggregation-enable-kv-checksum`` (sglang
    PR #39500) or ``KVROOM_INTEGRITY=xxh3`` asks for a check of the KV bytes
    a request moved, else 'off'; every rank of a deployment the same."""
    if getattr(server_args, "disaggregation_enable_kv_checksum", False):
        return "xxh3"
    return os.environ.get("KVROOM_INTEGRITY", "off") or "off"


class KVBootstrapServer:
    """The bootstrap registry, published by this process's runtime."""

    def __init__(self, host: str, port: int):
        rt = _runtime(os.environ.get("KVROOM_SECRET_FILE"))
        self.host = host
        # With etcd as the directory: nothing to serve here.
        self.port = _process.publish_registry(rt, host, port)

    def close(self):
        pass


class KVManager:
    """One prefill or decode rank of this process."""

    def __init__(self, args: KVArgs, disaggregation_mode, server_args,
                 is_mla_backend: Optional[bool] = False):
        side = _mode(disaggregation_mode)
        if side not in ("prefill", "decode"):
            raise ValueError(f"kvroom: a KVManager is prefill or decode, not {disaggregation_mode}")
        types = list(getattr(args, "state_types", None) or [])
        if len(set(map(str, types))) > 1:
            raise NotImplementedError("kvroom: one state type per model (Mamba slots or SWA "
                                      f"window pages), got {types}")
        self.kv_args = args
        self.is_mla_backend = bool(is_mla_backend)
        if self.is_mla_backend and not getattr(args, "page_size", None):
            raise ValueError("kvroom: an MLA backend needs KVArgs.page_size (its layout is declared)")
        self.disaggregation_mode = disaggregation_mode
        self.server_args = server_args
        #: The attention TP size: what one DP group's ranks split (SGLang's
        #: ``attn_tp_size``; ``tp_size`` without DP attention).
        self.tp_size = _attn_tp_size(server_args)
        #: SGLang's decode: prefill deployments by bootstrap address.
        self.prefill_info_table: Dict[str, PrefillServerInfo] = {}
        self._late_calls = 0
        self.is_dummy_cp_rank = False
        self._side = side
        self._rank = None
        self._rt = _runtime(_secret(server_args))
        _process.close_at_exit(self)
        if self._side == "prefill":
            self.register_to_bootstrap()

    @property
    def args(self):
        """The KVArgs (kvroom's earlier name for ``kv_args``)."""
        return self.kv_args

    def register_to_bootstrap(self):
        """Registers this rank with the bootstrap registry (prefill: at
        start; decode: on its first receiver, which names the address)."""
        self._ensure_rank(*self._bootstrap())

    def try_ensure_parallel_info(self, bootstrap_addr: str) -> bool:
        """SGLang's decode, before it routes a request: one attempt (a few
        seconds at most) to join the registry at ``bootstrap_addr``; True once
        this rank is registered there and the directory lists every rank of
        the prefill deployment, whose shape (DP groups, attention TP, PP,
        page size) is then in ``prefill_info_table`` (SGLang's decode sends a
        room to prefill DP group ``bootstrap_room % dp_size``). Anything else
        is logged and answered False (the scheduler retries once a second,
        then aborts the request): it never raises."""
        if bootstrap_addr in self.prefill_info_table:
            return True
        try:
            host, port = _bootstrap_endpoint(bootstrap_addr)
            rank = self._ensure_rank(host, port, timeout_ms=3000)
            shape = rank.shape_of_side("prefill")
        except (Error, ValueError) as e:
            logger.warning("kvroom: cannot join the bootstrap registry at %s: %s",
                           bootstrap_addr, e)
            return False
        if not shape["complete"]:
            logger.info("kvroom: the prefill deployment at %s is not complete yet (%d ranks "
                        "listed, %d DP groups of TP %d x PP %d); asking again", bootstrap_addr,
                        shape["ranks"], shape["dp_size"], shape["tp_size"], shape["pp_size"])
            return False
        self.prefill_info_table[bootstrap_addr] = PrefillServerInfo(
            attn_tp_size=shape["tp_size"], dp_size=shape["dp_size"], pp_size=shape["pp_size"],
            page_size=shape["tokens_per_page"] or getattr(self.kv_args, "page_size", None))
        return True

    def _bootstrap(self):
        host = getattr(self.server_args, "host", "127.0.0.1") or "127.0.0.1"
        return host, getattr(self.server_args, "disaggregation_bootstrap_port", 8998)

    def _ensure_rank(self, host, port, timeout_ms=30000):
        if self._rank is not None:
            return self._rank
        _process.join_registry(self._rt, host, port, timeout_ms)
        a = self.kv_args
        n = len(a.kv_data_ptrs)
        if n == 0 or len(a.kv_data_lens) != n or len(a.kv_item_lens) != n:
            raise ValueError("kvroom: kv_data_ptrs, kv_data_lens and kv_item_lens must be "
                             "non-empty and of one length")
        if not (len(a.aux_data_ptrs) == len(a.aux_data_lens) == len(a.aux_item_lens)):
            raise ValueError("kvroom: aux_data_ptrs, aux_data_lens and aux_item_lens must be "
                             "of one length")
        kv = _kvroom_order(list(zip(map(int, a.kv_data_ptrs), map(int, a.kv_data_lens),
                                    map(int, a.kv_item_lens))), self.is_mla_backend)
        aux = list(zip(map(int, a.aux_data_ptrs), map(int, a.aux_data_lens),
                       map(int, a.aux_item_lens)))
        state = _state_buffers(a)
        pp_size = int(getattr(self.server_args, "pp_size", 1) or 1) if self._side == "prefill" else 1
        layout = _layout_of(a, self.is_mla_backend, self.tp_size, pp_size)
        self._rank = self._rt.add_rank(
            self._side, tp_rank=int(a.engine_rank) % self.tp_size, tp_size=self.tp_size,
            dp_rank=int(getattr(a, "system_dp_rank", 0) or 0),
            dp_size=_said_dp_size(self.server_args), kv=kv, aux=aux, state=state,
            layout=layout,
            # Host or GPU by each buffer's pointer: gpu_id names the
            # scheduler's GPU, also with CPU pools and host aux buffers.
            device_id=Runtime.DEVICE_FROM_POINTER,
            transport=_transport(self.server_args), network=True,
            host=getattr(self.server_args, "host", "127.0.0.1") or "127.0.0.1",
            integrity=_integrity(self.server_args))
        return self._rank

    @property
    def calls_after_conclusion(self):
        """Scheduler calls (init, send, send_metadata, abort) that found
        their room concluded already and did nothing."""
        rank = self._rank
        return self._late_calls + (rank.calls_after_conclusion if rank is not None else 0)

    def _late_call(self, what, room):
        self._late_calls += 1
        logger.debug("kvroom: %s on room %s, which concluded already: nothing to do", what, room)

    def close(self):
        """Stops this rank (not in SGLang's interface: its managers live as
        long as the process)."""
        if self._rank is not None:
            self._rank.close()
            self._rank = None


def _flat(xs):
    """SGLang keeps state buffers and indices per state type (lists of lists,
    of numpy arrays or tensors) or flat: one flat list of ints."""
    out = []
    for x in xs if xs is not None else []:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        elif hasattr(x, "tolist"):  # numpy arrays and scalars, torch tensors
            v = x.tolist()
            out.extend(_flat(v) if isinstance(v, list) else [v])
        elif x is not None:
            out.append(x)
    return out


def _kvroom_order(kv, mla):
    """SGLang's MHA pools list K of every layer, then V of every layer
    (``get_contiguous_buf_infos``); kvroom's layouts take K and V of each
    layer in turn. The order matters where layers are mapped by number (a
    pipeline stage's layers into a decode rank holding all of them); MLA
    pools have one latent buffer per layer already."""
    if mla or len(kv) % 2:
        return kv
    half = len(kv) // 2
    return [b for layer in range(half) for b in (kv[layer], kv[half + layer])]


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


def _said_dp_size(server_args):
    """The DP size a rank says, or 0 (not said) for one group. Said, not
    inferred from the groups listed so far: SGLang's decode routes room r to
    prefill group r % dp_size as soon as it knows a size."""
    dp = int(getattr(server_args, "dp_size", 1) or 1)
    return dp if dp > 1 else 0


def _attn_tp_size(server_args):
    """SGLang's ``attn_tp_size``: ``tp_size`` split over the DP groups (with
    ``enable_dp_attention``) and attention CP; each DP group's ranks are a TP
    group of this size (``compute_dp_attention_world_info``)."""
    tp = int(getattr(server_args, "tp_size", 1) or 1)
    dp = int(getattr(server_args, "dp_size", 1) or 1)
    if not getattr(server_args, "enable_dp_attention", False):
        dp = 1
    cp = int(getattr(server_args, "attn_cp_size", 1) or 1)
    if tp % (dp * cp):
        raise ValueError(f"kvroom: tp_size {tp} is not a multiple of dp_size {dp} x "
                         f"attn_cp_size {cp}")
    return tp // (dp * cp)


def _bootstrap_endpoint(bootstrap_addr):
    host, _, port = str(bootstrap_addr).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"kvroom: bootstrap_addr must be 'host:port', got {bootstrap_addr!r}")
    return host, int(port)


def _refuse(why):
    raise Error(why)


class _Room:
    """What KVSender and KVReceiver share: the core's handle once there is
    one, or a failure of this room that the core never saw (it could not
    open, or was aborted before it did). No call raises into the scheduler
    because of what a peer did: SGLang catches nothing from ``init``,
    ``send`` or ``send_metadata``."""

    def __init__(self, mgr, bootstrap_addr, bootstrap_room):
        self.kv_mgr = mgr
        self.bootstrap_addr = bootstrap_addr
        self.bootstrap_room = bootstrap_room
        self._handle = None
        self._failure = None

    @property
    def mgr(self):
        """The KVManager (kvroom's earlier name for ``kv_mgr``)."""
        return self.kv_mgr

    @property
    def conclude_state(self):
        """Failed or Success once the room concluded, else None (SGLang's
        common backends keep this attribute; its decode queue reads it)."""
        state = self.poll()
        return state if state in (KVPoll.Success, KVPoll.Failed) else None

    def poll(self) -> KVPoll:
        if self._failure is not None:
            return KVPoll.Failed
        if self._handle is None:
            return KVPoll.Bootstrapping
        return self._handle.poll()

    def failure_exception(self):
        """Raises the room's KVTransferError (SGLang's contract: only when
        the polled state was Failed; any number of times). SGLang polls with
        a MIN all-reduce over the TP group, so this rank may be told Failed
        before kvroom's fan-out reached it: the error is then marked
        ``is_from_another_rank`` (SGLang logs it at debug), with the root
        cause and origin rank once they arrived (a later call has them)."""
        err = self._failure
        if err is None and self._handle is not None:
            err = self._handle.group_failure()
        if err is None:
            # No room here at all (never opened, nothing recorded): the
            # group's word is all there is, and it is another rank's.
            err = KVTransferError(self.bootstrap_room,
                                  "failed on another rank (its root cause has not reached "
                                  "this rank yet)", is_from_another_rank=True)
        raise err

    def _fail_here(self, reason):
        """A failure this shim found before the core had the room: it
        originates here."""
        if self._failure is None:
            self._failure = KVTransferError(self.bootstrap_room, reason)
            logger.error("%s", self._failure)

    def _act(self, what, call):
        """Runs `call` on the core's handle. A room that concluded meanwhile
        makes the core do nothing (counted); a call the core refuses (more
        pages than declared, an index out of range, init twice) fails the
        room everywhere with that reason, which poll() and
        failure_exception() report."""
        if self._failure is not None:
            self.kv_mgr._late_call(what, self.bootstrap_room)
            return
        try:
            call()
        except (Error, TypeError, ValueError) as e:
            reason = f"{what} refused: {e}"
            try:
                self._handle.abort(reason)
            except Error:
                pass
            if self._handle.poll() not in (KVPoll.Failed, KVPoll.Success):
                # The core concludes the room on its own thread: until its
                # Failed arrives, this side reads Failed already.
                self._fail_here(reason)

    def clear(self):
        if self._handle is not None:
            try:
                self._handle.clear()
            except Error:  # cleared already: SGLang calls clear() freely
                pass

    def abort(self):
        if self._handle is None:
            # Before init (SGLang's decode aborts requests whose prefill it
            # cannot reach): Failed here, from now on.
            self._failure = self._failure or KVTransferError(
                self.bootstrap_room, f"aborted by {self.kv_mgr._side} scheduler")
            return
        try:
            self._handle.abort()
        except Error:  # cleared: nothing to abort
            pass


class KVSender(_Room):
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: int,
                 dest_tp_ranks: List[int], pp_rank: int,
                 req_has_disagg_prefill_dp_rank: bool = False):
        super().__init__(mgr, bootstrap_addr, int(bootstrap_room))
        self.dest_tp_ranks = dest_tp_ranks
        self.pp_rank = pp_rank
        self._num_pages = None
        self._sent = 0
        try:
            rank = mgr._ensure_rank(*mgr._bootstrap())
            self._handle = rank.make_sender(self.bootstrap_room)
        except Error as e:
            self._fail_here(f"cannot open the room on prefill: {e}")

    def init(self, num_kv_indices: int, aux_index: Optional[int] = None):
        self._num_pages = int(num_kv_indices)
        self._act("init", lambda: self._handle.init(
            self._num_pages, 0 if aux_index is None else int(aux_index)))

    def send(self, kv_indices, state_indices: Optional[List] = None,
             num_kv_tokens: Optional[int] = None):
        # num_kv_tokens (SGLang after 2026-07, for decode context parallelism,
        # which kvroom does not split by): the chunk's tokens; the pages are
        # what moves.
        if self._num_pages is None:
            self._act("send", lambda: _refuse(f"room {self.bootstrap_room}: send before init"))
            return
        n = len(kv_indices)
        # The last chunk is the one that completes the pages init declared,
        # as SGLang's own senders decide it.
        is_last = self._sent + n >= self._num_pages
        self._sent += n
        if state_indices is not None and not is_last and len(_flat(state_indices)) > 0:
            self._act("send", lambda: _refuse(
                f"room {self.bootstrap_room}: state_indices go with the last chunk"))
            return
        state = _flat(state_indices) if state_indices is not None else None
        self._act("send", lambda: self._handle.send(kv_indices, is_last, state or None))

    def pop_decode_prefix_len(self) -> int:
        """Tokens decode holds already (its radix cache): SGLang's prefill
        sends, and declares to ``init``, only the pages after them."""
        if self._handle is None:
            return 0
        return int(self._handle.decode_prefix_len())

    def should_send_kv_chunk(self, num_pages: int, last_chunk: bool) -> bool:
        # The last chunk goes even without pages: the aux slot rides with it.
        return num_pages > 0 or last_chunk

    def get_transfer_metric(self) -> KVTransferMetric:
        item = sum(int(x) for x in getattr(self.kv_mgr.kv_args, "kv_item_lens", []) or [])
        return KVTransferMetric(transfer_total_bytes=self._sent * item)


class KVReceiver(_Room):
    def __init__(self, mgr: KVManager, bootstrap_addr: str, bootstrap_room: Optional[int] = None):
        super().__init__(mgr, bootstrap_addr, bootstrap_room)

    def init(self, prefill_dp_rank: int):
        if self._handle is not None or self._failure is not None:
            self.kv_mgr._late_call("init", self.bootstrap_room)
            return
        try:
            host, port = _bootstrap_endpoint(self.bootstrap_addr)
            rank = self.kv_mgr._ensure_rank(host, port)
            self._handle = rank.make_receiver(int(self.bootstrap_room), int(prefill_dp_rank or 0))
        except (Error, ValueError) as e:
            self._fail_here(f"cannot open the room on decode: {e}")

    def send_metadata(self, kv_indices, aux_index: Optional[int] = None,
                      state_indices: Optional[List] = None,
                      decode_prefix_len: Optional[int] = None):
        if self._handle is None and self._failure is None:
            self._fail_here(f"room {self.bootstrap_room}: send_metadata before init")
            return
        state = _flat(state_indices) if state_indices is not None else None
        self._act("send_metadata", lambda: self._handle.init(
            kv_indices, 0 if aux_index is None else int(aux_index), state or None,
            int(decode_prefix_len or 0)))


# -- SGLang's backend table -----------------------------------------------------

_CLASSES = {"kvargs": KVArgs, "manager": KVManager, "sender": KVSender, "receiver": KVReceiver,
            "bootstrap_server": KVBootstrapServer}


def register():
    """Makes SGLang start with ``--disaggregation-transfer-backend kvroom``:
    its argument parser accepts the name (``add_disagg_transfer_backend_choices``),
    ``TransferBackend`` gains a ``KVROOM`` member and ``get_kv_class`` returns
    kvroom's classes for it (also in modules that imported it already).
    Idempotent. SGLang calls it in every process through its plugin entry
    point (``sglang.srt.plugins``: kvroom = kvroom.sglang:register);
    ``python3 -m kvroom.sglang.launch_server <SGLang's arguments>`` calls it
    too. Returns False (and changes nothing) when SGLang is not importable."""
    import sys
    try:
        from sglang.srt.disaggregation import utils
    except ImportError:
        return False
    try:
        from sglang.srt import server_args as sa
        if "kvroom" not in getattr(sa, "DISAGG_TRANSFER_BACKEND_CHOICES", ["kvroom"]):
            sa.add_disagg_transfer_backend_choices(["kvroom"])
    except ImportError:
        pass
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
    utils.get_kv_class = get_kv_class
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang.") and getattr(module, "get_kv_class", None) is original:
            module.get_kv_class = get_kv_class
    return True
