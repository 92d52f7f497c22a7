#!/usr/bin/env python3
"""graphsignal-server's capacity (JSON lines), on each backend: the SQLite
file and PostgreSQL (a cluster of Debian's `postgresql` started in a
temporary folder by tests/support/pg.py, fsync on, as in production;
--backends sqlite skips it).

Every simulated instance is a real MetricStore shaped like an 8-GPU box
running a tensor-parallel engine (NVML gauges for 8 GPUs, host, 8 rank
processes each with CUDA kernel/graph/memcpy/sync profiles over 120
kernels and a probe histogram, the vLLM fixtures' engine metrics: 269
series) that changes every simulated second as a busy one does, uploaded
by the sidecar's real Uploader (so bodies hold what changed, gzip'd).

  fleet_ingest mode=inproc   100 instances uploading once a simulated second
                             (--seconds) into the app in this process, one
                             thread: CPU per upload in the app (gunzip, checks,
                             the database client) plus, on PostgreSQL, its
                             server processes' CPU; uploads per second one core
                             takes = 1 / that
  fleet_ingest mode=http     the same bodies over HTTP (keep-alive, --clients
                             threads) to 1, 2 and 4 graphsignal-server processes
                             on one PostgreSQL (1 on SQLite: one writer), round
                             robin: uploads per second achieved on this machine,
                             and CPU per upload of the servers and the database
                             (uploads per second per core); clients share the
                             machine's cores
  fleet_read                 GET /api/v1/instances, /signals, /signals?window=300
                             and /history latency (p50, p95, p99) from one
                             reader while uploads arrive at 80 % of the rate the
                             1-process HTTP run achieved
  fleet_db                   1 instance uploading once a simulated minute for 8
                             days (history at steady state: a day of minutes,
                             the rest hourly, nothing past the 7-day retention):
                             the bytes it adds in its first day (per
                             instance-day) and at steady state (per instance),
                             with 1,250 instances' worth (a 10,000-GPU fleet);
                             on disk as left, and compacted (VACUUM [FULL])

--only hostile runs scripts/bench_fleet_hostile.py's cases.
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
from benchutil import ROOT, emit, free_port, percentile
from werkzeug.test import Client

from graphsignal.fleet.app import make_app
from graphsignal.sidecar.upload import Uploader
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

sys.path.insert(0, os.path.join(ROOT, "tests"))

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
    and timing the app's CPU per request (this thread's)."""

    def __init__(self, app):
        self.client = Client(app)
        self.cpu = 0.0
        self.n = 0
        self.bodies = []  # (compressed body) when keeping them for the HTTP runs
        self.keep = False

    def post(self, url, data, headers, **kw):
        if self.keep:
            self.bodies.append(data)
        t0 = time.thread_time()
        r = self.client.post("/api/v1/ingest", data=data, headers=headers)
        self.cpu += time.thread_time() - t0
        self.n += 1
        return _Resp(r.status_code, r.headers)


class _Resp:
    def __init__(self, status, headers):
        self.status_code = status
        self.headers = headers

    def close(self):
        pass


class Backend:
    """Where the fleet goes: "sqlite" (a new file per database()) or
    "postgresql" (a new database per database() on one cluster)."""

    def __init__(self, name, tmp):
        self.name, self.tmp = name, tmp
        self.server = None
        self.n = 0
        if name == "postgresql":
            from support import pg

            b = pg.bindir()
            if b is None:
                raise SystemExit("no PostgreSQL server here (apt-get install postgresql, or GS_PG_BIN=DIR)")
            self.server = pg.PgServer(b, durable=True)
            self.password = pg.PASSWORD

    def database(self):
        self.n += 1
        if self.server is None:
            return os.path.join(self.tmp, "fleet-%d.db" % self.n)
        return self.server.new_database()

    def open(self, where, **kw):
        if self.server is None:
            from graphsignal.fleet.db import DB

            return DB(where, **kw)
        from graphsignal.fleet.pg import PgDB

        return PgDB(where, password=self.password, **kw)

    def db_cpu(self):
        """CPU seconds of the database's own processes (SQLite runs in the app's)."""
        return self.server.cpu_seconds() if self.server else 0.0

    def env(self):
        return {"PGPASSWORD": self.password} if self.server else {}

    def close(self):
        if self.server:
            self.server.cleanup()


def simulate(backend, db, n_instances, seconds, step_seconds=1, keep=False, clock0=1_800_000_000 * NS,
             clock=None, every=None):
    """Runs n_instances for `seconds` simulated seconds, one upload per
    instance every step_seconds, into `db`; returns the AppHTTP.
    every(simulated seconds): called after each step."""
    clock = clock or [clock0]
    http = AppHTTP(make_app(db, [KEY]))
    http.keep = keep
    engine = engine_samples()
    insts = [Instance(i, lambda: clock[0], engine) for i in range(n_instances)]
    ups = [Uploader(x.store, KEY, "http://fleet", clock=lambda: 0.0, http=http) for x in insts]
    for t in range(step_seconds, seconds + 1, step_seconds):
        clock[0] += step_seconds * NS
        for inst, up in zip(insts, ups):
            inst.step()
            if not up.step():
                raise SystemExit("an upload was refused")
        if every:
            every(t)
    return http


def ingest_inproc(args, backend):
    clock = [1_800_000_000 * NS]
    db = backend.open(backend.database(), clock=lambda: clock[0])
    cpu0 = backend.db_cpu()
    http = simulate(backend, db, 100, args.seconds, keep=True, clock=clock)
    db_cpu = backend.db_cpu() - cpu0
    db.close()
    app_ms, db_ms = http.cpu / http.n * 1000, db_cpu / http.n * 1000
    emit(bench="fleet_ingest", mode="inproc", backend=backend.name, instances=100, series=269, uploads=http.n,
         mean_body_bytes=int(sum(len(b) for b in http.bodies) / len(http.bodies)),
         app_cpu_ms_per_upload=round(app_ms, 3), db_cpu_ms_per_upload=round(db_ms, 3),
         cpu_ms_per_upload=round(app_ms + db_ms, 3), uploads_per_second_per_core=round(1000 / (app_ms + db_ms), 1))
    return http.bodies


def _proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Servers:
    """n graphsignal-server processes on one database."""

    def __init__(self, backend, where, n, tmp):
        self.ports, self.procs = [], []
        env = dict(os.environ, GRAPHSIGNAL_SERVER_API_KEYS=KEY, **backend.env())
        for i in range(n):
            port = free_port()
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "graphsignal.cli.server", "--port", str(port), "--database", where], env=env,
                cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server-%d.log" % port), "wb")))
            self.ports.append(port)
        deadline = time.monotonic() + 30
        for port in self.ports:
            while True:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    c.request("GET", "/health")
                    c.getresponse().read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise SystemExit("graphsignal-server did not come up")
                    time.sleep(0.1)

    def cpu(self):
        return sum(_proc_cpu(p.pid) for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(20)


def _post_all(ports, bodies, clients, rate=None, stop=None):
    """Sends the bodies from `clients` threads (keep-alive; thread i to
    ports[i % len]), at `rate` a second when given; returns (done, wall)."""
    lock = threading.Lock()
    nxt = [0]
    done = [0]
    t0 = time.monotonic()

    def worker(i):
        conn = http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=60)
        while stop is None or not stop.is_set():
            with lock:
                k = nxt[0]
                if k >= len(bodies):
                    break
                nxt[0] += 1
            if rate:
                time.sleep(max(0.0, t0 + k / rate - time.monotonic()))
            conn.request("POST", "/api/v1/ingest", body=bodies[k],
                         headers={"X-API-Key": KEY, "Content-Encoding": "gzip", "Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit("HTTP %d" % r.status)
            with lock:
                done[0] += 1
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0], time.monotonic() - t0


def ingest_http(args, backend, bodies, procs, tmp):
    srv = Servers(backend, backend.database(), procs, tmp)
    try:
        cpu0, db0 = srv.cpu(), backend.db_cpu()
        done, wall = _post_all(srv.ports, bodies, args.clients)
        cpu, db_cpu = srv.cpu() - cpu0, backend.db_cpu() - db0
    finally:
        srv.stop()
    per = (cpu + db_cpu) / done * 1000
    emit(bench="fleet_ingest", mode="http", backend=backend.name, server_processes=procs, clients=args.clients,
         uploads=done, uploads_per_second=round(done / wall, 1),
         server_cpu_ms_per_upload=round(cpu / done * 1000, 3), db_cpu_ms_per_upload=round(db_cpu / done * 1000, 3),
         uploads_per_second_per_core=round(1000 / per, 1), cores_busy=round((cpu + db_cpu) / wall, 2),
         machine_cores=os.cpu_count())
    return done / wall


def read_latency(args, backend, bodies, capacity, tmp):
    rate = 0.8 * capacity
    srv = Servers(backend, backend.database(), 1, tmp)
    lat = {"instances": [], "signals": [], "window": [], "history": []}
    stop = threading.Event()

    def reader():
        rng = random.Random(7)
        conn = http.client.HTTPConnection("127.0.0.1", srv.ports[0], timeout=60)
        while not stop.is_set():
            iid = "bench-%04d" % rng.randrange(100)
            for name, path in (("instances", "/api/v1/instances"), ("signals", "/api/v1/signals?instance_id=" + iid),
                               ("window", "/api/v1/signals?window=300&instance_id=" + iid),
                               ("history", "/api/v1/history?seconds=3600&instance_id=" + iid)):
                t0 = time.monotonic()
                conn.request("GET", path, headers={"X-API-Key": KEY})
                r = conn.getresponse()
                r.read()
                if r.status in (200, 404):  # 404: that instance's first upload is still to come
                    lat[name].append(time.monotonic() - t0)
            time.sleep(0.05)
        conn.close()

    try:
        _post_all(srv.ports, bodies[:200], args.clients)  # every instance is there before reads start
        th = threading.Thread(target=reader)
        th.start()
        done, wall = _post_all(srv.ports, bodies[200:], args.clients, rate=rate)
        stop.set()
        th.join()
    finally:
        stop.set()
        srv.stop()
    out = {}
    for name, v in lat.items():
        out[name + "_ms"] = {"n": len(v), "p50": round(percentile(v, 50) * 1000, 1),
                             "p95": round(percentile(v, 95) * 1000, 1), "p99": round(percentile(v, 99) * 1000, 1)}
    emit(bench="fleet_read", backend=backend.name, server_processes=1, ingest_target_per_second=round(rate, 1),
         ingest_achieved_per_second=round(done / wall, 1), **out)


def db_size(args, backend):
    where = backend.database()
    clock = [1_800_000_000 * NS]
    db = backend.open(where, clock=lambda: clock[0])
    empty = _sizes(backend, db)
    at = {}

    def every(t):
        if t in (86400, args.days * 86400):
            at[t] = _sizes(backend, db)

    http = simulate(backend, db, 1, args.days * 86400, step_seconds=60, clock=clock, every=every)
    rows = db.fetchall("SELECT COUNT(*) FROM history")[0][0]
    db.close()
    (day, day_compact), (steady, steady_compact) = [(d - empty[0], c - empty[1]) for d, c in
                                                    (at[86400], at[args.days * 86400])]
    emit(bench="fleet_db", backend=backend.name, instances=1, simulated_days=args.days, uploads=http.n,
         history_rows=rows, bytes_per_instance_day=day, compact_bytes_per_instance_day=day_compact,
         steady_state_bytes_per_instance=steady, compact_steady_state_bytes_per_instance=steady_compact,
         fleet_1250_instances_bytes=steady * 1250, empty_database_bytes=empty[0])


def _sizes(backend, db):
    """(bytes on disk as the server leaves them, bytes once compacted):
    SQLite's file after a checkpoint, then VACUUM; PostgreSQL's database
    after VACUUM (what autovacuum does in time: dead rows' room reusable,
    the files as large), then VACUUM FULL (rewritten)."""
    if backend.server is None:
        db.checkpoint()
        on_disk = db.size_bytes()
        with db.lock:
            db.conn.execute("VACUUM")
        db.checkpoint()
        return on_disk, db.size_bytes()
    with db.pool.connection() as conn:
        conn.execute("VACUUM")
        on_disk = db.size_bytes()
        conn.execute("VACUUM FULL")
    return on_disk, db.size_bytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20, help="simulated seconds of the ingest runs")
    ap.add_argument("--clients", type=int, default=8, help="client threads of the HTTP runs")
    ap.add_argument("--processes", default="1,2,4", help="server processes on one PostgreSQL (HTTP runs)")
    ap.add_argument("--days", type=int, default=8, help="simulated days of the database-size run")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--only", choices=["ingest", "read", "db", "hostile"], default=None)
    ap.add_argument("--cases", default=None, help="hostile cases to run (comma-separated)")
    ap.add_argument("--server-root", default=None, help="run graphsignal-server from this tree (hostile cases)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gs-bench-fleet-") as tmp:
        if args.only == "hostile":
            import bench_fleet_hostile

            args.cases = args.cases or ",".join(bench_fleet_hostile.HOSTILE_CASES)
            bench_fleet_hostile.run(args, tmp)
            return
        for name in args.backends.split(","):
            backend = Backend(name, tmp)
            try:
                if args.only in (None, "ingest", "read"):
                    bodies = ingest_inproc(args, backend)
                    capacity = None
                    for n in [int(x) for x in args.processes.split(",")] if name == "postgresql" else [1]:
                        got = ingest_http(args, backend, bodies, n, tmp)
                        capacity = capacity or got
                    if args.only in (None, "read"):
                        read_latency(args, backend, bodies, capacity, tmp)
                if args.only in (None, "db"):
                    db_size(args, backend)
            finally:
                backend.close()


if __name__ == "__main__":
    main()
