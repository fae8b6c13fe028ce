"""A prefill and a decode scheduler loop over kvroom.sglang, one rank per
process, driven the way SGLang's prefill.py and decode.py drive a transfer
backend: requests wait in a bootstrap queue until their room is ready, move
to an in-flight queue, and every iteration polls them all; a failure is
logged (a propagated one at debug, as SGLang does with is_from_another_rank)
and the request is dropped, its pages freed.

    python3 examples/python/pd_loop.py [--rooms N] [--fail-every K]

Exits 0 when every room that was not made to fail arrived byte-exact.
"""

import argparse
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import time

import numpy as np

PAGE, PAGES, AUX, SLOTS = 4096, 64, 64, 16
log = logging.getLogger("pd_loop")


def buffers(seed):
    rng = np.random.default_rng(seed)
    kv = [rng.integers(0, 256, PAGE * PAGES, dtype=np.uint8) if seed else
          np.zeros(PAGE * PAGES, np.uint8) for _ in range(2)]
    aux = rng.integers(0, 256, AUX * SLOTS, dtype=np.uint8) if seed else np.zeros(AUX * SLOTS,
                                                                                 np.uint8)
    return kv, aux


def kv_args(ks, kv, aux):
    a = ks.KVArgs()
    a.kv_data_ptrs = [b.ctypes.data for b in kv]
    a.kv_data_lens = [b.nbytes for b in kv]
    a.kv_item_lens = [PAGE] * len(kv)
    a.aux_data_ptrs, a.aux_data_lens, a.aux_item_lens = [aux.ctypes.data], [aux.nbytes], [AUX]
    return a


def pages_of(room):
    """Each request's prompt: 2-4 pages, at a source place per room."""
    n = 2 + room % 3
    return [(room * 5 + i) % PAGES for i in range(n)]


def prefill(port_q, n_rooms, fail_every, done_q):
    from kvroom import sglang as ks
    server = ks.KVBootstrapServer("127.0.0.1", 0)
    port_q.put(server.port)
    kv, aux = buffers(seed=7)
    mgr = ks.KVManager(kv_args(ks, kv, aux), ks.DisaggregationMode.PREFILL,
                       ks.ServerArgs(disaggregation_bootstrap_port=server.port))
    addr = f"127.0.0.1:{server.port}"
    bootstrap = [ks.KVSender(mgr, addr, room, [0], 0) for room in range(1, n_rooms + 1)]
    inflight, finished = [], 0
    while finished < n_rooms:
        # Bootstrap queue: a request runs its prefill once decode's pages are there.
        still = []
        for s in bootstrap:
            st = s.poll()
            if st == ks.KVPoll.WaitingForInput:
                pages = pages_of(s.bootstrap_room)
                s.init(len(pages), s.bootstrap_room % SLOTS)
                if fail_every and s.bootstrap_room % fail_every == 0:
                    s.abort()  # the scheduler gives up on this one
                else:
                    half = len(pages) // 2  # chunked prefill: two chunks
                    s.send(np.array(pages[:half], np.int32))
                    s.send(np.array(pages[half:], np.int32))
                inflight.append(s)
            elif st == ks.KVPoll.Failed:
                inflight.append(s)
            else:
                still.append(s)
        bootstrap = still
        # In-flight queue: polled every iteration until terminal.
        rest = []
        for s in inflight:
            st = s.poll()
            if st == ks.KVPoll.Success:
                finished += 1
                s.clear()
            elif st == ks.KVPoll.Failed:
                try:
                    s.failure_exception()
                except ks.KVTransferError as e:
                    (log.debug if e.is_from_another_rank else log.info)("prefill: %s", e)
                finished += 1
                s.clear()
            else:
                rest.append(s)
        inflight = rest
        time.sleep(0.0001)
    done_q.get(timeout=60)  # the registry lives here: wait for decode
    mgr.close()


def decode(port_q, n_rooms, fail_every, result_q, done_q):
    from kvroom import sglang as ks
    port = port_q.get(timeout=30)
    kv, aux = buffers(seed=None)
    mgr = ks.KVManager(kv_args(ks, kv, aux), ks.DisaggregationMode.DECODE,
                       ks.ServerArgs(disaggregation_bootstrap_port=port))
    addr = f"127.0.0.1:{port}"
    free = list(range(PAGES))
    waiting = []
    for room in range(1, n_rooms + 1):
        r = ks.KVReceiver(mgr, addr, room)
        r.init(0)
        waiting.append(r)
    inflight, ok, failed, wrong = {}, 0, 0, 0
    src_kv, src_aux = buffers(seed=7)
    while waiting or inflight:
        still = []
        for r in waiting:
            need = len(pages_of(r.bootstrap_room))
            if r.poll() == ks.KVPoll.WaitingForInput and len(free) >= need:
                dst = [free.pop() for _ in range(need)]
                r.send_metadata(np.array(dst, np.int32), r.bootstrap_room % SLOTS)
                inflight[r] = dst
            else:
                still.append(r)
        waiting = still
        for r, dst in list(inflight.items()):
            st = r.poll()
            if st == ks.KVPoll.Success:
                src = pages_of(r.bootstrap_room)
                same = all(np.array_equal(kv[b][d * PAGE:(d + 1) * PAGE],
                                          src_kv[b][s * PAGE:(s + 1) * PAGE])
                           for b in range(2) for s, d in zip(src, dst))
                slot = r.bootstrap_room % SLOTS
                same = same and np.array_equal(aux[slot * AUX:(slot + 1) * AUX],
                                               src_aux[slot * AUX:(slot + 1) * AUX])
                ok += same
                wrong += not same
            elif st == ks.KVPoll.Failed:
                try:
                    r.failure_exception()
                except ks.KVTransferError as e:
                    (log.debug if e.is_from_another_rank else log.info)("decode: %s", e)
                failed += 1
            else:
                continue
            # Terminal: no byte of this room lands any more; the pages are free.
            r.clear()
            free.extend(dst)
            del inflight[r]
        time.sleep(0.0001)
    result_q.put((ok, failed, wrong))
    done_q.put(True)
    mgr.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rooms", type=int, default=100)
    ap.add_argument("--fail-every", type=int, default=10)
    ap.add_argument("-v", action="store_true")
    opts = ap.parse_args()
    logging.basicConfig(level=logging.DEBUG if opts.v else logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        secret = os.path.join(tmp, "secret")
        with open(secret, "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(secret, 0o600)
        os.environ["KVROOM_SECRET_FILE"] = secret
        ctx = mp.get_context("spawn")
        port_q, result_q, done_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=prefill, args=(port_q, opts.rooms, opts.fail_every, done_q))
        d = ctx.Process(target=decode, args=(port_q, opts.rooms, opts.fail_every, result_q, done_q))
        p.start()
        d.start()
        ok, failed, wrong = result_q.get(timeout=120)
        p.join(60)
        d.join(60)
    want_failed = opts.rooms // opts.fail_every if opts.fail_every else 0
    print(f"pd_loop: {ok} rooms byte-exact, {failed} failed (made to fail: {want_failed}), "
          f"{wrong} wrong")
    return 0 if ok == opts.rooms - want_failed and failed == want_failed and wrong == 0 \
        and p.exitcode == 0 and d.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
