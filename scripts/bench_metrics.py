#!/usr/bin/env python3
"""/metrics cost (JSON lines): the 5,000-series store of bench_signals.py
(20 profiles of 250 frames, 200 histograms, 1,000 counters, gauges)
scraped over real HTTP from the real Werkzeug server, in the Prometheus
text format and in OpenMetrics (what Prometheus asks for). Cases, between
two scrapes:

  steady       nothing changed
  touched      every series re-set to the value it had (telemetry does this)
  changed_10   10% of the series changed value (a busy engine, once a second)
  changed_all  every series changed value (the worst case)

Each line: the scrape's wall time (p50/p99 ms, client side, keep-alive);
the sidecar's CPU per scrape: cpu_ms, thread CPU inside the request, and
store_ms, the clock's prerender between scrapes (the store re-serializing
the series that changed, which it does only while someone reads /signals:
/metrics reads the series views and needs no JSON: with --signals,
/signals is being read too, else the prerender costs about nothing);
and what a scrape every second costs: (cpu_ms + store_ms) / 1000 ms as a
percentage of one core.
Cases and formats are interleaved, repetitions are medians.

--trees A,B,...: several checkouts (each with its native parts built; "."
is this one) compared scrape by scrape: one worker process per checkout
serves its own store, every step (a change, then a scrape) goes to every
worker in turn, in a shuffled order, so the load of a busy machine falls
on all of them alike; each line then has its tree:

  python scripts/bench_metrics.py --trees /tmp/base,. [-n 10 --reps 5]
 Both formats
share one cache of sample lines (only the family headers differ), so the
scrape measured is the first after the change. Targets (wall p50 on a
2-core machine): 10 % changed <= 10 ms, all changed <= 60 ms; a scrape a
second < 2 % of a core. The process's garbage collector is tuned as the
sidecar's (graphsignal.gctune; --gc default: CPython's thresholds)."""
import argparse
import http.client
import random
import statistics
import sys
import threading
import time

from bench_signals import build_store
from benchutil import TreeWorkers, emit, percentile

from graphsignal import gctune
from graphsignal.sidecar.server import ServerThread, make_app

TARGETS = {"steady": 10.0, "touched": 10.0, "changed_10": 10.0, "changed_all": 60.0}
FORMATS = {"text": "text/plain;version=0.0.4",
           "openmetrics": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"}


class CpuMeter:
    """WSGI middleware: thread CPU time spent inside the app per request."""

    def __init__(self, app):
        self.app = app
        self.samples = []
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        t0 = time.thread_time()
        body = self.app(environ, start_response)
        data = b"".join(body)
        with self.lock:
            self.samples.append(time.thread_time() - t0)
        return [data]


def mutate(store, case, rng, step):
    if case == "steady":
        return
    with store.batch():
        series = list(store.series.values())
        if case == "touched":
            chosen, change = series, False
        else:
            chosen = series if case == "changed_all" else rng.sample(series, len(series) // 10)
            change = True
        now = store.clock()
        for s in chosen:
            if change:
                if s.type == "gauge":
                    s.value += 1.0
                elif s.type == "counter":
                    s.total += 1
                elif s.type == "profile":
                    for k in list(s.frames)[: 1 + step % 50]:
                        v, n = s.frames[k]
                        s.frames[k] = (v + 1000, n + 1)
                else:
                    s.count += 1
                    s.sum += 1000
                    s.bin_counts[300] += 1
            s.touch(now)


class Scraper:
    """A store of `series` series served by the real server, and one
    keep-alive client: step() makes one change of a case, the clock's
    prerender, and one scrape."""

    def __init__(self, series, signals):
        self.signals = signals
        self.store = build_store(series)
        self.meter = CpuMeter(make_app(self.store))
        self.srv = ServerThread(self.meter, "127.0.0.1", 0)
        self.srv.start()
        self.srv.bound.wait(5)
        self.conn = http.client.HTTPConnection("127.0.0.1", self.srv.port)
        self.rng = random.Random(0)
        self.n = 0
        for accept in FORMATS.values():  # warm the caches of both formats
            self.conn.request("GET", "/metrics", headers={"Accept": accept})
            self.conn.getresponse().read()

    def step(self, case, fmt):
        """(wall ms, cpu ms, store ms, body bytes) of one change and scrape."""
        self.n += 1
        mutate(self.store, case, self.rng, self.n)
        if self.signals:
            self.store.last_read_ns = self.store.clock()  # /signals was served: the clock prerenders
        t0 = time.thread_time()
        self.store.prerender()  # the clock's, between scrapes
        store_ms = (time.thread_time() - t0) * 1000.0
        before = len(self.meter.samples)
        t0 = time.perf_counter()
        self.conn.request("GET", "/metrics", headers={"Accept": FORMATS[fmt]})
        body = self.conn.getresponse().read()
        wall = (time.perf_counter() - t0) * 1000.0
        return wall, self.meter.samples[before] * 1000.0, store_ms, len(body)

    def close(self):
        self.conn.close()
        self.srv.stop()


CASES = ["steady", "touched", "changed_10", "changed_all"]


def worker(args):
    """--worker: one Scraper; each stdin line "case format" is one step,
    answered with "wall_ms cpu_ms store_ms bytes"."""
    if args.gc == "sidecar":
        gctune.tune()
    sc = Scraper(args.series, args.signals)
    sys.stdout.write("ready %d\n" % len(sc.store.series))
    sys.stdout.flush()
    for line in sys.stdin:
        case, fmt = line.split()
        sys.stdout.write("%.4f %.4f %.4f %d\n" % sc.step(case, fmt))
        sys.stdout.flush()
    sc.close()


def compare(trees, args):
    argv = ["--series", str(args.series), "--gc", args.gc] + (["--signals"] if args.signals else [])
    workers = TreeWorkers(trees, __file__, argv)
    got = {(t, c, f): {"wall": [], "cpu": [], "store": [], "bytes": 0} for t in trees for c in CASES for f in FORMATS}
    order = list(trees)
    for _ in range(args.reps):
        for case in CASES:
            for fmt in FORMATS:
                for _ in range(args.n):
                    random.shuffle(order)
                    for t in order:
                        wall, cpu, ser, nbytes = workers.ask(t, "%s %s" % (case, fmt))
                        r = got[(t, case, fmt)]
                        r["wall"].append(float(wall))
                        r["cpu"].append(float(cpu))
                        r["store"].append(float(ser))
                        r["bytes"] = int(nbytes)
    workers.close()
    series = workers.ready
    for case in CASES:
        for fmt in FORMATS:
            for t in trees:
                report(got[(t, case, fmt)], case, fmt, args.signals, series[t], tree=t, interleaved=len(trees))


def report(r, case, fmt, signals, series, **extra):
    cpu, ser = statistics.median(r["cpu"]), statistics.median(r["store"])
    emit(bench="metrics_scrape", case=case, format=fmt, signals_read=signals, series=series, bytes=r["bytes"],
         scrapes=len(r["wall"]), p50_ms=round(percentile(r["wall"], 50), 3),
         p99_ms=round(percentile(r["wall"], 99), 3), cpu_ms=round(cpu, 3), store_ms=round(ser, 3),
         core_percent_at_1hz=round((cpu + ser) / 10.0, 2), target_ms=TARGETS[case], target_core_percent=2.0,
         **extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10, help="scrapes per case and repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--series", type=int, default=5000, help="series in the store (default: %(default)s)")
    ap.add_argument("--signals", action="store_true", help="someone reads /signals too (before each scrape)")
    ap.add_argument("--gc", choices=("sidecar", "default"), default="sidecar",
                    help="the garbage collector as the sidecar tunes it at its start (graphsignal.gctune), or "
                         "CPython's defaults (default: %(default)s)")
    ap.add_argument("--trees", help="checkouts to compare scrape by scrape (see above)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.trees:
        compare([t.strip() for t in args.trees.split(",") if t.strip()], args)
        return
    if args.gc == "sidecar":
        gctune.tune()  # as the sidecar does at its start, before any series exists
    sc = Scraper(args.series, args.signals)
    results = {(c, f): {"wall": [], "cpu": [], "store": [], "bytes": 0} for c in CASES for f in FORMATS}
    for _ in range(args.reps):
        for case in CASES:
            for fmt in FORMATS:
                r = results[(case, fmt)]
                for _ in range(args.n):
                    wall, cpu, ser, nbytes = sc.step(case, fmt)
                    r["wall"].append(wall)
                    r["cpu"].append(cpu)
                    r["store"].append(ser)
                    r["bytes"] = nbytes
    sc.close()
    for case in CASES:
        for fmt in FORMATS:
            report(results[(case, fmt)], case, fmt, args.signals, len(sc.store.series))


if __name__ == "__main__":
    main()
