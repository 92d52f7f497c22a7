#!/usr/bin/env python3
"""CPU time of the GPU telemetry cycle on the real NVML, as JSON lines.

    python3 scripts/bench_telemetry.py [--cycles 30] [--interval 1.0]

Polls every GPU on the host (as GRAPHSIGNAL_ALL_GPUS=1 does) the way the
sidecar does, once per interval, and prints one line per cycle (thread CPU
time: user + system, so driver ioctls count) and a summary line with the
per-GPU mean/p50/p95/max against the 5 ms target and the NVML functions
that cost most. The first cycle reads the driver's whole sample buffer
and is left out of the summary. Without NVML it prints one line saying so
and exits 0.
"""
import argparse
import collections
import json
import sys
import time

from graphsignal.sources import SourceUnavailable
from graphsignal.sources.gpu import GpuTelemetry
from graphsignal.sources.nvml import Nvml, NvmlBackend
from graphsignal.sidecar.store import MetricStore

TARGET_MS_PER_GPU = 5.0


class TimedNvml(Nvml):
    """The NVML door, also adding up thread CPU time per function."""

    def __init__(self):
        Nvml.__init__(self)
        self.cpu_ns = collections.Counter()
        self.calls = collections.Counter()

    def call(self, fn, *args, **kw):
        t0 = time.thread_time_ns()
        try:
            return Nvml.call(self, fn, *args, **kw)
        finally:
            name = getattr(fn, "__name__", fn)  # nvml.py passes its own bindings as functions
            self.cpu_ns[name] += time.thread_time_ns() - t0
            self.calls[name] += 1


def _pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between cycles (the sidecar uses 1.0)")
    args = ap.parse_args(argv)

    nvml = TimedNvml()
    store = MetricStore()
    src = GpuTelemetry(store, [NvmlBackend(nvml, interval=args.interval)], all_gpus=True)
    t0 = time.thread_time()
    try:
        src.setup()
    except SourceUnavailable as e:
        print(json.dumps({"bench": "telemetry", "nvml": "unavailable", "reason": str(e)}))
        return 0
    setup_ms = (time.thread_time() - t0) * 1e3
    gpus = len(src.devices())
    nvml.cpu_ns.clear()
    nvml.calls.clear()

    per_gpu = []
    next_t = time.monotonic()
    for cycle in range(args.cycles):
        c0, w0 = time.thread_time(), time.perf_counter()
        src.poll()
        cpu_ms = (time.thread_time() - c0) * 1e3
        wall_ms = (time.perf_counter() - w0) * 1e3
        print(json.dumps({"bench": "telemetry_cycle", "cycle": cycle, "gpus": gpus, "cpu_ms": round(cpu_ms, 3),
                          "cpu_ms_per_gpu": round(cpu_ms / gpus, 3), "wall_ms": round(wall_ms, 3)}))
        sys.stdout.flush()
        if cycle > 0:
            per_gpu.append(cpu_ms / gpus)
        next_t += args.interval
        time.sleep(max(0.0, next_t - time.monotonic()))
    src.shutdown()

    polls = max(1, args.cycles) * gpus
    top = sorted(nvml.cpu_ns.items(), key=lambda kv: -kv[1])[:8]
    summary = {
        "bench": "telemetry", "gpus": gpus, "cycles": args.cycles, "interval_s": args.interval,
        "devices": [d.attributes.get("device.name") for d in src.devices()],
        "setup_cpu_ms": round(setup_ms, 3),
        "target_ms_per_gpu": TARGET_MS_PER_GPU,
        "nvml_top_cpu_us_per_gpu_poll": {fn: round(ns / 1e3 / polls, 1) for fn, ns in top},
        "series": len(store.series),
        "errors": [e["message"] for e in store.errors],
    }
    if per_gpu:
        summary.update({
            "cpu_ms_per_gpu_mean": round(sum(per_gpu) / len(per_gpu), 3),
            "cpu_ms_per_gpu_p50": round(_pct(per_gpu, 0.5), 3),
            "cpu_ms_per_gpu_p95": round(_pct(per_gpu, 0.95), 3),
            "cpu_ms_per_gpu_max": round(max(per_gpu), 3),
            "within_target": _pct(per_gpu, 0.5) <= TARGET_MS_PER_GPU,
        })
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
