"""The worker role of kvroom's vLLM connector: this worker's kvroom ranks
and every room handle, owned by one thread (the room keeper), which vLLM's
engine thread talks to only through queues.

Why a thread of its own: a prefill's rooms must make progress while its
engine sleeps. vLLM's engine steps only while it has unfinished requests,
and a prefill whose requests all finished holds their blocks for decodes
that come later; its sends are started by the keeper the moment a decode's
destination arrives, not at the prefill's next step. The engine thread
learns what concluded at its next ``get_finished``.

What vLLM is told, and when:
- a send concludes (decode confirmed every byte, or the room failed, or
  nobody came within the hold): the request is finished sending, so its
  blocks are freed. Not before vLLM named it finished (its contract);
- a receive succeeds: finished receiving;
- a receive fails: finished receiving, and every block of it is a load
  error in the same pass (kvroom's fence: once the room is Failed, no byte
  of it lands, so vLLM's ``recompute`` can rewrite those blocks);
- a decode request aborted while it loads: its room is aborted, and it is
  finished receiving once the room concluded, so vLLM frees blocks no
  byte can land in any more.

Loads layer by layer (vLLM's synchronous loads, ``layer_load``) are the
engine thread's to wait for: the keeper polls their rooms more often and
tells it, under a condition, how many leading layers of each landed
(``kv_receiver.landed``) and when the room concluded. ``wait_for_layer_load``
waits for one layer of every load of the step; ``wait_for_save`` waits for
each of them to conclude, so a failed one is a load error of the same pass
(vLLM then recomputes or fails it, and drops what the pass computed from
it), and a succeeded one is not reported as received (vLLM expects that
only of asynchronous loads). A load whose layer does not land within
``layer_wait_ms`` is aborted (it fails, and is recomputed or failed); the
pass waits for it to conclude all the same, for only then may no byte of it
land any more.
"""

import collections
import logging
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from .. import Error, KVPoll
from .scheduler_side import CancelSpec, KvroomMetadata, RecvSpec, SaveSpec, SendSpec

logger = logging.getLogger("kvroom.vllm")

#: What the keeper counts (rooms sent, failed sending, received, failed
#: receiving; blocks sent; blocks vLLM was told could not load; chunks sent
#: layer by layer).
COUNTED = ("sent", "send_failed", "received", "recv_failed", "blocks_sent", "load_error_blocks",
           "layer_chunks")

#: Seconds between two polls of open rooms (each poll is nanoseconds in
#: C++; the pause keeps the keeper from competing with the engine thread).
POLL_PERIOD_S = 0.0005
#: Seconds the keeper waits for work when no room is open.
IDLE_WAIT_S = 0.05
#: Seconds between two polls while a forward pass waits for layers.
LAYER_POLL_PERIOD_S = 0.0001


class _Send:
    __slots__ = ("spec", "handle", "started", "layered", "ready", "sent", "pages", "dropped")

    def __init__(self, spec, handle, layered=False):
        self.spec, self.handle, self.started = spec, handle, False
        # Layer by layer: the layers computed, and those sent.
        self.layered, self.ready, self.sent = layered, set(), set()
        self.pages: Optional[List[int]] = None
        self.dropped = False


class _Recv:
    __slots__ = ("spec", "handle", "aborted", "landed")

    def __init__(self, spec: RecvSpec, handle):
        self.spec, self.handle, self.aborted = spec, handle, False
        # A synchronous load: its leading layers that landed.
        self.landed = 0


class _Load:
    """A synchronous load as the engine thread sees it (under the keeper's
    condition): how many leading layers landed, and whether its room
    concluded."""
    __slots__ = ("layers", "done", "abort_asked")

    def __init__(self):
        self.layers, self.done, self.abort_asked = 0, False, False


class RoomKeeper:
    """Owns this worker's ranks (made by ``make_ranks`` on its thread) and
    rooms. ``submit``/``finish``/``collect`` are the engine thread's side."""

    def __init__(self, make_ranks, block_size: int, layers: Optional[Dict[str, List[int]]] = None):
        self.block_size = block_size
        self._make_ranks = make_ranks
        # Layer name -> its KV buffers among the rank's (layer by layer).
        self.layers: Dict[str, List[int]] = dict(layers or {})
        self._pass_saves: Set[str] = set()
        self._commands: "queue.Queue" = queue.Queue()
        self._events = collections.deque()  # (kind, req_id, payload), appended by the keeper
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None
        self._stop = False
        self.ranks: Dict[str, object] = {}
        # Every key from the start: the engine thread copies the counters
        # while this thread counts, and a dict that grows under a copy raises.
        self.counters = collections.Counter({k: 0 for k in COUNTED})
        # Synchronous loads: layer order, and the engine thread's view.
        self._layer_list = list(self.layers.values())
        self._layer_index = {name: i for i, name in enumerate(self.layers)}
        self._loads: Dict[str, _Load] = {}
        self._loads_cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kvroom-vllm-rooms", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise self._start_error

    # -- engine thread -----------------------------------------------------

    def submit(self, meta: KvroomMetadata) -> None:
        if meta.sends or meta.recvs or meta.cancels or meta.saves or meta.drops:
            self._commands.put(("meta", meta))

    def layer_done(self, layer_name: str) -> None:
        """The forward pass computed this layer of this step's saves."""
        self._commands.put(("layer", layer_name))

    def pass_done(self) -> None:
        """The forward pass ended: every layer of this step's saves is
        computed."""
        self._commands.put(("pass", None))

    def finish(self, req_ids: Set[str]) -> None:
        """vLLM's finished requests of this step: a receive still open for
        one of them was aborted by decode's scheduler."""
        if req_ids:
            self._commands.put(("finished", set(req_ids)))

    # -- engine thread: synchronous loads ----------------------------------

    def expect_loads(self, req_ids: List[str]) -> None:
        """This step's synchronous loads (before their metadata is
        submitted)."""
        with self._loads_cv:
            for r in req_ids:
                self._loads[r] = _Load()

    def wait_layer(self, layer_name: str, req_ids: List[str], limit_s: float) -> None:
        """Until layer ``layer_name`` of every one of ``req_ids`` landed or
        its room concluded."""
        i = self._layer_index.get(layer_name)
        if i is not None:
            self._wait(req_ids, lambda x: x.done or x.layers > i, limit_s,
                       f"layer {layer_name}")

    def wait_loads(self, req_ids: List[str], limit_s: float) -> None:
        """Until the room of every one of ``req_ids`` concluded; then they
        are forgotten."""
        self._wait(req_ids, lambda x: x.done, limit_s, "the load's conclusion")
        with self._loads_cv:
            for r in req_ids:
                self._loads.pop(r, None)

    def _wait(self, req_ids, ready, limit_s, what):
        deadline = time.monotonic() + limit_s
        with self._loads_cv:
            while True:
                late = [r for r in req_ids if r in self._loads and not ready(self._loads[r])]
                if not late:
                    return
                if not self._thread.is_alive():
                    # The keeper ended (closed, or a bug raised in it): no
                    # room of it moves any more.
                    logger.error("kvroom: the room keeper is gone; %d load(s) left unfinished",
                                 len(late))
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    # Failing the load frees the pass; it still waits for
                    # the room to conclude (then nothing of it lands).
                    for r in late:
                        x = self._loads[r]
                        if not x.abort_asked:
                            x.abort_asked = True
                            logger.warning("kvroom: request %s: %s did not land within %.1f s; "
                                           "its load is aborted", r, what, limit_s)
                            self._commands.put(("abort_load", (r, f"{what} did not land within "
                                                                  f"{limit_s:.1f} s")))
                    deadline = time.monotonic() + limit_s
                    left = limit_s
                self._loads_cv.wait(timeout=min(left, 1.0))

    def collect(self) -> List[Tuple[str, str, object]]:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop = True
            self._commands.put(("stop", None))
            self._thread.join()

    # -- the keeper's thread ------------------------------------------------

    def _run(self):
        try:
            self.ranks = self._make_ranks()
        except BaseException as e:  # raised to vLLM at start-up, by __init__
            self._start_error = e
            self._started.set()
            return
        self._started.set()
        sends: Dict[str, _Send] = {}
        recvs: Dict[str, _Recv] = {}
        try:
            while not self._stop:
                wait = IDLE_WAIT_S
                if sends or recvs:
                    wait = POLL_PERIOD_S
                if any(r.spec.sync for r in recvs.values()):
                    wait = LAYER_POLL_PERIOD_S
                try:
                    cmd = self._commands.get(timeout=wait)
                except queue.Empty:
                    cmd = None
                while cmd is not None:
                    self._command(cmd, sends, recvs)
                    try:
                        cmd = self._commands.get_nowait()
                    except queue.Empty:
                        cmd = None
                self._poll(sends, recvs)
        finally:
            for r in self.ranks.values():
                try:
                    r.close()
                except Exception:  # closing never raises into vLLM
                    logger.debug("kvroom: closing a rank failed", exc_info=True)
            self.ranks = {}

    def _command(self, cmd, sends, recvs):
        kind, arg = cmd
        if kind == "stop":
            self._stop = True
        elif kind == "finished":
            for req_id in arg & recvs.keys():
                r = recvs[req_id]
                if not r.aborted:
                    r.aborted = True
                    r.handle.abort("the request was aborted while its KV loaded")
        elif kind == "abort_load":
            req_id, why = arg
            r = recvs.get(req_id)
            if r is not None:
                r.handle.abort(why)
        elif kind == "layer":
            if arg not in self.layers:
                return  # not a layer with KV of its own here
            for req_id in self._pass_saves:
                if req_id in sends:
                    sends[req_id].ready.add(arg)
        elif kind == "pass":
            for req_id in self._pass_saves:
                if req_id in sends:
                    sends[req_id].ready.update(self.layers)
            self._pass_saves = set()
        elif kind == "meta":
            for s in arg.saves:
                self._open_send(s, sends, layered=True)
            self._pass_saves = {s.req_id for s in arg.saves}
            for d in arg.drops:
                x = sends.get(d.req_id)
                if x is not None and not x.dropped:
                    x.dropped = True
                    x.handle.abort("the prefill request was aborted")
            for s in arg.sends:
                self._open_send(s, sends)
            for r in arg.recvs:
                self._open_recv(r, recvs)
            for c in arg.cancels:
                self._cancel(c)

    def _open_send(self, spec, sends, layered=False):
        rank = self.ranks.get("prefill")
        if rank is None:
            logger.error("kvroom: request %s asks to send, but this worker is no producer",
                         spec.req_id)
            self._events.append(("sent", spec.req_id, None))
            return
        try:
            sends[spec.req_id] = _Send(spec, rank.make_sender(spec.room), layered)
        except Error as e:  # a room id in use: the request's blocks go back now
            logger.warning("kvroom: request %s: cannot open room %d: %s", spec.req_id,
                           spec.room, e)
            self._events.append(("sent", spec.req_id, None))

    def _open_recv(self, spec: RecvSpec, recvs):
        rank = self.ranks.get("decode")
        failure = None
        handle = None
        if rank is None:
            failure = "this worker is no consumer"
        else:
            try:
                handle = rank.make_receiver(spec.room, spec.prefill_dp_rank)
                handle.init(spec.block_ids, 0, None, spec.prefix_tokens)
            except Error as e:
                failure = str(e)
        if failure is not None:
            logger.warning("kvroom: request %s: cannot receive room %d: %s", spec.req_id,
                           spec.room, failure)
            self.counters["recv_failed"] += 1
            self._recv_concluded(spec, False)
            return
        recvs[spec.req_id] = _Recv(spec, handle)

    def _cancel(self, spec: CancelSpec):
        rank = self.ranks.get("decode")
        if rank is None:
            return
        try:
            h = rank.make_receiver(spec.room, spec.prefill_dp_rank)
            h.abort("decode needs no KV of this room")
            h.clear()
        except Error as e:
            logger.debug("kvroom: cancelling room %d: %s", spec.room, e)

    def _send_layers(self, s: "_Send") -> None:
        """The computed layers of a layered send not sent yet, in layer
        order; the one that completes every layer is the room's last."""
        for name, buffers in self.layers.items():
            if name in s.ready and name not in s.sent:
                s.sent.add(name)
                last = len(s.sent) == len(self.layers)
                s.handle.send_buffers(s.pages, buffers, last)
                self.counters["layer_chunks"] += 1
                if last:
                    self.counters["blocks_sent"] += len(s.pages)

    def _poll(self, sends, recvs):
        done = []
        for req_id, s in sends.items():
            state = s.handle.poll()
            if state == KVPoll.WaitingForInput and not s.started:
                s.started = True
                # Decode holds the first tokens already (its prefix cache):
                # only the blocks after them move.
                skip = s.handle.decode_prefix_len() // self.block_size
                s.pages = s.spec.block_ids[skip:]
                s.handle.init(len(s.pages))
                if not s.layered:
                    s.handle.send(s.pages, True)
                    self.counters["blocks_sent"] += len(s.pages)
                state = s.handle.poll()
            if s.layered and s.started and s.ready - s.sent and state not in (KVPoll.Success,
                                                                             KVPoll.Failed):
                self._send_layers(s)
                state = s.handle.poll()
            if state in (KVPoll.Success, KVPoll.Failed):
                self.counters["sent" if state == KVPoll.Success else "send_failed"] += 1
                s.handle.clear()
                done.append(req_id)
                self._events.append(("sent", req_id, state == KVPoll.Success))
        for req_id in done:
            del sends[req_id]
        done = []
        for req_id, r in recvs.items():
            state = r.handle.poll()
            if state == KVPoll.Success:
                self.counters["received"] += 1
                self._recv_concluded(r.spec, True)
            elif state == KVPoll.Failed:
                f = r.handle.failure()
                if not r.aborted:
                    self.counters["recv_failed"] += 1
                    logger.debug("kvroom: request %s: %s", req_id, f)
                self._recv_concluded(r.spec, False)
            else:
                if r.spec.sync:
                    self._layers_landed(r)
                continue
            r.handle.clear()
            done.append(req_id)
        for req_id in done:
            del recvs[req_id]

    def _layers_landed(self, r: _Recv) -> None:
        """A synchronous load: its leading layers that landed now."""
        n = r.landed
        while n < len(self._layer_list) and r.handle.landed(self._layer_list[n]):
            n += 1
        if n != r.landed:
            r.landed = n
            with self._loads_cv:
                x = self._loads.get(r.spec.req_id)
                if x is not None:
                    x.layers = n
                self._loads_cv.notify_all()

    def _recv_concluded(self, spec: RecvSpec, ok: bool) -> None:
        """The event first, then (a synchronous load) the engine thread's
        wait ends: its ``get_finished`` finds the event."""
        blocks = None if ok else list(spec.block_ids)
        if spec.sync:
            self._events.append(("load_ok" if ok else "load_failed", spec.req_id, blocks))
            with self._loads_cv:
                x = self._loads.get(spec.req_id)
                if x is not None:
                    x.done = True
                self._loads_cv.notify_all()
        else:
            self._events.append(("recv_ok" if ok else "recv_failed", spec.req_id, blocks))


class FinishedTracker:
    """vLLM's rules for what ``get_finished`` may return: a finished send
    only once vLLM named the request finished (this call or an earlier
    one); every failed block no later than the pass that returns its
    request. Holds only what is in flight."""

    def __init__(self):
        self._open: Set[str] = set()        # sends submitted, not concluded
        self._concluded: Set[str] = set()   # sends concluded, not yet named
        self._named: Set[str] = set()       # named finished, send still open
        self.load_errors: Set[int] = set()

    def submit(self, meta: KvroomMetadata) -> None:
        self._open.update(s.req_id for s in meta.sends)
        self._open.update(s.req_id for s in getattr(meta, "saves", ()))

    def step(self, finished_req_ids, events) -> Tuple[Optional[Set[str]], Optional[Set[str]]]:
        sending: Set[str] = set()
        recving: Set[str] = set()
        for kind, req_id, payload in events:
            if kind == "sent":
                self._open.discard(req_id)
                self._concluded.add(req_id)
            elif kind == "recv_ok":
                recving.add(req_id)
            elif kind == "recv_failed":
                recving.add(req_id)
                self.load_errors.update(payload or ())
            elif kind == "load_failed":
                # A synchronous load: vLLM hears of it only as load errors.
                self.load_errors.update(payload or ())
        # Names of requests without a send (decode's, plain ones) are not
        # kept: memory follows what is in flight.
        self._named |= set(finished_req_ids or ()) & (self._open | self._concluded)
        sending = self._concluded & self._named
        self._concluded -= sending
        self._named -= sending
        return (sending or None), (recving or None)

    def take_load_errors(self) -> Set[int]:
        out, self.load_errors = self.load_errors, set()
        return out


def layer_buffers(kv_caches: Dict[str, Any], num_blocks: int) -> Dict[str, List[int]]:
    """Per layer name, its buffers' indices among ``kv_buffers``'s."""
    out, at = {}, 0
    for name, t in kv_caches.items():
        shape = tuple(t.shape)
        n = 2 if len(shape) >= 2 and shape[0] == 2 and shape[1] == num_blocks else 1
        out[name] = list(range(at, at + n))
        at += n
    return out


def kv_buffers(kv_caches: Dict[str, Any], num_blocks: int):
    """(address, bytes, block bytes) per registered buffer, in layer order,
    for vLLM's per-layer KV tensors: K and V apart for (2, num_blocks, ...)
    (FlashAttention's layout), one buffer for (num_blocks, ...) (FlashInfer's
    (num_blocks, 2, ...), MLA's latent). A block is one kvroom page."""
    out = []
    for name, t in kv_caches.items():
        if not t.is_contiguous():
            raise ValueError(f"kvroom: the KV cache of {name} is not contiguous")
        shape = tuple(t.shape)
        if len(shape) >= 2 and shape[0] == 2 and shape[1] == num_blocks:
            parts = (t[0], t[1])
        elif shape and shape[0] == num_blocks:
            parts = (t,)
        else:
            raise ValueError(f"kvroom: cannot tell the blocks of {name}'s KV cache {shape} "
                             f"({num_blocks} blocks)")
        for p in parts:
            out.append((int(p.data_ptr()), int(p.numel() * p.element_size()),
                        int(p[0].numel() * p.element_size())))
    return out
