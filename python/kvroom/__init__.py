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


_core._set_error_class(KVTransferError)


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


# A room's handles are the engine's types themselves (no Python frame on a
# call a scheduler makes for every request): Sender (prefill) and Receiver
# (decode), whose poll() returns KVPoll and failure() a KVTransferError.
Sender = _core.Sender
Receiver = _core.Receiver


class Rank:
    """One prefill or decode rank (made by ``Runtime.add_rank``).

    ``make_sender(room)`` opens the prefill side of a room (a
    :class:`Sender`), ``make_receiver(room, prefill_dp_rank=0)`` the decode
    side fed by that DP group (a :class:`Receiver`); both raise
    :class:`Error` when the room is open already or the rank is at its
    limit of rooms."""

    def __init__(self, impl, buffers):
        self._impl = impl
        self._buffers = buffers  # keeps registered numpy arrays alive
        # Opening a room is per request: the engine's methods, bound once
        # (no Python frame of ours on the way; see the class docstring).
        self.make_sender = impl.make_sender
        self.make_receiver = impl.make_receiver

    @property
    def id(self):
        return self._impl.id

    @property
    def control_address(self):
        return self._impl.control_address

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
        # Any case (Python's WARNING too); ValueError for a log level other
        # than trace, debug, info, warn(ing), error, critical or off.
        if isinstance(log_level, str):
            log_level = log_level.lower()
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
