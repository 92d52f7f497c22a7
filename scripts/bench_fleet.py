#!/usr/bin/env python3
"""graphsignal-server (JSON lines): ingest throughput and database size.

Every simulated instance is a real MetricStore shaped like an 8-GPU box
running a tensor-parallel engine (NVML gauges for 8 GPUs, host, 8 rank
processes each with CUDA kernel/graph/memcpy/sync profiles over 120
kernels and a probe histogram, the vLLM fixtures' engine metrics: 269
series) that changes every simulated second as a busy one does, uploaded
by the sidecar's real Uploader (so bodies hold what changed, gzip'd).

  ingest_wsgi   100 instances, each uploading once a simulated second, into
                the app in this process on one thread: the server's CPU
                per upload (thread time inside the app: gunzip, checks,
                SQLite) and the uploads per second one core can take
  ingest_http   the same bodies sent over HTTP with keep-alive from client
                threads to a graphsignal-server process pinned to one CPU
                (this process pinned to the other): uploads per second
                achieved and the server's CPU per upload (/proc/PID/stat)
  db_hour       10 instances for one simulated hour (36,000 uploads; time
                is simulated, not waited): the database's size after it
  db_week       1 instance uploading once a simulated minute for 8 days
                (history at steady state: a day of minutes, the rest hourly,
                nothing past the 7-day retention): its size, and that times
                100 as the disk 100 instances take
"""
import argparse
import http.client
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from benchutil import ROOT, emit
from werkzeug.test import Client

from graphsignal.fleet.app import make_app
from graphsignal.fleet.db import DB
from graphsignal.sidecar.upload import Uploader
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

NS = 1_000_000_000
KEY = "bench-key"
GPU_GAUGES = ["gpu_utilization_percent", "gpu_memory_busy_percent", "gpu_memory_used_bytes",
              "gpu_memory_free_bytes", "gpu_memory_total_bytes", "gpu_power_usage_watts",
              "gpu_power_management_limit_watts", "gpu_temperature_celsius", "gpu_clock_sm_megahertz",
              "gpu_clock_mem_megahertz", "gpu_max_clock_sm_megahertz", "gpu_clocks_throttle_reasons",
              "gpu_performance_state", "gpu_pcie_link_generation", "gpu_pcie_link_width",
              "gpu_pcie_throughput_rx_kilobytes_per_second", "gpu_pcie_throughput_tx_kilobytes_per_second",
              "gpu_pcie_replay_counter", "gpu_nvlink_active_links", "gpu_ecc_errors", "gpu_xid_errors",
              "gpu_fan_speed_percent"]
CHANGING = {"gpu_utilization_percent", "gpu_memory_busy_percent", "gpu_memory_used_bytes", "gpu_memory_free_bytes",
            "gpu_power_usage_watts", "gpu_temperature_celsius", "gpu_clock_sm_megahertz",
            "gpu_pcie_throughput_rx_kilobytes_per_second", "gpu_pcie_throughput_tx_kilobytes_per_second"}
KERNELS = ["_ZN7cutlass6KernelINS_4gemm6kernel13GemmUniversalIN4vllm%dEEEEvNT_6ParamsE_sm90_%03d" % (k % 7, k)
           for k in range(120)]


GPUS = 8


def engine_samples():
    out = []
    for name in ("vllm_1.txt", "vllm_3.txt"):
        with open(os.path.join(ROOT, "tests", "data", "engines", name), encoding="utf-8") as f:
            text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
        out += prometheus.parse_exposition(text)
    return out


class Instance:
    """One simulated sidecar: its store, changed once a simulated second."""

    def __init__(self, i, clock, engine):
        self.rng = random.Random(i)
        self.store = MetricStore(clock=clock)
        self.store.set_context(**{"instance.id": "bench-%04d" % i, "host.name": "gpu-%04d" % i})
        self.engine = engine
        self.pids = [str(1000 + p) for p in range(GPUS)]
        s = self.store
        s.set_resource("host", {}, {"cpu.count": 64, "platform.name": "Linux"})
        for pid in self.pids:
            s.set_resource("process", {"process.pid": pid}, {"process.command_line": "python -m vllm serve m"})
        for d in range(GPUS):
            s.set_resource("device", {"device.index": str(d)}, {"name": "NVIDIA H200", "uuid": "GPU-%d" % d})
        self.t = 0
        self.step()

    def step(self):
        s, rng = self.store, self.rng
        self.t += 1
        for d in range(GPUS):
            tags = {"device.index": str(d), "device.uuid": "GPU-%d" % d}
            for g in GPU_GAUGES:
                v = rng.random() * 100 if g in CHANGING else 1.0
                s.set_gauge(g, tags, v)
        for name in ("host_cpu_usage_percent", "host_memory_usage_bytes"):
            s.set_gauge(name, {}, rng.random() * 1000)
        for pid in self.pids:
            tags = {"process.pid": pid}
            s.set_gauge("process_cpu_usage_percent", tags, rng.random() * 100)
            s.set_gauge("process_memory_usage_bytes", tags, float(rng.randrange(1 << 34)))
            s.add_counter("process_cpu_time_nanoseconds", tags, rng.randrange(1 << 30))
        for pid in self.pids:
            tags = {"process.pid": pid, "device.cuda_index": "0", "device.uuid": "GPU-%s" % pid[-1]}
            s.add_profile("cuda_kernels_nanoseconds", tags,
                          [(KERNELS[rng.randrange(120)], rng.randrange(1, 50_000), 1) for _ in range(40)])
            s.add_profile("cuda_graphs_nanoseconds", tags, [("graph_%d" % rng.randrange(10), 900_000, 1)])
            s.add_profile("cuda_memcpy_nanoseconds", dict(tags, host_memory="pinned"),
                          [("host_to_device", 5000, 2), ("device_to_host", 3000, 1)])
            s.add_profile("cuda_sync_nanoseconds", tags, [("stream", 20_000, 3)])
            s.add_counter("cuda_memcpy_bytes", dict(tags, kind="host_to_device"), 1 << 20)
            s.add_histogram_values("myengine_step_duration_nanoseconds", tags,
                                   np.asarray([rng.randrange(1_000_000, 30_000_000) for _ in range(20)],
                                              dtype=np.uint64))
        scaled = []
        for kind, name, tags, value in self.engine:
            if kind == "counter":
                value = value * self.t
            elif kind == "histogram":
                count, total, le, cum = value
                value = (count * self.t, (total or 0) * self.t, le, [c * self.t for c in cum])
            scaled.append((kind, name, tags, value))
        prometheus.apply(s, scaled)


class AppHTTP:
    """The Uploader's HTTP session, posting into the app in this process
    and timing the server's thread CPU per request."""

    def __init__(self, app):
        self.client = Client(app)
        self.cpu = 0.0
        self.n = 0
        self.bodies = []  # (compressed body) when keeping them for the HTTP run
        self.keep = False

    def post(self, url, data, headers, **kw):
        if self.keep:
            self.bodies.append(data)
        t0 = time.thread_time()
        r = self.client.post("/api/v1/ingest", data=data, headers=headers)
        self.cpu += time.thread_time() - t0
        self.n += 1
        return _Resp(r.status_code)


class _Resp:
    def __init__(self, status):
        self.status_code = status

    def close(self):
        pass


def simulate(n_instances, seconds, path, step_seconds=1, keep=False, clock0=1_800_000_000 * NS):
    """Runs n_instances for `seconds` simulated seconds, one upload per
    instance every step_seconds; returns (AppHTTP, DB)."""
    clock = [clock0]
    db = DB(path, clock=lambda: clock[0])
    http = AppHTTP(make_app(db, [KEY]))
    http.keep = keep
    engine = engine_samples()
    insts = [Instance(i, lambda: clock[0], engine) for i in range(n_instances)]
    ups = [Uploader(x.store, KEY, "http://fleet", clock=lambda: 0.0, http=http) for x in insts]
    for _ in range(0, seconds, step_seconds):
        clock[0] += step_seconds * NS
        for inst, up in zip(insts, ups):
            inst.step()
            if not up.step():
                raise SystemExit("an upload was refused")
    return http, db


def ingest_wsgi(args, tmp):
    http, db = simulate(100, args.seconds, os.path.join(tmp, "wsgi.db"), keep=True)
    per = http.cpu / http.n
    emit(bench="fleet_ingest", mode="wsgi", instances=100, uploads=http.n,
         mean_body_bytes=int(sum(len(b) for b in http.bodies) / len(http.bodies)),
         server_cpu_ms_per_upload=round(per * 1000, 3), uploads_per_second_one_core=round(1 / per, 1),
         instances_at_one_upload_a_second_per_core=int(1 / per))
    db.close()
    return http.bodies


def ingest_http(args, tmp, bodies):
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "graphsignal.cli.server", "--port", str(port), "--db",
                               os.path.join(tmp, "http.db"), "--api-key", KEY],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        os.sched_setaffinity(0, {1} if os.cpu_count() > 1 else {0})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                c.getresponse().read()
                break
            except OSError:
                time.sleep(0.1)
        queue = list(bodies)
        lock = threading.Lock()
        done = [0]

        def worker():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while True:
                with lock:
                    if not queue:
                        break
                    body = queue.pop(0)
                conn.request("POST", "/api/v1/ingest", body=body,
                             headers={"X-API-Key": KEY, "Content-Encoding": "gzip",
                                      "Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit("HTTP %d" % r.status)
                with lock:
                    done[0] += 1
            conn.close()

        cpu0 = _proc_cpu(server.pid)
        t0 = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        cpu = _proc_cpu(server.pid) - cpu0
        emit(bench="fleet_ingest", mode="http", instances=100, uploads=done[0], clients=args.clients,
             uploads_per_second=round(done[0] / wall, 1), server_cpu_ms_per_upload=round(cpu / done[0] * 1000, 3),
             server_core_percent=round(cpu / wall * 100, 1))
    finally:
        server.terminate()
        server.wait(10)


def db_hour(args, tmp):
    path = os.path.join(tmp, "hour.db")
    http, db = simulate(10, 3600, path)
    db.checkpoint()
    rows = db.conn.execute("SELECT COUNT(*), SUM(LENGTH(snapshot)) FROM history").fetchone()
    series = db.conn.execute("SELECT COUNT(*), SUM(LENGTH(doc)) FROM series").fetchone()
    emit(bench="fleet_db", case="hour", instances=10, simulated_seconds=3600, uploads=http.n,
         db_bytes=db.size_bytes(), history_rows=rows[0], history_bytes=rows[1], series_rows=series[0],
         series_bytes=series[1], server_cpu_ms_per_upload=round(http.cpu / http.n * 1000, 3))
    db.close()


def db_week(args, tmp):
    path = os.path.join(tmp, "week.db")
    http, db = simulate(1, 8 * 86400, path, step_seconds=60)
    db.checkpoint()
    size = db.size_bytes()
    rows = db.conn.execute("SELECT COUNT(*), SUM(LENGTH(snapshot)) FROM history").fetchone()
    emit(bench="fleet_db", case="week", instances=1, simulated_days=8, uploads=http.n, db_bytes=size,
         history_rows=rows[0], history_bytes=rows[1], mean_history_row_bytes=int(rows[1] / max(1, rows[0])),
         estimate_100_instances_bytes=size * 100)
    db.close()


def _proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20, help="simulated seconds of the ingest runs")
    ap.add_argument("--clients", type=int, default=8, help="client threads of the HTTP run")
    ap.add_argument("--only", choices=["ingest", "db"], default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gs-bench-fleet-") as tmp:
        if args.only in (None, "ingest"):
            bodies = ingest_wsgi(args, tmp)
            ingest_http(args, tmp, bodies)
        if args.only in (None, "db"):
            db_hour(args, tmp)
            db_week(args, tmp)


if __name__ == "__main__":
    main()
