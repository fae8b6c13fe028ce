"""kvroom: KV-cache transfer rooms for prefill/decode disaggregated serving.

The core of kvroom's C++ API: a :class:`Runtime` (one actor system), its
ranks, and per request a :class:`Sender` (prefill) or :class:`Receiver`
(decode) whose ``poll()`` returns a :class:`KVPoll` and whose failure is a
:class:`KVTransferError` with SGLang's fields and text form. A rank and its
handles belong to one Python thread (a scheduler loop's).
"""

import enum
import mmap
import os
import secrets

from . import _core
from ._core import Error

__all__ = ["Runtime", "Rank", "Sender", "Receiver", "KVPoll", "KVTransferError", "Error",
           "buffer_of", "SharedBuffer"]


class KVPoll(enum.IntEnum):
    """A room's state, with SGLang's names and numbers."""
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


# By number; the engine's poll() returns these members themselves (poll()
# runs for every request every scheduler iteration: no lookup on the way).
_POLL = tuple(sorted(KVPoll, key=int))
_core._set_poll_values(_POLL)


class KVTransferError(Exception):
    """Why a room failed; ``str()`` is SGLang's form. Unlike SGLang, a
    propagated failure still carries the origin's reason and rank, and its
    class (``cause``: 'timeout_bootstrapping', 'peer_lost', 'transport',
    'bad_input', 'abort', 'fault', 'integrity', ... 'other'), set where it
    was identified."""

    def __init__(self, bootstrap_room, failure_reason, is_from_another_rank=False,
                 origin_rank=-1, cause="other"):
        super().__init__(failure_reason)
        self.bootstrap_room = bootstrap_room
        self.failure_reason = failure_reason
        self.is_from_another_rank = is_from_another_rank
        self.origin_rank = origin_rank
        self.cause = cause

    def __str__(self):
        return f"KVTransferError(bootstrap_room={self.bootstrap_room}): {self.failure_reason}"


def buffer_of(array, page_bytes):
    """(address, size, page bytes) of a C-contiguous numpy array, for
    ``Runtime.add_rank``'s ``kv``/``aux`` lists. The caller keeps the array
    alive as long as the rank."""
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("a registered buffer must be C-contiguous")
    if page_bytes <= 0 or array.nbytes % page_bytes != 0:
        raise ValueError(f"{array.nbytes} bytes do not split into pages of {page_bytes}")
    return (array.ctypes.data, array.nbytes, page_bytes)


class SharedBuffer:
    """Host memory other processes on this host can write through kvroom's
    shm data plane: a POSIX shared-memory segment (mode 0600, an unguessable
    name) mapped as a numpy uint8 array. Registered like any array
    (``buffer_of(buf.array, page_bytes)``); ``close()`` unlinks the segment
    once no rank uses it any more."""

    def __init__(self, nbytes):
        import numpy as np
        if nbytes <= 0:
            raise ValueError("a shared buffer needs a positive size")
        self.name = f"kvroom-{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open("/dev/shm/" + self.name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, nbytes)
            self._map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.array = np.frombuffer(self._map, dtype=np.uint8)

    def close(self):
        if self.name:
            try:
                os.unlink("/dev/shm/" + self.name)
            except FileNotFoundError:
                pass
            self.name = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class _Handle:
    __slots__ = ("_impl", "poll")

    def __init__(self, impl):
        self._impl = impl
        # poll() is the engine's method itself, bound once: no Python frame
        # between a scheduler and the read (KVPoll, see _POLL).
        self.poll = impl.poll

    @property
    def room(self):
        return self._impl.room

    def failure(self):
        """The room's KVTransferError once ``poll()`` returned Failed, else None."""
        f = self._impl.failure()
        return None if f is None else KVTransferError(*f)

    def group_failure(self):
        """The KVTransferError of a room the scheduler's group says failed
        (a MIN all-reduce over its ranks' polls): ``failure()`` once this rank
        knows, until then one marked ``is_from_another_rank`` with
        ``origin_rank`` -1 (its root cause follows the fan-out; a later call
        gives it). Never claims this rank as the origin."""
        return KVTransferError(*self._impl.group_failure())

    def abort(self, reason=""):
        """Fails the room everywhere; its reason reads "aborted by <side>
        scheduler[: reason]"."""
        self._impl.abort(reason)

    def clear(self):
        self._impl.clear()


class Sender(_Handle):
    """Prefill side of one room."""
    __slots__ = ()

    def init(self, num_kv_indices, aux_index=0):
        self._impl.init(num_kv_indices, aux_index)

    def send(self, kv_indices, is_last, state_indices=None):
        """``state_indices`` (hybrid models): the request's state slots or
        window pages, with the last chunk only."""
        self._impl.send(kv_indices, is_last, state_indices)

    def send_buffers(self, kv_indices, kv_buffers, is_last, state_indices=None):
        """Pages of some KV buffers only (``kv_buffers``: indices into the
        rank's KV buffers, a layer's K and V), sent as soon as the forward
        pass computed that layer. Every buffer receives the declared pages
        in order; the last chunk leaves none unsent."""
        self._impl.send_buffers(kv_indices, list(kv_buffers), is_last, state_indices)

    def decode_prefix_len(self):
        """Tokens the decode side holds already (its radix cache), known from
        WaitingForInput on: send and declare only the pages after them."""
        return self._impl.decode_prefix_len()


class Receiver(_Handle):
    """Decode side of one room."""
    __slots__ = ()

    def init(self, kv_indices, aux_index=0, state_indices=None, decode_prefix_len=0):
        """``decode_prefix_len``: tokens this rank holds already (a radix
        cache hit); ``kv_indices`` are the pages after them."""
        self._impl.init(kv_indices, aux_index, state_indices, decode_prefix_len)

    def landed(self, kv_buffers):
        """Whether every one of ``kv_buffers`` (indices into the rank's KV
        buffers: a layer's K and V) holds every byte this room puts there,
        so that layer may be computed while the rest still moves (vLLM's
        ``wait_for_layer_load``). True for all once the room succeeded;
        buffer by buffer where the room's one source writes whole pages and
        the integrity check is off. A room that then reads Failed failed:
        its pages are recomputed whatever landed."""
        return self._impl.landed(list(kv_buffers))


class Rank:
    """One prefill or decode rank (made by ``Runtime.add_rank``)."""

    def __init__(self, impl, buffers):
        self._impl = impl
        self._buffers = buffers  # keeps registered numpy arrays alive

    @property
    def id(self):
        return self._impl.id

    @property
    def control_address(self):
        return self._impl.control_address

    def make_sender(self, room):
        return Sender(self._impl.make_sender(room))

    def make_receiver(self, room, prefill_dp_rank=0):
        return Receiver(self._impl.make_receiver(room, prefill_dp_rank))

    def open_rooms(self):
        return self._impl.open_rooms()

    @property
    def calls_after_conclusion(self):
        """Calls on rooms that had concluded already (a peer's abort raced
        them): they did nothing."""
        return self._impl.calls_after_conclusion

    def stats(self):
        return self._impl.stats()

    def shape_of_side(self, side):
        """What the directory lists of side 'prefill' or 'decode' as this
        rank knows it: ``ranks``, ``dp_size`` (highest DP rank + 1),
        ``tp_size``, ``pp_size``, ``tokens_per_page`` (0: no layout
        declared) and ``complete`` (every DP group holds TP x PP ranks)."""
        return self._impl.shape_of_side(side)

    def close(self):
        self._impl.close()


class Runtime:
    """One kvroom runtime: an actor system, its bootstrap registry, ranks."""

    #: ``add_rank(device_id=...)``: each buffer's memory kind from its pointer.
    DEVICE_FROM_POINTER = -2

    def __init__(self, network=False, secret_file="", log_level="warn", threads=0):
        self._impl = _core.Runtime(network, secret_file, log_level, threads)

    def publish_registry(self, port=0, host="127.0.0.1"):
        return self._impl.publish_registry(port, host)

    def connect_registry(self, host, port, timeout_ms=30000):
        self._impl.connect_registry(host, port, timeout_ms)

    def use_directory(self, url, prefix="/kvroom/default", lease_ttl_ms=5000, timeout_ms=30000,
                      cacert="", cert="", key="", user="", password=""):
        """The deployment's directory on etcd instead of a registry:
        ``url`` is ``etcd://host:port[,host:port...]`` (``etcds://`` for
        TLS, with ``cacert`` and, if etcd asks, ``cert``/``key``; ``user``/
        ``password`` for etcd's auth). Every rank of this runtime keeps its
        entry under ``prefix`` on this process's lease of ``lease_ttl_ms``.
        Call before ``add_rank``; needs ``network=True``."""
        self._impl.use_directory(url, prefix, lease_ttl_ms, timeout_ms, cacert, cert, key, user,
                                 password)

    def add_rank(self, side, tp_rank=0, tp_size=1, dp_rank=0, id=-1, kv=(), aux=(),
                 device_id=-1, transport="local", network=False, host="127.0.0.1",
                 keep=(), fail_rooms=(), state=(), layout=None, integrity="off", dp_size=0,
                 timeouts=None, pull=False):
        """Starts a rank. ``kv``/``aux``/``state``: (address, size, page
        bytes) per buffer (``buffer_of(array, page_bytes)``, or SGLang's
        ``data_ptr()``s; ``state``: a hybrid model's state buffers, whose
        pages are per-request slots or window pages); ``layout``: what part
        of the model the rank holds (a dict: ``kv_heads``, ``head_dim``,
        ``bytes_per_element``, ``tokens_per_page``, ``page_order`` 'hnd' or
        'nhd', ``mla``, ``layers``, ``first_layer``, ``pp_size``,
        ``pp_rank``), which lets it move rooms to ranks of another TP size;
        ``device_id``: -1 host memory, a GPU's id, or
        ``Runtime.DEVICE_FROM_POINTER`` to tell each buffer by its pointer;
        ``keep``: objects (arrays) to keep alive with it; ``fail_rooms``
        (tests): rooms whose transfers this rank's data plane fails;
        ``host``: the tcp addresses, comma-separated (one data path each);
        ``integrity``: 'off' or 'xxh3' (every rank of a deployment the
        same): decode checks each part against prefill's digest; ``dp_size``:
        the DP groups of this side (0: not said), which its peers' view of the
        side's shape (``Rank.shape_of_side``) rests on before every group has
        registered; ``timeouts``: the deadlines of this rank's rooms, a dict
        of ``bootstrap_ms`` (until the peer side shows up: a prefill's hold
        on its pages for a decode that never comes), ``waiting_ms``,
        ``transferring_ms`` (kvroom's defaults for those left out); ``pull``
        (decode only): read the prefill's pages instead of the prefill
        writing them (vLLM's NIXL direction); the prefill grants each chunk
        and its room's deadlines are the read lease."""
        impl = self._impl.add_rank(side, tp_rank, tp_size, dp_rank, id, list(kv), list(aux),
                                   device_id, transport, network, host, list(fail_rooms),
                                   list(state), layout, integrity, dp_size, timeouts, pull)
        return Rank(impl, tuple(keep))
