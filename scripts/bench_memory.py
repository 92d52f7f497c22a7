#!/usr/bin/env python3
"""Sidecar memory over time (JSON lines): graphsignal-run with a workload
that registers 5,000 probe series, 4,900 of them histograms, records into
every histogram once, then keeps 100 counters and gauges (and
--live-histograms of the histograms) changing every second, while an agent
reads /signals once a second and ?window=60 every 10 s. Prints the
sidecar's RSS (graphsignal-run and its processes other than the workload)
once a minute, and a summary with minute 1, the last minute and the growth
between them. Targets: RSS below 250 MB, growth from minute 1 to minute 10
below 20 MB."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchutil import emit

WORKLOAD = r'''
import os, sys, time
from graphsignal import probes
n_hist, n_other, live_hist, seconds = (int(a) for a in sys.argv[1:5])
hists = [probes.histogram("bench_mem_duration_nanoseconds", {"op": str(i)}) for i in range(n_hist)]
counters = [probes.counter("bench_mem_events_total", {"i": str(i)}) for i in range(n_other // 2)]
gauges = [probes.gauge("bench_mem_level", {"i": str(i)}) for i in range(n_other - n_other // 2)]
for i, h in enumerate(hists):
    h.record(1000 + 37 * i)
print("workload pid %d" % os.getpid(), flush=True)
t_end = time.monotonic() + seconds
k = 0
while time.monotonic() < t_end:
    k += 1
    for c in counters:
        c.add(k)
    for g in gauges:
        g.set(float(k % 100))
    for h in hists[:live_hist]:
        for j in range(20):
            h.record(1000 + (k * 7919 + j * 104729) % 1000000)
    time.sleep(1.0)
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def children(pid):
    out = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return out
    for k in kids:
        out.append(k)
        out.extend(children(k))
    return out


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--histograms", type=int, default=4900)
    ap.add_argument("--others", type=int, default=100)
    ap.add_argument("--live-histograms", type=int, default=0,
                    help="histograms that get 20 new values every second (default: all idle after one value)")
    ap.add_argument("--sample-seconds", type=float, default=60.0)
    args = ap.parse_args()
    seconds = int(args.minutes * 60)
    fd, script = tempfile.mkstemp(suffix=".py", prefix="gs-bench-mem-")
    with os.fdopen(fd, "w") as f:
        f.write(WORKLOAD)
    port = free_port()
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error")
    cmd = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(port), sys.executable, script,
           str(args.histograms), str(args.others), str(args.live_histograms), str(seconds + 30)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        workload = int(proc.stdout.readline().split()[-1])
        t0 = time.monotonic()
        samples = []
        next_sample = t0 + args.sample_seconds
        next_window = t0
        series = None
        while time.monotonic() - t0 < seconds:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/signals" % port, timeout=10) as r:
                    doc = json.loads(r.read())
                series = len(doc["metrics"])
                if time.monotonic() >= next_window:
                    next_window += 10
                    with urllib.request.urlopen("http://127.0.0.1:%d/signals?window=60" % port, timeout=10) as r:
                        r.read()
            except OSError:
                pass
            now = time.monotonic()
            if now >= next_sample:
                next_sample += args.sample_seconds
                pids = [proc.pid] + [p for p in children(proc.pid) if p != workload and p not in children(workload)]
                kb = sum(rss_kb(p) for p in pids)
                samples.append(kb)
                emit(bench="sidecar_rss", minute=round((now - t0) / 60.0, 2), rss_mb=round(kb / 1024.0, 1),
                     series=series, processes=len(pids))
            time.sleep(1.0)
        if len(samples) >= 2:
            emit(bench="sidecar_rss_summary", histograms=args.histograms, others=args.others,
                 live_histograms=args.live_histograms, first_mb=round(samples[0] / 1024.0, 1),
                 last_mb=round(samples[-1] / 1024.0, 1), max_mb=round(max(samples) / 1024.0, 1),
                 growth_mb=round((samples[-1] - samples[0]) / 1024.0, 1), target_max_mb=250, target_growth_mb=20)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(script)


if __name__ == "__main__":
    main()
