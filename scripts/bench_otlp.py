#!/usr/bin/env python3
"""OTLP export cost (JSON lines): the 5,000-series store of
bench_signals.py (20 profiles of 250 frames, 200 histograms, 1,000
counters, gauges) exported to a real local HTTP receiver, as the sidecar's
exporter thread does every OTEL_METRIC_EXPORT_INTERVAL. Per export: the
request built from a snapshot (build_ms), serialized (serialize_ms), the
whole step over HTTP including the gzip when asked (step_ms, wall), the
exporter's thread CPU (cpu_ms), the body's bytes, and what one export a
minute (OpenTelemetry's default interval) and one a second cost as a
percentage of one core. Plain and gzip are interleaved, repetitions are
medians. Target: an export a minute < 0.2 % of a core."""
import argparse
import statistics
import sys
import time

from bench_signals import build_store
from benchutil import emit

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "tests"))
from support.recorder import Recorder  # noqa: E402

from graphsignal import config  # noqa: E402
from graphsignal.sidecar.otlp import Builder, Exporter  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--series", type=int, default=5000, help="series in the store (default: %(default)s)")
    args = ap.parse_args()
    store = build_store(args.series)
    with Recorder() as rec:
        out = {m: {"build": [], "serialize": [], "step": [], "cpu": [], "bytes": []} for m in ("plain", "gzip")}
        for _ in range(args.reps):
            for mode in ("plain", "gzip"):
                env = {"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": rec.base}
                if mode == "gzip":
                    env["OTEL_EXPORTER_OTLP_COMPRESSION"] = "gzip"
                st = config.from_environ(env)
                b = Builder(st)
                snap = store.snapshot()
                t0 = time.perf_counter()
                req = b.request(snap)
                t1 = time.perf_counter()
                req.SerializeToString()
                t2 = time.perf_counter()
                ex = Exporter(store, st)
                c0, w0 = time.thread_time(), time.perf_counter()
                assert ex.step(force=True)
                c1, w1 = time.thread_time(), time.perf_counter()
                r = out[mode]
                r["build"].append((t1 - t0) * 1e3)
                r["serialize"].append((t2 - t1) * 1e3)
                r["step"].append((w1 - w0) * 1e3)
                r["cpu"].append((c1 - c0) * 1e3)
                r["bytes"].append(len(rec.requests[-1]["body"]))
    for mode, r in out.items():
        cpu = statistics.median(r["cpu"])
        emit(bench="otlp_export", series=len(store.series), mode=mode, reps=args.reps,
             build_ms=round(statistics.median(r["build"]), 1), serialize_ms=round(statistics.median(r["serialize"]), 1),
             step_ms=round(statistics.median(r["step"]), 1), cpu_ms=round(cpu, 1),
             body_bytes=int(statistics.median(r["bytes"])), every_minute_core_pct=round(cpu / 600.0, 3),
             every_second_core_pct=round(cpu / 10.0, 1))


if __name__ == "__main__":
    main()
