"""A C program with 8 threads writing 1,000,000 records each into one ring,
drained concurrently from Python: totals exact, drops counted; and writers
that keep a tiny ring at the brim while the reader lags: nothing lost."""
import os
import subprocess
import uuid

import numpy as np

from support.cbuild import compile_c
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Ring


def _run(threads, per_thread, capacity, retry=False):
    exe = compile_c("ring_stress.c")
    name = "gs-thr%s-%d-test" % (uuid.uuid4().hex[:8], os.getpid())
    proc = subprocess.Popen([exe, name, str(threads), str(per_thread), str(capacity)] + (["0", "1"] if retry else []),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        ring = Ring("/dev/shm/" + name)
        counts = np.zeros(threads, dtype=np.int64)
        sums = np.zeros(threads, dtype=np.uint64)
        last = np.full(threads, -1, dtype=np.int64)
        in_order = True

        def take(recs):
            nonlocal in_order
            if recs.size == 0:
                return
            assert (recs["type"] == L.REC_TEST).all()
            t = recs["extra"].astype(np.int64)
            counts[:] += np.bincount(t, minlength=threads)
            sums[:] += np.bincount(t, weights=recs["value"].astype(np.float64), minlength=threads).astype(np.uint64)
            for k in range(threads):  # per-thread order survives the shared ring
                v = recs["value"][t == k].astype(np.int64)
                if v.size:
                    in_order &= bool(v[0] > last[k]) and bool((np.diff(v) > 0).all())
                    last[k] = v[-1]

        while proc.poll() is None:
            take(ring.drain())
        take(ring.drain())
        out = proc.stdout.read().split()
        written, dropped = int(out[0]), int(out[1])
        assert ring.dropped == dropped
        ring.close()
        return counts, sums, written, dropped, in_order
    finally:
        proc.wait()
        try:
            os.unlink("/dev/shm/" + name)
        except FileNotFoundError:
            pass


def test_eight_threads_times_a_million_records_arrive_exactly():
    per = 1_000_000
    counts, sums, written, dropped, in_order = _run(8, per, 8 * per)
    assert dropped == 0
    assert written == 8 * per
    assert counts.tolist() == [per] * 8
    assert sums.tolist() == [per * (per - 1) // 2] * 8
    assert in_order


def test_small_ring_counts_every_drop_and_loses_nothing_else():
    per = 200_000
    counts, sums, written, dropped, in_order = _run(8, per, 1024)
    assert written + dropped == 8 * per
    assert int(counts.sum()) == written
    assert in_order


def test_writers_at_the_brim_of_a_tiny_ring_lose_nothing_while_the_reader_lags():
    """Four threads retry what a 64-record ring refuses while Python drains
    it far slower than they write: the ring sits full, so every writer
    keeps reserving against a stale copy of the read index and refreshing
    it. Every record arrives once, in order per thread, and the refusals
    are counted."""
    per = 50_000
    counts, sums, written, dropped, in_order = _run(4, per, 64, retry=True)
    assert written == 4 * per
    assert counts.tolist() == [per] * 4
    assert sums.tolist() == [per * (per - 1) // 2] * 4
    assert in_order
    assert dropped > 0  # the ring was at the brim (refusals, each written again)
