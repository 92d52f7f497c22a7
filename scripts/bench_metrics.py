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
Cases and formats are interleaved, repetitions are medians. Both formats
share one cache of sample lines (only the family headers differ), so the
scrape measured is the first after the change. Targets (wall p50 on a
2-core machine): 10 % changed <= 10 ms, all changed <= 60 ms; a scrape a
second < 2 % of a core. The process's garbage collector is tuned as the
sidecar's (graphsignal.gctune; --gc default: CPython's thresholds)."""
import argparse
import http.client
import random
import statistics
import threading
import time

from bench_signals import build_store
from benchutil import emit, percentile

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


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=10, help="scrapes per case and repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--series", type=int, default=5000, help="series in the store (default: %(default)s)")
    ap.add_argument("--signals", action="store_true", help="someone reads /signals too (before each scrape)")
    ap.add_argument("--gc", choices=("sidecar", "default"), default="sidecar",
                    help="the garbage collector as the sidecar tunes it at its start (graphsignal.gctune), or "
                         "CPython's defaults (default: %(default)s)")
    args = ap.parse_args()
    if args.gc == "sidecar":
        gctune.tune()  # as the sidecar does at its start, before any series exists
    store = build_store(args.series)
    meter = CpuMeter(make_app(store))
    srv = ServerThread(meter, "127.0.0.1", 0)
    srv.start()
    srv.bound.wait(5)
    conn = http.client.HTTPConnection("127.0.0.1", srv.port)
    rng = random.Random(0)
    cases = ["steady", "touched", "changed_10", "changed_all"]
    results = {(c, f): {"wall": [], "cpu": [], "store": [], "bytes": 0} for c in cases for f in FORMATS}
    for fmt, accept in FORMATS.items():  # warm the caches of both formats
        conn.request("GET", "/metrics", headers={"Accept": accept})
        conn.getresponse().read()
    step = 0
    for _ in range(args.reps):
        for case in cases:
            for fmt, accept in FORMATS.items():
                r = results[(case, fmt)]
                for _ in range(args.n):
                    step += 1
                    mutate(store, case, rng, step)
                    if args.signals:
                        store.last_read_ns = store.clock()  # /signals was served: the clock prerenders
                    t0 = time.thread_time()
                    store.prerender()  # the clock's, between scrapes
                    r["store"].append((time.thread_time() - t0) * 1000.0)
                    before = len(meter.samples)
                    t0 = time.perf_counter()
                    conn.request("GET", "/metrics", headers={"Accept": accept})
                    resp = conn.getresponse()
                    body = resp.read()
                    r["wall"].append((time.perf_counter() - t0) * 1000.0)
                    r["cpu"].append(meter.samples[before] * 1000.0)
                    r["bytes"] = len(body)
    conn.close()
    srv.stop()
    for case in cases:
        for fmt in FORMATS:
            r = results[(case, fmt)]
            cpu, ser = statistics.median(r["cpu"]), statistics.median(r["store"])
            emit(bench="metrics_scrape", case=case, format=fmt, signals_read=args.signals, series=len(store.series),
                 bytes=r["bytes"],
                 scrapes=len(r["wall"]), p50_ms=round(percentile(r["wall"], 50), 3),
                 p99_ms=round(percentile(r["wall"], 99), 3), cpu_ms=round(cpu, 3), store_ms=round(ser, 3),
                 core_percent_at_1hz=round((cpu + ser) / 10.0, 2), target_ms=TARGETS[case], target_core_percent=2.0)


if __name__ == "__main__":
    main()
