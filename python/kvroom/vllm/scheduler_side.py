"""The scheduler role of kvroom's vLLM connector, as a plain class: what to
load, send and give up per request, from vLLM's calls. No vLLM import: the
request and block objects are read duck-typed, so this is tested alone.

A request moves through kvroom as one bootstrap room:
- prefill (``do_remote_decode``): when vLLM finishes it, its computed blocks
  are held (``request_finished`` returns True) and the workers are told to
  send them into room R; the returned ``kv_transfer_params`` name R and the
  prefill's DP rank. The blocks are freed once the room concludes (decode
  confirmed every byte, or failed, or never came within the prefill's hold:
  kvroom's bootstrap deadline);
- decode (``do_remote_prefill`` with R): the prompt tokens beyond the local
  prefix-cache hit load asynchronously into the blocks vLLM allocated; the
  workers open R's receiving side with them.
A decode request that ends before its load started still opens R, only to
abort it: the prefill lets go of its blocks at once instead of at its hold.

Layer by layer (``layerwise``): a prefill request whose prompt completes in
this step opens R before the forward pass (``SaveSpec``), and each layer's
K and V go as soon as the pass computed them (``save_kv_layer``); with
decode's destination there already (the proxy named R and sent the request
to both), what is left after the last layer is one layer's transfer.

Loaded layer by layer (``layer_load``, decode): the load is synchronous in
vLLM's sense. The request runs in the step its blocks were allocated, all
its prompt but the last token counted as computed; the workers open R
before the forward pass and each layer's attention waits only for that
layer's K and V (``wait_for_layer_load``), so the first layers compute
while the later ones still move. The last prompt token is computed here
(vLLM schedules at least one token), as with every load.
"""

import dataclasses
import secrets
from typing import Any, Dict, List, Optional, Tuple

#: vLLM's statuses of a request that finished by generating (RequestStatus
#: names): only those hand their blocks to a decode.
_DONE_GENERATING = ("FINISHED_LENGTH_CAPPED", "FINISHED_STOPPED")

#: kv_transfer_params keys.
ROOM = "kvroom_room"
PREFILL_DP_RANK = "kvroom_prefill_dp_rank"


@dataclasses.dataclass
class SendSpec:
    """Prefill: send these blocks (the request's first tokens, from token 0)
    into ``room``."""
    req_id: str
    room: int
    block_ids: List[int]


@dataclasses.dataclass
class SaveSpec:
    """Prefill, layer by layer: this step's forward pass completes the
    prompt of ``req_id``; open ``room`` now and send each layer of
    ``block_ids`` as the pass computes it."""
    req_id: str
    room: int
    block_ids: List[int]


@dataclasses.dataclass
class DropSpec:
    """Prefill, layer by layer: ``req_id`` was aborted; abort its room (its
    blocks are freed once the room concluded)."""
    req_id: str


@dataclasses.dataclass
class RecvSpec:
    """Decode: receive ``room`` into ``block_ids``, the blocks after the
    ``prefix_tokens`` this rank holds already (its prefix-cache hit)."""
    req_id: str
    room: int
    block_ids: List[int]
    prefix_tokens: int
    prefill_dp_rank: int
    #: Loaded layer by layer during this step's forward pass (vLLM's
    #: synchronous loads: ``wait_for_layer_load`` waits for each layer),
    #: instead of before the request runs.
    sync: bool = False


@dataclasses.dataclass
class CancelSpec:
    """Decode: the request ended before its load started; abort ``room`` so
    its prefill frees the blocks it holds for it."""
    room: int
    prefill_dp_rank: int


@dataclasses.dataclass
class KvroomMetadata:
    """Scheduler -> workers, one per step (picklable: vLLM ships it to every
    worker process)."""
    sends: List[SendSpec] = dataclasses.field(default_factory=list)
    recvs: List[RecvSpec] = dataclasses.field(default_factory=list)
    cancels: List[CancelSpec] = dataclasses.field(default_factory=list)
    saves: List[SaveSpec] = dataclasses.field(default_factory=list)
    drops: List[DropSpec] = dataclasses.field(default_factory=list)


def _status_name(request) -> str:
    s = getattr(request, "status", None)
    return getattr(s, "name", str(s))


def room_of(params) -> Optional[int]:
    """The room named by kv_transfer_params, or None. A room is a
    non-negative 63-bit integer (a string of one is taken too: JSON proxies
    may carry it as one)."""
    if not params or params.get(ROOM) is None:
        return None
    try:
        room = int(params[ROOM])
    except (TypeError, ValueError):
        return None
    return room if 0 <= room < (1 << 63) else None


class KvroomScheduler:
    """vLLM's scheduler-side connector calls, decided."""

    def __init__(self, block_size: int, dp_rank: int = 0, layerwise: bool = False,
                 layer_load: bool = False):
        if block_size <= 0:
            raise ValueError(f"kvroom: a block size must be positive, got {block_size}")
        self.block_size = block_size
        self.dp_rank = dp_rank
        self.layerwise = layerwise
        self.layer_load = layer_load
        self._next = KvroomMetadata()
        # Layer by layer: prefill requests for a decode, until their prompt
        # is scheduled to completion (request, block ids so far), and those
        # whose room is open (req_id -> room) until vLLM finishes them.
        self._producing: Dict[str, Tuple[Any, List[int]]] = {}
        self._saving: Dict[str, int] = {}

    # -- decode ------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> Tuple[int, bool]:
        """The prompt tokens beyond the local hit come from the room,
        asynchronously; layer by layer, all but the last (computed in the
        step that loads the rest). Side-effect free: vLLM may ask again."""
        params = getattr(request, "kv_transfer_params", None)
        if params and params.get("do_remote_prefill") and room_of(params) is not None:
            count = len(request.prompt_token_ids or ()) - num_computed_tokens
            if self.layer_load:
                count -= 1
            if count > 0:
                return count, not self.layer_load
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        """First call for a loading request: its load is planned; a second
        call (vLLM's, after the load) finds the request marked and does
        nothing."""
        params = getattr(request, "kv_transfer_params", None)
        if self.layerwise and params and params.get("do_remote_decode") \
                and request.request_id not in self._saving:
            self._producing[request.request_id] = (
                request, [int(b) for b in blocks.get_block_ids()[0]])
        if not params or not params.get("do_remote_prefill"):
            return
        room = room_of(params)
        # One load per request, whatever happens next.
        params["do_remote_prefill"] = False
        if room is None:
            return
        dp = int(params.get(PREFILL_DP_RANK, 0) or 0)
        if num_external_tokens <= 0:
            # All of it hit locally: the prefill's blocks are not needed.
            self._next.cancels.append(CancelSpec(room, dp))
            return
        if self.layer_load:
            # vLLM cached the loaded blocks at allocation (a synchronous
            # load lands within this step): they follow the local hit.
            prefix = len(request.prompt_token_ids or ()) - num_external_tokens - 1
            ids = [int(b) for b in blocks.get_block_ids()[0][prefix // self.block_size:]]
        else:
            prefix = len(request.prompt_token_ids or ()) - num_external_tokens
            ids = [int(b) for b in blocks.get_unhashed_block_ids()]
        self._next.recvs.append(RecvSpec(request.request_id, room, ids, prefix, dp,
                                         self.layer_load))

    # -- both --------------------------------------------------------------

    def request_finished(self, request, block_ids: List[int]) -> Tuple[bool, Optional[Dict[str, Any]]]:
        params = getattr(request, "kv_transfer_params", None)
        if not params:
            return False, None
        if params.get("do_remote_prefill"):
            # Decode: ended (aborted) before its load was planned.
            params["do_remote_prefill"] = False
            room = room_of(params)
            if room is not None:
                self._next.cancels.append(
                    CancelSpec(room, int(params.get(PREFILL_DP_RANK, 0) or 0)))
            return False, None
        if not params.get("do_remote_decode"):
            return False, None
        # Prefill.
        self._producing.pop(request.request_id, None)
        saving = self._saving.pop(request.request_id, None)
        if _status_name(request) not in _DONE_GENERATING:
            if saving is not None:
                # Its room is open and may be sending: the blocks are
                # freed once it concluded.
                self._next.drops.append(DropSpec(request.request_id))
                return True, None
            return False, None  # aborted or errored: no decode will ask
        tokens = int(getattr(request, "num_computed_tokens", 0) or 0)
        n = -(-tokens // self.block_size)
        blocks = [int(b) for b in list(block_ids)[:n]]
        if not blocks:
            return False, None
        if saving is not None:
            # Sent layer by layer from its room, opened before the pass.
            room = saving
        else:
            room = room_of(params)
            if room is None:
                room = secrets.randbits(63)
            self._next.sends.append(SendSpec(request.request_id, room, blocks))
        return True, {"do_remote_prefill": True, "do_remote_decode": False, ROOM: room,
                      PREFILL_DP_RANK: self.dp_rank, "remote_num_tokens": tokens}

    def build_connector_meta(self, scheduler_output=None) -> KvroomMetadata:
        """What the workers do this step; the next step starts empty."""
        if self._producing and scheduler_output is not None:
            self._plan_saves(scheduler_output)
        out, self._next = self._next, KvroomMetadata()
        return out

    def _plan_saves(self, so) -> None:
        """Layer by layer: the prefill requests whose prompt this step's pass
        completes open their rooms now (vLLM builds this before it advances
        ``num_computed_tokens``)."""
        cached = getattr(so, "scheduled_cached_reqs", None)
        for i, req_id in enumerate(getattr(cached, "req_ids", None) or ()):
            if req_id in self._producing:
                new = cached.new_block_ids[i]
                ids = self._producing[req_id][1]
                if req_id in (getattr(cached, "resumed_req_ids", None) or ()):
                    ids.clear()  # preempted and back: its blocks are these
                if new:
                    ids.extend(int(b) for b in new[0])
        scheduled = getattr(so, "num_scheduled_tokens", None) or {}
        for req_id in [r for r in scheduled if r in self._producing]:
            request, blocks = self._producing[req_id]
            prompt = len(request.prompt_token_ids or ())
            if int(request.num_computed_tokens) + int(scheduled[req_id]) < prompt:
                continue  # a later step completes it
            del self._producing[req_id]
            n = -(-prompt // self.block_size)
            if len(blocks) < n:
                continue  # cannot tell its blocks: it goes whole when it finishes
            room = room_of(request.kv_transfer_params)
            if room is None:
                room = secrets.randbits(63)
            self._saving[req_id] = room
            self._next.saves.append(SaveSpec(req_id, room, blocks[:n]))
