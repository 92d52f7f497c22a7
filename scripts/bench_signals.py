#!/usr/bin/env python3
"""/signals latency (JSON lines): a store of 5000 series (20 profiles of
250 frames, histograms, counters, gauges) served by the real Werkzeug
server over real HTTP on loopback (one keep-alive connection). Two cases:
"steady" (nothing changed between requests) and "all_dirty" (every series
updated before each request, the worst case), and "live" (as in a run:
every series changes once a second, as telemetry does, and the poller
re-serializes what changed every 50 ms, as it does while someone reads
/signals). Target: p99 <= 5 ms; all_dirty p50 <= 25 ms on a 2-core
machine.

--trees A,B,...: the steady and all_dirty cases of several checkouts
(each with its native parts built; "." is this one) compared request by
request: one worker process per checkout serves its own store, and each
request goes to every worker in turn, in a shuffled order, so the load
of a busy machine falls on all of them alike:

  python scripts/bench_signals.py --trees /tmp/base,. [-n 300]
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time

import numpy as np
from benchutil import TreeWorkers, emit, percentile

from graphsignal.sidecar.server import ServerThread, make_app
from graphsignal.sidecar.store import MetricStore


def build_store(total=5000):
    """The benchmarks' store of `total` series: at 5000, 20 profiles of 250
    frames, 200 histograms, 1000 counters and gauges for the rest; a smaller
    total (--series, the smoke test's sizes) scales every kind down alike."""
    s = MetricStore()
    rng = np.random.default_rng(0)
    k = total / 5000.0
    for p in range(max(1, int(20 * k))):
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": str(1000 + p)},
                      [("_ZN7kernels%dIfEEvPT_i_%d" % (p, f), int(rng.integers(1, 1 << 30)), 10) for f in range(250)])
    for h in range(max(1, int(200 * k))):
        s.add_histogram_values("probe_latency_nanoseconds", {"op": str(h)}, rng.integers(1, 1 << 20, 1000))
    for c in range(max(1, int(1000 * k))):
        s.set_counter("engine_tokens_total", {"i": str(c)}, c * 10)
    n = total - len(s.series)
    for g in range(n):
        s.set_gauge("gpu_metric_%d" % (g % 50), {"device.index": str(g // 50)}, float(g))
    assert len(s.series) == total
    return s


def dirty_all(store):
    with store.batch():
        for ser in store.series.values():
            ser.touch(ser.updated_ns)


def measure(port, n, before=None):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    lat = []
    size = 0
    for _ in range(n):
        if before:
            before()
        t0 = time.perf_counter()
        conn.request("GET", "/signals")
        r = conn.getresponse()
        body = r.read()
        lat.append((time.perf_counter() - t0) * 1000.0)
        size = len(body)
    conn.close()
    json.loads(body)
    return lat, size


def worker():
    """--worker: serves a store, and times one request per line of stdin
    ("steady", or "all_dirty": every series changed first). The garbage
    collector as that checkout's sidecar tunes it, where it does."""
    try:
        from graphsignal import gctune
    except ImportError:  # a checkout from before graphsignal.gctune
        pass
    else:
        gctune.tune()
    store = build_store()
    srv = ServerThread(make_app(store), "127.0.0.1", 0)
    srv.start()
    srv.bound.wait(5)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port)
    measure(srv.port, 5)
    sys.stdout.write("ready %d\n" % len(store.series))
    sys.stdout.flush()
    for line in sys.stdin:
        if line.strip() == "all_dirty":
            dirty_all(store)
        t0 = time.perf_counter()
        conn.request("GET", "/signals")
        body = conn.getresponse().read()
        sys.stdout.write("%.4f %d\n" % ((time.perf_counter() - t0) * 1000.0, len(body)))
        sys.stdout.flush()
    srv.stop()


def compare(trees, n):
    workers = TreeWorkers(trees, __file__)
    lat = {(t, c): [] for t in trees for c in ("steady", "all_dirty")}
    size = {}
    order = list(trees)
    for _ in range(n):
        for case in ("steady", "all_dirty"):
            random.shuffle(order)
            for t in order:
                ms, nbytes = workers.ask(t, case)
                lat[(t, case)].append(float(ms))
                size[t] = int(nbytes)
    workers.close()
    series = workers.ready
    for case in ("steady", "all_dirty"):
        for t in trees:
            v = lat[(t, case)]
            emit(bench="signals_latency", case=case, tree=t, series=series[t], requests=len(v), bytes=size[t],
                 p50_ms=round(percentile(v, 50), 3), p99_ms=round(percentile(v, 99), 3), max_ms=round(max(v), 3),
                 interleaved=len(trees))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--live-seconds", type=float, default=10.0)
    ap.add_argument("--series", type=int, default=5000, help="series in the store (default: %(default)s)")
    ap.add_argument("--trees", help="checkouts to compare request by request (see above)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gc", choices=("sidecar", "default"), default="sidecar",
                    help="the garbage collector as the sidecar tunes it (graphsignal.gctune), or CPython's defaults")
    args = ap.parse_args()
    if args.worker:
        worker()
        return
    if args.trees:
        compare([t.strip() for t in args.trees.split(",") if t.strip()], args.n)
        return
    if args.gc == "sidecar":
        from graphsignal import gctune  # here: a --trees worker of an older checkout has none

        gctune.tune()  # as the sidecar does at its start, before any series exists
    store = build_store(args.series)
    srv = ServerThread(make_app(store), "127.0.0.1", 0)
    srv.start()
    srv.bound.wait(5)
    measure(srv.port, 5)
    for case, before in (("steady", None), ("all_dirty", lambda: dirty_all(store))):
        lat, size = measure(srv.port, args.n, before)
        report(case, store, args.n, lat, size)
    halt = threading.Event()

    def updater():  # telemetry: every series changes once a second
        while not halt.wait(1.0):
            dirty_all(store)

    def poller():  # the poller's cycle: re-serialize what changed
        while not halt.wait(0.05):
            store.prerender()

    threads = [threading.Thread(target=updater), threading.Thread(target=poller)]
    for t in threads:
        t.start()
    lat, size = [], 0
    t_end = time.monotonic() + args.live_seconds
    while time.monotonic() < t_end:
        part, size = measure(srv.port, 20)
        lat += part
        time.sleep(0.03)
    halt.set()
    for t in threads:
        t.join()
    report("live", store, len(lat), lat, size)
    srv.stop()


def report(case, store, n, lat, size):
    emit(bench="signals_latency", case=case, series=len(store.series), requests=n, bytes=size,
         p50_ms=round(percentile(lat, 50), 3), p99_ms=round(percentile(lat, 99), 3), max_ms=round(max(lat), 3),
         target_p99_ms=5.0)


if __name__ == "__main__":
    main()
