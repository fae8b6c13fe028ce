"""kvroom's Python core: rooms byte-exact, failures with SGLang's fields, bad
input refused with a clear exception (never a crash)."""

import numpy as np
import pytest
from _helpers import secret_file, until

import kvroom
from kvroom import KVPoll, KVTransferError

PAGE = 4096
PAGES = 16
AUX = 64
SLOTS = 4


class Cache:
    """One K and one V buffer and one aux buffer of numpy memory."""

    def __init__(self, seed=None):
        rng = np.random.default_rng(seed)
        if seed is None:
            self.kv = [np.zeros(PAGE * PAGES, np.uint8) for _ in range(2)]
            self.aux = np.zeros(AUX * SLOTS, np.uint8)
        else:
            self.kv = [rng.integers(0, 256, PAGE * PAGES, dtype=np.uint8) for _ in range(2)]
            self.aux = rng.integers(0, 256, AUX * SLOTS, dtype=np.uint8)

    def specs(self):
        return dict(kv=[kvroom.buffer_of(b, PAGE) for b in self.kv],
                    aux=[kvroom.buffer_of(self.aux, AUX)], keep=(self.kv, self.aux))

    def page(self, buf, i):
        return self.kv[buf][i * PAGE:(i + 1) * PAGE]

    def slot(self, i):
        return self.aux[i * AUX:(i + 1) * AUX]


@pytest.fixture
def pair():
    rt = kvroom.Runtime()
    src, dst = Cache(seed=7), Cache()
    p = rt.add_rank("prefill", **src.specs())
    d = rt.add_rank("decode", **dst.specs())
    yield rt, p, d, src, dst
    p.close()
    d.close()


def drive(s, r, src_pages, dst_pages, src_aux, dst_aux, chunks=1):
    assert until(lambda: r.poll() == KVPoll.WaitingForInput)
    r.init(np.array(dst_pages, np.int64), dst_aux)
    assert until(lambda: s.poll() == KVPoll.WaitingForInput)
    s.init(len(src_pages), src_aux)
    per = (len(src_pages) + chunks - 1) // chunks
    for c in range(chunks):
        part = src_pages[c * per:(c + 1) * per]
        s.send(np.array(part, np.int32), c + 1 == chunks)


def test_kvpoll_has_sglangs_names_and_numbers():
    assert [(x.name, int(x)) for x in KVPoll] == [
        ("Failed", 0), ("Bootstrapping", 1), ("WaitingForInput", 2), ("Transferring", 3),
        ("Success", 4)]


def test_handles_are_the_packages_types_and_take_any_sequence(pair):
    """Sender and Receiver are the engine's types (no Python wrapper): what
    a scheduler gets is a kvroom.Sender/Receiver, failure() a
    KVTransferError, and buffer lists may be any iterable of ints."""
    rt, p, d, src, dst = pair
    s, r = p.make_sender(41), d.make_receiver(41)
    assert isinstance(s, kvroom.Sender) and isinstance(r, kvroom.Receiver)
    assert (s.room, r.room) == (41, 41) and r.failure() is None
    assert type(r.poll()) is KVPoll
    assert r.landed(b for b in (0, 1)) is False and r.landed(np.array([0], np.int32)) is False
    with pytest.raises(TypeError):
        r.landed(["0"])
    with pytest.raises(TypeError):
        s.send("pages", True)
    assert "init" in (kvroom.Receiver.init.__doc__ or "")
    s.abort("from the test")
    assert until(lambda: r.poll() == KVPoll.Failed)
    err = r.failure()
    assert isinstance(err, KVTransferError) and err.is_from_another_rank and err.cause == "abort"
    assert "from the test" in str(err) and isinstance(r.group_failure(), KVTransferError)
    s.clear()
    r.clear()


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_room_lands_byte_exact(pair, chunks):
    rt, p, d, src, dst = pair
    s, r = p.make_sender(1), d.make_receiver(1)
    drive(s, r, [0, 1, 2, 9], [5, 6, 7, 3], 2, 1, chunks)
    assert until(lambda: r.poll() == KVPoll.Success and s.poll() == KVPoll.Success)
    for buf in range(2):
        for sp, dp in zip([0, 1, 2, 9], [5, 6, 7, 3]):
            assert np.array_equal(dst.page(buf, dp), src.page(buf, sp))
    assert np.array_equal(dst.slot(1), src.slot(2))
    # Nothing outside the room's pages and slot changed.
    untouched = [i for i in range(PAGES) if i not in (5, 6, 7, 3)]
    assert all(not dst.page(b, i).any() for b in range(2) for i in untouched)
    assert r.failure() is None
    s.clear()
    r.clear()


@pytest.mark.parametrize("layered", [False, True])
def test_a_pulling_decode_rank_reads_its_room_byte_exact(layered):
    """``pull=True``: the decode rank reads the prefill's pages; with
    ``send_buffers`` the prefill offers them layer by layer (here: buffer
    0, then buffer 1 with the aux slot)."""
    rt = kvroom.Runtime()
    src, dst = Cache(seed=11), Cache()
    p = rt.add_rank("prefill", **src.specs())
    d = rt.add_rank("decode", pull=True, **dst.specs())
    try:
        s, r = p.make_sender(3), d.make_receiver(3)
        assert until(lambda: r.poll() == KVPoll.WaitingForInput)
        r.init(np.array([5, 6, 7], np.int64), 1)
        assert until(lambda: s.poll() == KVPoll.WaitingForInput)
        s.init(3, 2)
        if layered:
            s.send_buffers([0, 1, 9], [0], False)
            s.send_buffers([0, 1, 9], [1], True)
        else:
            s.send([0, 1, 9], True)
        assert until(lambda: r.poll() == KVPoll.Success and s.poll() == KVPoll.Success)
        for buf in range(2):
            for sp, dp in zip([0, 1, 9], [5, 6, 7]):
                assert np.array_equal(dst.page(buf, dp), src.page(buf, sp))
        assert np.array_equal(dst.slot(1), src.slot(2))
        s.clear()
        r.clear()
    finally:
        p.close()
        d.close()


def test_pull_is_a_decode_rank_s_choice():
    rt = kvroom.Runtime()
    with pytest.raises(kvroom.Error, match="pull is a decode rank's choice"):
        rt.add_rank("prefill", pull=True, **Cache().specs())


def test_a_failure_has_one_origin_and_reaches_the_other_side(pair):
    rt, p, d, src, dst = pair
    s, r = p.make_sender(2), d.make_receiver(2)
    assert until(lambda: r.poll() == KVPoll.WaitingForInput)
    r.init([0, 1], 0)
    assert until(lambda: s.poll() == KVPoll.WaitingForInput)
    s.abort("the prefill scheduler gave up")
    assert until(lambda: s.poll() == KVPoll.Failed and r.poll() == KVPoll.Failed)
    mine, theirs = s.failure(), r.failure()
    assert isinstance(mine, KVTransferError) and isinstance(theirs, KVTransferError)
    assert not mine.is_from_another_rank
    assert theirs.is_from_another_rank
    assert theirs.origin_rank == p.id
    assert "the prefill scheduler gave up" in theirs.failure_reason
    assert str(theirs).startswith("KVTransferError(bootstrap_room=2): ")
    s.clear()
    r.clear()


def test_bad_input_is_a_clear_exception(pair):
    rt, p, d, src, dst = pair
    # Both sides open: the prefill side decides the room's failure at once.
    s, r = p.make_sender(3), d.make_receiver(3)
    assert until(lambda: r.poll() == KVPoll.WaitingForInput)
    with pytest.raises(TypeError, match="integer array"):
        r.init(np.array([0.5, 1.5]), 0)
    with pytest.raises(TypeError, match="one-dimensional"):
        r.init(np.zeros((2, 2), np.int64), 0)
    with pytest.raises(TypeError, match="sequence of ints"):
        r.init("0,1", 0)
    with pytest.raises(TypeError, match="must hold ints"):
        r.init([0, "1"], 0)
    # Out-of-range pages fail the room with the reason (no crash, no write).
    r.init([0, PAGES + 100], 0)
    assert until(lambda: r.poll() == KVPoll.Failed)
    assert "out of range" in r.failure().failure_reason
    assert until(lambda: s.poll() == KVPoll.Failed)
    assert s.failure().is_from_another_rank
    assert not any(b.any() for b in dst.kv)
    s.clear()
    # A call on a room that concluded does nothing (a peer's abort may race
    # any call; poll() tells the outcome), and is counted.
    late = d.stats()["calls_after_conclusion"]
    r.init([0], 0)
    r.abort()
    assert d.stats()["calls_after_conclusion"] == late + 2
    assert r.poll() == KVPoll.Failed
    r.clear()
    with pytest.raises(kvroom.Error):
        r.abort("after clear")
    with pytest.raises(kvroom.Error, match="already open"):
        p.make_sender(4)
        p.make_sender(4)
    with pytest.raises(ValueError, match="side must be"):
        rt.add_rank("middle")
    with pytest.raises(ValueError, match="do not split"):
        kvroom.buffer_of(np.zeros(100, np.uint8), 64)
    with pytest.raises(ValueError, match="log level 'loud'"):
        kvroom.Runtime(log_level="loud")
    kvroom.Runtime(log_level="WARNING")  # Python's name, any case


def test_a_closed_rank_is_refused_not_a_crash(pair):
    rt, p, d, src, dst = pair
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.make_sender(5)


def test_2p_2d_in_one_process():
    rt = kvroom.Runtime()
    caches = {(side, t): Cache(seed=t + 1 if side == "prefill" else None)
              for side in ("prefill", "decode") for t in range(2)}
    ranks = {k: rt.add_rank(k[0], tp_rank=k[1], tp_size=2, **c.specs()) for k, c in caches.items()}
    senders = [ranks[("prefill", t)].make_sender(9) for t in range(2)]
    receivers = [ranks[("decode", t)].make_receiver(9) for t in range(2)]
    for s, r in zip(senders, receivers):
        drive(s, r, [3, 4], [10, 11], 0, 2)
    assert until(lambda: all(h.poll() == KVPoll.Success for h in senders + receivers))
    for t in range(2):
        src, dst = caches[("prefill", t)], caches[("decode", t)]
        for buf in range(2):
            assert np.array_equal(dst.page(buf, 10), src.page(buf, 3))
            assert np.array_equal(dst.page(buf, 11), src.page(buf, 4))
        assert np.array_equal(dst.slot(2), src.slot(0))
    for h in senders + receivers:
        h.clear()
    for r in ranks.values():
        r.close()


def _decode_process(port, secret, queue):
    """A decode rank in its own process: receives room 21, reports the pages."""
    rt = kvroom.Runtime(network=True, secret_file=secret)
    rt.connect_registry("127.0.0.1", port)
    dst = Cache()
    d = rt.add_rank("decode", network=True, transport="auto", **dst.specs())
    r = d.make_receiver(21)
    ok = until(lambda: r.poll() == KVPoll.WaitingForInput)
    r.init([1, 2], 3)
    ok = ok and until(lambda: kvroom.KVPoll(r.poll()) in (KVPoll.Success, KVPoll.Failed))
    queue.put((r.poll() == KVPoll.Success, bytes(dst.page(0, 1)), bytes(dst.page(1, 2)),
               bytes(dst.slot(3))))
    r.clear()
    d.close()


def test_prefill_and_decode_in_two_processes(tmp_path):
    import multiprocessing as mp
    secret = secret_file(tmp_path)
    rt = kvroom.Runtime(network=True, secret_file=secret)
    port = rt.publish_registry(0, "127.0.0.1")
    src = Cache(seed=5)
    p = rt.add_rank("prefill", network=True, transport="auto", **src.specs())
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_decode_process, args=(port, secret, queue))
    child.start()
    try:
        s = p.make_sender(21)
        assert until(lambda: s.poll() in (KVPoll.WaitingForInput, KVPoll.Failed), 30)
        assert s.poll() == KVPoll.WaitingForInput, s.failure()
        s.init(2, 0)
        s.send([7, 8], True)
        ok, page1, page2, slot3 = queue.get(timeout=30)
        assert ok
        assert page1 == bytes(src.page(0, 7))
        assert page2 == bytes(src.page(1, 8))
        assert slot3 == bytes(src.slot(0))
        assert until(lambda: s.poll() == KVPoll.Success)
        s.clear()
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    p.close()


def _prefill_process(port, secret, ready):
    """A prefill rank in its own process that never opens a room."""
    rt = kvroom.Runtime(network=True, secret_file=secret)
    rt.connect_registry("127.0.0.1", port)
    p = rt.add_rank("prefill", network=True, transport="auto", **Cache().specs())
    ready.set()
    import time
    time.sleep(600)
    p.close()


def test_a_prefill_lost_before_any_link_fails_its_waiting_rooms_now(tmp_path):
    """Decode's rooms wait on a prefill that stopped before they could link
    to it; the registry sees it go (stopped past the connection timeout,
    then SIGKILLed): the rooms fail with it as the cause, long before their
    60 s bootstrap deadline (the wait below is bounded well under it)."""
    import multiprocessing as mp
    import os
    import signal
    secret = secret_file(tmp_path)
    rt = kvroom.Runtime(network=True, secret_file=secret)
    port = rt.publish_registry(0, "127.0.0.1")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_prefill_process, args=(port, secret, ready))
    child.start()
    try:
        assert ready.wait(60)
        d = rt.add_rank("decode", network=True, transport="auto",
                        timeouts={"bootstrap_ms": 60000, "waiting_ms": 60000}, **Cache().specs())
        os.kill(child.pid, signal.SIGSTOP)
        rooms = [d.make_receiver(r) for r in (31, 32)]
        for r in rooms:
            r.init([1, 2], 0)
        os.kill(child.pid, signal.SIGKILL)
        assert until(lambda: all(r.poll() == KVPoll.Failed for r in rooms), 30), \
            [r.poll() for r in rooms]
        for r in rooms:
            assert "prefill[dp0,tp0]" in r.failure().failure_reason and "lost" in r.failure().failure_reason
            r.clear()
        d.close()
    finally:
        child.kill()
        child.join(timeout=30)


def test_an_injected_transfer_failure_has_exactly_one_origin():
    rt = kvroom.Runtime()
    caches = {(side, t): Cache(seed=t + 1 if side == "prefill" else None)
              for side in ("prefill", "decode") for t in range(2)}
    ranks = {k: rt.add_rank(k[0], tp_rank=k[1], tp_size=2,
                            fail_rooms=[606] if k == ("prefill", 1) else [], **c.specs())
             for k, c in caches.items()}
    senders = [ranks[("prefill", t)].make_sender(606) for t in range(2)]
    receivers = [ranks[("decode", t)].make_receiver(606) for t in range(2)]
    for s, r in zip(senders, receivers):
        drive(s, r, [1], [2], 0, 0)
    handles = senders + receivers
    assert until(lambda: all(h.poll() == KVPoll.Failed for h in handles))
    errors = [h.failure() for h in handles]
    origins = [e for e in errors if not e.is_from_another_rank]
    assert len(origins) == 1
    origin = ranks[("prefill", 1)].id
    assert origins[0] is errors[1]
    for e in errors:
        assert e.origin_rank == origin
        assert e.failure_reason == errors[1].failure_reason
    for h in handles:
        h.clear()
    for r in ranks.values():
        r.close()


def _shm_decode(port, secret, queue):
    rt = kvroom.Runtime(network=True, secret_file=secret)
    rt.connect_registry("127.0.0.1", port)
    with kvroom.SharedBuffer(PAGE * PAGES) as buf:
        d = rt.add_rank("decode", network=True, transport="shm",
                        kv=[kvroom.buffer_of(buf.array, PAGE)], keep=(buf,))
        r = d.make_receiver(31)
        until(lambda: r.poll() == KVPoll.WaitingForInput)
        r.init([6], 0)
        until(lambda: r.poll() in (KVPoll.Success, KVPoll.Failed))
        err = r.failure()
        queue.put((r.poll() == KVPoll.Success, bytes(buf.array[6 * PAGE:7 * PAGE]),
                   None if err is None else err.failure_reason))
        r.clear()
        d.close()


def test_shared_buffers_move_over_shm_between_processes(tmp_path):
    import multiprocessing as mp
    import os
    secret = secret_file(tmp_path)
    rt = kvroom.Runtime(network=True, secret_file=secret)
    port = rt.publish_registry(0, "127.0.0.1")
    # Both sides register shm segments (the shm data plane exposes them).
    src = kvroom.SharedBuffer(PAGE * PAGES)
    src.array[:] = np.random.default_rng(9).integers(0, 256, PAGE * PAGES, dtype=np.uint8)
    p = rt.add_rank("prefill", network=True, transport="shm",
                    kv=[kvroom.buffer_of(src.array, PAGE)], keep=(src,))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_shm_decode, args=(port, secret, queue))
    child.start()
    try:
        s = p.make_sender(31)
        assert until(lambda: s.poll() == KVPoll.WaitingForInput, 30)
        s.init(1, 0)
        s.send([2], True)
        ok, page, why = queue.get(timeout=30)
        assert ok, why
        assert page == bytes(src.array[2 * PAGE:3 * PAGE])
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    s.clear()
    p.close()
    src.close()
    # The segment is gone with the buffer.
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"kvroom-{child.pid}-")]


def test_hybrid_state_moves_with_the_last_chunk():
    """Mamba-style state: one slot in each of two state buffers, beside the
    KV pages; missing state indices are refused with the reason."""
    rt = kvroom.Runtime()
    rng = np.random.default_rng(3)
    src, dst = Cache(seed=8), Cache()
    src_state = [rng.integers(0, 256, 512 * 4, dtype=np.uint8) for _ in range(2)]
    dst_state = [np.zeros(512 * 4, np.uint8) for _ in range(2)]
    ps, ds = src.specs(), dst.specs()
    p = rt.add_rank("prefill", state=[kvroom.buffer_of(b, 512) for b in src_state],
                    **dict(ps, keep=(ps["keep"], src_state)))
    d = rt.add_rank("decode", state=[kvroom.buffer_of(b, 512) for b in dst_state],
                    **dict(ds, keep=(ds["keep"], dst_state)))
    s, r = p.make_sender(31), d.make_receiver(31)
    assert until(lambda: r.poll() == KVPoll.WaitingForInput)
    r.init(np.array([2, 3], np.int64), 0, state_indices=[1])
    assert until(lambda: s.poll() == KVPoll.WaitingForInput)
    s.init(2, 1)
    s.send(np.array([5], np.int32), False)
    s.send(np.array([6], np.int32), True, state_indices=np.array([3], np.int32))
    assert until(lambda: r.poll() == KVPoll.Success and s.poll() == KVPoll.Success)
    for b in range(2):
        assert np.array_equal(dst_state[b][512:1024], src_state[b][3 * 512:4 * 512])
        assert not dst_state[b][:512].any() and not dst_state[b][1024:].any()
    assert np.array_equal(dst.page(0, 2), src.page(0, 5))
    # A decode rank with state buffers must hand the request's state.
    r2 = d.make_receiver(32)
    r2.init(np.array([4], np.int64), 0)
    assert until(lambda: r2.poll() == KVPoll.Failed)
    assert "no state indices" in r2.failure().failure_reason
    for h in (s, r, r2):
        h.clear()
    p.close()
    d.close()


def test_a_closed_rank_leaves_clear_errors_never_a_crash():
    """A dead manager: handles outlive their rank; a live room reads Failed
    and calls on its handles do nothing; the rank itself says it is gone."""
    rt = kvroom.Runtime()
    src, dst = Cache(seed=9), Cache()
    p = rt.add_rank("prefill", **src.specs())
    d = rt.add_rank("decode", **dst.specs())
    s, r = p.make_sender(41), d.make_receiver(41)
    p.close()
    assert s.poll() == KVPoll.Failed
    assert "was closed while the room was live" in s.failure().failure_reason
    for call in (lambda: s.init(1, 0), lambda: s.send(np.array([0], np.int32), True),
                 lambda: s.abort("late"), lambda: s.clear()):
        call()
        assert s.poll() == KVPoll.Failed
    with pytest.raises(Exception, match="closed"):
        p.make_sender(42)
    # The decode side hears the prefill rank is gone: Failed, not a hang.
    assert until(lambda: r.poll() == KVPoll.Failed)
    d.close()
    assert r.poll() == KVPoll.Failed


def test_integrity_check_moves_rooms_and_refuses_a_rank_without_it():
    rt = kvroom.Runtime()
    src, dst, odd = Cache(seed=3), Cache(), Cache()
    p = rt.add_rank("prefill", integrity="xxh3", **src.specs())
    d = rt.add_rank("decode", integrity="xxh3", **dst.specs())
    s, r = p.make_sender(5), d.make_receiver(5)
    drive(s, r, [0, 1, 2], [7, 8, 9], 1, 2, chunks=2)
    assert until(lambda: r.poll() == KVPoll.Success and s.poll() == KVPoll.Success)
    for buf in range(2):
        for sp, dp in zip([0, 1, 2], [7, 8, 9]):
            assert np.array_equal(dst.page(buf, dp), src.page(buf, sp))
    s.clear()
    r.clear()
    # Every rank of a deployment checks the same way: a rank without the
    # check is refused at registration, with the reason.
    with pytest.raises(Exception, match="integrity"):
        rt.add_rank("decode", dp_rank=1, **odd.specs())
    with pytest.raises(ValueError, match="integrity"):
        rt.add_rank("decode", dp_rank=1, integrity="crc32", **odd.specs())
    p.close()
    d.close()


def _etcd_member(tmp_path):
    """One etcd member on loopback for a test, or a skip with the reason."""
    import shutil
    import socket
    import subprocess
    import urllib.request
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    client, peer = (f"http://127.0.0.1:{p}" for p in ports)
    proc = subprocess.Popen([exe, "--name", "t", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", client, "--advertise-client-urls", client,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", f"t={peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def healthy():
        try:
            return b"true" in urllib.request.urlopen(client + "/health", timeout=1).read()
        except OSError:
            return False
    if not until(healthy, 20):
        proc.kill()
        pytest.fail("the etcd member did not become healthy")
    return proc, f"etcd://127.0.0.1:{ports[0]}"


def test_ranks_meet_through_a_directory_on_etcd(tmp_path):
    proc, url = _etcd_member(tmp_path)
    try:
        rt = kvroom.Runtime(network=True, secret_file=secret_file(tmp_path))
        with pytest.raises(kvroom.Error):
            rt.use_directory("http://127.0.0.1:1")
        rt.use_directory(url, prefix="/kvroom/pytest", lease_ttl_ms=2000)
        src, dst = Cache(seed=9), Cache()
        p = rt.add_rank("prefill", network=True, transport="auto", **src.specs())
        d = rt.add_rank("decode", network=True, transport="auto", **dst.specs())
        s, r = p.make_sender(41), d.make_receiver(41)
        assert until(lambda: r.poll() == KVPoll.WaitingForInput, 30)
        r.init([1, 2], 3)
        assert until(lambda: s.poll() == KVPoll.WaitingForInput, 30), s.failure()
        s.init(2, 0)
        s.send([4, 5], True)
        assert until(lambda: r.poll() in (KVPoll.Success, KVPoll.Failed), 30)
        assert r.poll() == KVPoll.Success, r.failure()
        assert bytes(dst.page(0, 1)) == bytes(src.page(0, 4))
        assert bytes(dst.page(1, 2)) == bytes(src.page(1, 5))
        s.clear()
        r.clear()
        p.close()
        d.close()
    finally:
        proc.kill()
        proc.wait()
