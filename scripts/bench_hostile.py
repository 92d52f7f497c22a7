#!/usr/bin/env python3
"""Hostile inputs (JSON lines): one line per case of issue 12's table, with
the figure that tells a good sidecar from a bad one. It uses only what every
version of the sidecar has (graphsignal-run, the store, the Prometheus
source, the poller and the ring writer), so the same command gives the
before and after figures:

    python3 scripts/bench_hostile.py [--only CASE,...]

Cases: register, endpoint_exit, scrape_200k, name_flood, unknown_ids,
vandal, vandal_in_process, foreign_ring, symlink_ring, small_shm, ring_capacity, big_numbers,
short_lived, malformed_line, garbage_metrics, tracebacks.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from benchutil import ROOT, compile_c, emit, free_port, work_dir

RUN = [sys.executable, "-m", "graphsignal.cli.run"]
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")



def wrapped(cmd, env=None, timeout=300, options=(), prefix=()):
    """(CompletedProcess, signals dict or None, wall seconds) of graphsignal-run cmd."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gs-bench-")
    os.close(fd)
    os.unlink(path)
    e = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="warning", GRAPHSIGNAL_SIGNALS_FILE=path)
    e.update(env or {})
    t0 = time.monotonic()
    try:
        proc = subprocess.run(list(prefix) + RUN + ["--listen-port", str(free_port())] + list(options) + list(cmd),
                              env=e, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as x:
        return x, None, time.monotonic() - t0
    wall = time.monotonic() - t0
    signals = None
    if os.path.exists(path):
        try:
            with open(path, "rb") as f:
                signals = json.load(f)
        except ValueError:
            signals = None
        os.unlink(path)
    return proc, signals, wall


def metrics(signals, name):
    return [m for m in (signals or {}).get("metrics", []) if m["name"] == name]


def gs_lines(stderr):
    return [x for x in (stderr or b"").decode("utf-8", "replace").splitlines() if x.startswith("graphsignal")]


def test_c(name):
    """A program of tests/support/c, compiled with -I include (the version under test)."""
    out = os.path.join(work_dir("c"), "t_" + os.path.splitext(name)[0])
    src = os.path.join(ROOT, "tests", "support", "c", name)
    subprocess.run(["gcc", "-O2", "-I", os.path.join(ROOT, "include"), src, "-o", out, "-pthread"], check=True)
    return out


# -- cases -------------------------------------------------------------------------------
def case_register(args):
    exe = compile_c("register_many.c")
    n = str(args.instruments)
    bare, under = [], []
    for _ in range(3):
        out = subprocess.run([exe, n], capture_output=True, text=True, timeout=600).stdout.split()
        bare.append(float(out[-1]))
        proc, _, _ = wrapped([exe, n], timeout=600)
        out = proc.stdout.decode().split() if hasattr(proc, "stdout") and proc.stdout else ["nan"]
        under.append(float(out[-1]))
    emit(case="register", instruments=args.instruments, bare_s=round(statistics.median(bare), 4),
         under_graphsignal_run_s=round(statistics.median(under), 4), target_s=1.0)


class Endpoint:
    """stuck / trickle (a byte a second) / body (bytes) on 127.0.0.1."""

    def __init__(self, behaviour, body=b""):
        self.behaviour, self.body = behaviour, body
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.halt = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(c,), daemon=True).start()

    def _answer(self, c):
        try:
            c.recv(65536)
            if self.behaviour == "stuck":
                self.halt.wait(600)
            elif self.behaviour == "trickle":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not self.halt.wait(1.0):
                    c.sendall(b"#")
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(self.body) + self.body)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.halt.set()
        self.sock.close()


def huge_exposition(n):
    return b"# TYPE big gauge\n" + b"".join(b'big{i="%d"} %d\n' % (i, i) for i in range(n))


def case_endpoint_exit(args):
    child = "import time; time.sleep(3); print(time.time(), flush=True)"
    for behaviour in ("stuck", "trickle", "huge"):
        huge = behaviour == "huge"
        e = Endpoint("body" if huge else behaviour, huge_exposition(200_000) if huge else b"")
        try:
            proc, _, wall = wrapped([sys.executable, "-c", child], options=["--metrics-port", str(e.port)], timeout=90)
            t_exit = time.time()
            if isinstance(proc, subprocess.TimeoutExpired):
                emit(case="endpoint_exit", endpoint=behaviour, exit_after_child_s=None,
                     note="still running 90 s after start (killed)")
                continue
            t_child = float(proc.stdout.split()[-1])
            emit(case="endpoint_exit", endpoint=behaviour, exit_after_child_s=round(t_exit - t_child, 2),
                 wall_s=round(wall, 2), target_s=1.0)
        finally:
            e.close()


def case_scrape_200k(args):
    from graphsignal.sidecar.server import ServerThread, make_app
    from graphsignal.sources import SourceThread
    from graphsignal.sources.prometheus import PrometheusSource
    from graphsignal.sidecar.store import MetricStore

    e = Endpoint("body", huge_exposition(200_000))
    store = MetricStore()
    src = PrometheusSource(store, "http://127.0.0.1:%d/metrics" % e.port, "vllm")
    src.setup()
    t0, c0 = time.monotonic(), time.thread_time()
    src.poll()
    scrape_s, scrape_cpu = time.monotonic() - t0, time.thread_time() - c0
    srv = ServerThread(make_app(store), "127.0.0.1", 0)
    srv.start()
    srv.bound.wait(5)
    th = SourceThread(PrometheusSource(store, src.url, "vllm"), store)
    th.start()
    lat = []
    conn = http.client.HTTPConnection("127.0.0.1", srv.port)
    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        t = time.perf_counter()
        conn.request("GET", "/signals")
        conn.getresponse().read()
        lat.append((time.perf_counter() - t) * 1000)
    th.stop(5.0)
    srv.stop()
    e.close()
    lat.sort()
    emit(case="scrape_200k", scrape_s=round(scrape_s, 2), scrape_cpu_s=round(scrape_cpu, 2),
         series_imported=len([k for k in store.series if k[0] == "big"]),
         signals_p50_ms=round(lat[len(lat) // 2], 2), signals_max_ms=round(lat[-1], 2), requests=len(lat))


def _rss_while(proc, pids_fn):
    peak = 0
    while proc.poll() is None:
        kb = 0
        for p in pids_fn():
            try:
                with open("/proc/%d/status" % p) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            kb += int(line.split()[1])
            except OSError:
                pass
        peak = max(peak, kb)
        time.sleep(0.1)
    return peak


def _hostile(mode, n):
    exe = compile_c("hostile_writer.c")
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="warning")
    proc = subprocess.Popen(RUN + ["--listen-port", str(free_port()), exe, mode, str(n)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t.start()
    peak = _rss_while(proc, lambda: [proc.pid])  # graphsignal-run: the sidecar (the workload is a child)
    t.join(5)
    return proc, peak, err[0] if err else b""


def case_name_flood(args):
    proc, peak, err = _hostile("names", 7_100_000)
    emit(case="name_flood", name_records=7_100_000, sidecar_peak_rss_mb=round(peak / 1024.0, 1),
         graphsignal_lines=len(gs_lines(err)), rc=proc.returncode)


def case_unknown_ids(args):
    proc, peak, err = _hostile("unknown", 199_000)
    emit(case="unknown_ids", records=199_000, graphsignal_lines=len(gs_lines(err)), rc=proc.returncode)


def case_vandal(args):
    exe = test_c("ring_vandal.c")
    proc, signals, _ = wrapped([exe], env={"GRAPHSIGNAL_RING_CAPACITY": "256"}, timeout=120)
    lines = proc.stdout.decode().count("after the vandalism") if proc.stdout else 0
    emit(case="vandal", graphsignal_run_rc=proc.returncode, workload_lines=lines, expected_lines=2000,
         signals_written=signals is not None)


VANDAL_IN_PROCESS = r"""
import os, struct, sys, uuid
from graphsignal.sidecar.poller import Poller
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.store import MetricStore
run_id = "v" + uuid.uuid4().hex[:8]
poller = Poller(MetricStore(), run_id, gone_grace=0.0)
name = "gs-%s-%d-probe" % (run_id, os.getpid())
w = Writer(name, kind=L.KIND_PROBE, capacity=64, strings_size=4096)
c = w.name("counterv_total", kind=L.NAME_INSTRUMENT)
for _ in range(2000):  # the read index goes round the small ring many times
    for _ in range(50):
        w.write(L.REC_COUNTER, name_id=c, value=1)
    poller.poll_once()
with open("/dev/shm/" + name, "r+b") as f:  # then the header is rewritten
    f.seek(L.HEADER_OFFSETS["capacity"]); f.write(struct.pack("<Q", 1 << 40))
    f.seek(L.HEADER_OFFSETS["write_index"]); f.write(struct.pack("<Q", 1 << 34))
for _ in range(3):
    poller.poll_once()
print("alive")
poller.cleanup_all()
"""


def case_vandal_in_process(args):
    proc = subprocess.run([sys.executable, "-c", VANDAL_IN_PROCESS], capture_output=True, timeout=300)
    emit(case="vandal_in_process", reader_rc=proc.returncode, alive=proc.stdout.strip() == b"alive",
         note="a ring whose read index went round it 1,500 times, then capacity 2^40 and write index 2^34")


def _poller_case(name, make):
    from graphsignal.sidecar.poller import Poller
    from graphsignal.sidecar.store import MetricStore

    run_id = "b" + uuid.uuid4().hex[:10]
    store = MetricStore()
    poller = Poller(store, run_id, gone_grace=0.0)
    extra = make(run_id)
    try:
        poller.poll_once()
        got = [s.total for s in store.lookup("injected_total")]
        emit(case=name, accepted=bool(got), counted=got[0] if got else None)
    finally:
        poller.cleanup_all()
        for p in extra:
            if os.path.lexists(p):
                os.unlink(p)


def _counter_ring(name):
    from graphsignal.rings import layout as L
    from graphsignal.rings.reader import Writer

    w = Writer(name, kind=L.KIND_PROBE, capacity=64)
    nid = w.name("counter\x1finjected_total", kind=L.NAME_INSTRUMENT)
    w.write(L.REC_COUNTER, name_id=nid, value=999_999)
    w.unmap()
    return "/dev/shm/" + name


def case_foreign_ring(args):
    if os.geteuid() != 0:
        emit(case="foreign_ring", skipped="needs root")
        return

    def make(run_id):
        path = _counter_ring("gs-%s-%d-probe" % (run_id, os.getpid()))
        os.chown(path, 65534, 65534)
        os.chmod(path, 0o666)
        return [path]

    _poller_case("foreign_ring", make)


def case_symlink_ring(args):
    def make(run_id):
        target = _counter_ring("gs-target%s-%d-probe" % (run_id, os.getpid()))
        link = "/dev/shm/gs-%s-%d-probe" % (run_id, os.getpid())
        os.symlink(target, link)
        return [link, target]

    _poller_case("symlink_ring", make)


def _unshare_ok():
    return os.geteuid() == 0 and shutil.which("unshare")


def case_small_shm(args):
    if not _unshare_ok():
        emit(case="small_shm", skipped="needs root and unshare")
        return
    writer = compile_c("ring_writer.c")  # 2M kernel records each, at 1M records/s
    jobs = {"3_writers": "for i in 1 2 3; do %s 2000000 1000000 1 >/dev/null & done; wait" % writer}
    rank = os.path.join(ROOT, "tests", "support", "c", "rank_writer.c")  # the 8-rank job needs this version's header
    if os.path.exists(rank) and "graphsignal_ring_put_name" in open(os.path.join(ROOT, "include", "graphsignal",
                                                                                  "probe.h")).read():
        jobs["8_ranks_2_rings"] = "for i in $(seq 8); do %s 50000 & done; wait" % test_c("rank_writer.c")
    for label, job in jobs.items():
        script = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
        proc, signals, _ = wrapped(["sh", "-c", job], prefix=["unshare", "-m", "sh", "-c", script, "sh"], timeout=300)
        dropped = sum(m["stats"]["total"] or 0 for m in metrics(signals, "graphsignal_dropped_records"))
        emit(case="small_shm", shm="64m", job=label, graphsignal_run_rc=proc.returncode,
             rings_reporting=len(metrics(signals, "graphsignal_dropped_records")), dropped_records=dropped,
             sigbus=b"Bus error" in (proc.stderr or b"") or proc.returncode in (-7, 135))


def case_ring_capacity(args):
    src = os.path.join(work_dir("c"), "ring_capacity.c")
    with open(src, "w") as f:
        f.write('#include <graphsignal/probe.h>\nint main(void) {\n'
                '  graphsignal_probe_entry* e = graphsignal_probe_register("cap_total", GRAPHSIGNAL_COUNTER, NULL,'
                ' NULL, 0);\n  char name[256], path[300]; struct stat st;\n'
                '  graphsignal_add(e, 1);\n  graphsignal_ring_name(name, sizeof name, "probe");\n'
                '  snprintf(path, sizeof path, "/dev/shm/%s", name);\n'
                '  if (stat(path, &st) != 0) { printf("ring none\\n"); return 0; }\n'
                '  printf("ring %lld bytes %lld reserved\\n", (long long)st.st_size, (long long)st.st_blocks * 512);\n'
                '  return 0;\n}\n')
    exe = src[:-2]
    subprocess.run(["gcc", "-O2", "-I", os.path.join(ROOT, "include"), src, "-o", exe, "-pthread"], check=True)
    proc, _, _ = wrapped([exe], env={"GRAPHSIGNAL_RING_CAPACITY": str(1 << 40)})
    out = proc.stdout.decode().split()
    emit(case="ring_capacity", value="2^40", ring_file_bytes=int(out[1]) if len(out) > 2 else None,
         reserved_bytes=int(out[3]) if len(out) > 3 else None,
         lines_about_it=sum("GRAPHSIGNAL_RING_CAPACITY" in x for x in gs_lines(proc.stderr)))


def case_big_numbers(args):
    from werkzeug.test import Client

    from graphsignal.sidecar.server import make_app
    from graphsignal.sources import prometheus
    from graphsignal.sidecar.store import MetricStore

    code = ("from graphsignal import probes\nh = probes.histogram('huge_nanoseconds')\n"
            "for _ in range(2):\n    h.record((1 << 64) - 1000)\n")
    proc, signals, _ = wrapped([sys.executable, "-c", code])
    got = metrics(signals, "huge_nanoseconds")
    store = MetricStore()
    prometheus.apply(store, prometheus.parse_exposition("# TYPE c counter\nc_total 36893488147419103232\n"))
    try:
        status = Client(make_app(store)).get("/signals").status_code
    except Exception as e:  # the app raised: a server answers 500
        status = "500 (%s: %s)" % (type(e).__name__, e)
    emit(case="big_numbers", probe_signals_file_written=signals is not None,
         probe_sum=got[0]["stats"]["sum"] if got else None, expected_sum=2 * ((1 << 64) - 1000),
         traceback_on_stderr=b"Traceback" in (proc.stderr or b""), prometheus_signals_status=status)


def case_short_lived(args):
    exe = test_c("fork_many.c")
    proc, signals, wall = wrapped([exe, "3000"], env={"GRAPHSIGNAL_RING_CAPACITY": "1024"}, timeout=600)
    late = metrics(signals, "late_probe_total")
    cap = metrics(signals, "graphsignal_dropped_series")
    emit(case="short_lived", processes=3000, late_probe_seen=bool(late), series=len((signals or {}).get("metrics", [])),
         dropped_series_counter=cap[0]["stats"]["total"] if cap else None,
         cap_error=any("series cap" in e["message"] for e in (signals or {}).get("errors", [])), wall_s=round(wall, 1))


def case_malformed_line(args):
    from graphsignal.sources import prometheus
    from graphsignal.sidecar.store import MetricStore

    with open(os.path.join(ROOT, "tests", "data", "engines", "vllm_1.txt"), encoding="utf-8") as f:
        raw = f.read()
    store = MetricStore()
    e = Endpoint("body", raw.encode())
    src = prometheus.PrometheusSource(store, "http://127.0.0.1:%d/metrics" % e.port, "vllm")
    src.setup()
    src.poll()
    e.close()
    emit(case="malformed_line", source="vllm docs example with its '...' elisions",
         series_imported=len([k for k in store.series if k[0].startswith("vllm:")]),
         scrape_up=store.lookup(prometheus.UP_METRIC)[0].value)


def case_garbage_metrics(args):
    body = b"\x1b[2J\x1b[31mred\x07bell\x00nul\n" + os.urandom(4000).replace(b"\n", b" ") + b"\n"
    e = Endpoint("body", body)
    try:
        proc, _, _ = wrapped([sys.executable, "-c", "import time; time.sleep(2.5)"],
                             options=["--metrics-port", str(e.port)])
    finally:
        e.close()
    err = proc.stderr.replace(b"\n", b"")
    emit(case="garbage_metrics", reported=b"scraping" in proc.stderr, control_bytes_on_stderr=len(CONTROL.findall(err)))


def case_tracebacks(args):
    three = ("import traceback\nfor i in range(3):\n    try:\n        {}['k%d' % i]\n    except KeyError:\n"
             "        traceback.print_exc()\n")
    proc, signals, _ = wrapped([sys.executable, "-c", three])
    got3 = [x for x in (signals or {}).get("errors", []) if x["tags"].get("error.kind") == "exception"]
    many = ("import sys, time\nt0 = time.monotonic()\nw = sys.stderr.write\nfor i in range(100000):\n"
            "    w('Traceback (most recent call last):\\n  File \"/app/w.py\", line %d, in step\\n    run()\\n'"
            " \"KeyError: 'request %d'\\n\" % (i, i))\nsys.stderr.flush()\n"
            "print(time.monotonic() - t0)\n")
    t0 = time.monotonic()
    bare = subprocess.run([sys.executable, "-c", many], capture_output=True)
    bare_wall = time.monotonic() - t0
    proc, signals, wall = wrapped([sys.executable, "-c", many], env={"GRAPHSIGNAL_LOG_LEVEL": "error"})
    got = [x for x in (signals or {}).get("errors", []) if x["tags"].get("error.kind") == "exception"]
    dropped = metrics(signals, "console_errors_dropped_total")
    emit(case="tracebacks", back_to_back_3_entries=len(got3), distinct_100k_entries=len(got),
         distinct_100k_messages=len({x["message"] for x in got}),
         counted_as_dropped=sum(m["stats"]["total"] for m in dropped),
         unscanned_bytes=sum(m["stats"]["total"] for m in metrics(signals, "console_unscanned_bytes_total")),
         workload_s_under_graphsignal_run=round(float(proc.stdout.split()[-1]), 2),
         workload_s_bare=round(float(bare.stdout.split()[-1]), 2), wall_s=round(wall, 2),
         bare_wall_s=round(bare_wall, 2), stderr_identical=proc.stderr == bare.stderr)


CASES = ["register", "endpoint_exit", "scrape_200k", "name_flood", "unknown_ids", "vandal", "vandal_in_process",
         "foreign_ring",
         "symlink_ring", "small_shm", "ring_capacity", "big_numbers", "short_lived", "malformed_line",
         "garbage_metrics", "tracebacks"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--instruments", type=int, default=100_000)
    args = ap.parse_args()
    for name in args.only.split(","):
        try:
            globals()["case_" + name](args)
        except Exception as e:  # one broken case (an old version lacking something) must not hide the others
            emit(case=name, error="%s: %s" % (type(e).__name__, e))


if __name__ == "__main__":
    main()
