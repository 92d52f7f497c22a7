#!/usr/bin/env python3
"""The history block's cost (graphsignal.timeline, /signals?history=N and
the final payload): ms to build it over 10, 60 and 600 s of a store the
size of an 8-GPU box (per GPU: 6 telemetry gauges, busy time, a process
with 200 kernels, copies and syncs, every one changing every second; and
4,000 probe gauges it leaves out), median of --reps; and the payload's
bytes without and with 600 s of it. One JSON line per result.

    python3 scripts/bench_history.py [--reps 5]
"""
import argparse
import json
import statistics
import time

from graphsignal.sidecar.history_block import history_stats
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.store import MetricStore

NS = 1_000_000_000


def busy_store(seconds=600, gpus=8, kernels=200, probes=4000):
    t = [1_800_000_000 * NS]
    s = MetricStore(clock=lambda: t[0], history_seconds=seconds)
    syms = ["_Z6kernel%dPf" % i for i in range(kernels)]
    for sec in range(seconds + 1):
        t[0] += NS
        with s.batch():
            for g in range(gpus):
                tags = {"device.uuid": "GPU-%d" % g, "device.index": str(g)}
                for n in ("gpu_utilization_percent", "gpu_memory_used_bytes", "gpu_power_usage_watts",
                          "gpu_temperature_celsius", "gpu_clock_sm_megahertz", "gpu_memory_total_bytes"):
                    s.set_gauge(n, tags, sec % 100)
                s.add_counter("gpu_busy_time_nanoseconds", tags, NS // 2)
                pt = {"process.pid": str(100 + g), "device.cuda_index": "0", "device.uuid": "GPU-%d" % g}
                s.add_profile("cuda_kernels_nanoseconds", pt, [(k, 1000 + i, 1) for i, k in enumerate(syms)])
                s.add_profile("cuda_memcpy_nanoseconds", pt, [("host_to_device", 100, 1), ("device_to_host", 50, 1)])
                s.add_profile("cuda_sync_nanoseconds", pt, [("stream", 100, 1)])
                s.add_counter("cuda_memcpy_bytes", dict(pt, kind="host_to_device"), 1000)
                s.add_counter("process_cpu_time_nanoseconds", {"process.pid": str(100 + g)}, NS)
                s.set_gauge("process_memory_usage_bytes", {"process.pid": str(100 + g)}, 1e9)
            for i in range(probes):
                s.set_gauge("probe_%d" % i, {}, sec)
        s.take_history()
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="a 1-GPU store of 60 s and 10 kernels: the smoke test's check that it runs (no figures)")
    a = ap.parse_args()
    s = busy_store(seconds=60, gpus=1, kernels=10, probes=100) if a.smoke else busy_store()
    for n in (10, 60) if a.smoke else (10, 60, 600):
        ts = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            h = history_stats(s, n)
            ts.append(time.perf_counter() - t0)
        print(json.dumps({"bench": "history_block", "seconds": n, "series": len(h["series"]),
                          "points": len(h["times_ns"]), "ms_median": round(statistics.median(ts) * 1e3, 1),
                          "bytes": len(json.dumps(h))}))
    print(json.dumps({"bench": "payload_bytes", "without_history": len(build_signals(s)),
                      "with_600s_history": len(build_signals(s, {"history": history_stats(s, 600)}))}))


if __name__ == "__main__":
    main()
