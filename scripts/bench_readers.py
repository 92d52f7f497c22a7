#!/usr/bin/env python3
"""Does the drain keep up while people read? (JSON lines)

A C workload (scripts/c/counter_writer.c) adds to --series counters through
the probe header at --rate records/s for --seconds under graphsignal-run,
while R concurrent clients (--readers, e.g. 0,10,50) read the sidecar over
real HTTP as fast as it answers, each cycling through /signals,
/signals?window=5, /signals?history=60 and /metrics. Per run: records
offered by the workload, dropped (the probe ring's own count, and what the
final payload's graphsignal_dropped_records says), dropped per million,
reads answered and their median latency, and whether the final payload
said the loss (an `errors` entry).

--configs compares checkouts, interleaved per repetition: "." is this
tree; PATH another checkout (a `git worktree` of an older commit, with
graphsignal/_gsnative.abi3.so copied in). Each summary line is the median
over --reps.

  python scripts/bench_readers.py --configs /tmp/base,. --readers 0,10,50 --reps 3
  python scripts/bench_readers.py --rate 3000 --series 64 --threads 4   # llama-server-like
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

from benchutil import compile_c, emit  # noqa: E402

PATHS = ("/signals", "/signals?window=5", "/signals?history=60", "/metrics")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reader(port, start, halt, out):
    """Reads PATHS in turn, as fast as they are answered, on one keep-alive
    connection (a new one after an error)."""
    conn, i = None, start
    while not halt.is_set():
        path = PATHS[i % len(PATHS)]
        i += 1
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            out.append((path, r.status, time.perf_counter() - t0))
        except (OSError, http.client.HTTPException):
            out.append((path, None, time.perf_counter() - t0))
            if conn is not None:
                conn.close()
            conn = None
            halt.wait(0.05)
    if conn is not None:
        conn.close()


def _payload_dropped(doc):
    """graphsignal_dropped_records of the probe writer, and whether an
    `errors` entry speaks of dropped records."""
    dropped = 0
    for m in doc.get("metrics") or ():
        if m["name"] == "graphsignal_dropped_records" and (m.get("tags") or {}).get("writer") == "probe":
            dropped += m["stats"].get("total") or 0
    said = any("dropped" in (e.get("message") or "") and "record" in (e.get("message") or "")
               for e in doc.get("errors") or ())
    return dropped, said


def one_run(tree, writer, readers, args):
    env = dict(os.environ)
    cwd = None
    if tree != ".":
        env["PYTHONPATH"] = tree
        cwd = tempfile.mkdtemp(prefix="gs-bench-cwd-")  # python -m: the current folder would come first
    else:
        env["PYTHONPATH"] = ROOT
    fd, out_file = tempfile.mkstemp(prefix="gs-bench-readers-", suffix=".json")
    os.close(fd)
    os.unlink(out_file)
    env["GRAPHSIGNAL_SIGNALS_FILE"] = out_file
    port = free_port()
    delay = 2.0  # the sidecar comes up and the readers start before the first record
    cmd = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", str(port), writer, str(args.series),
           str(args.rate), str(args.seconds), str(args.threads), str(delay)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, cwd=cwd)
    res = {"config": tree, "readers": readers}
    halt, lat, threads = threading.Event(), [], []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                c.request("GET", "/health")
                c.getresponse().read()
                c.close()
                break
            except OSError:
                time.sleep(0.05)
        for i in range(readers):
            t = threading.Thread(target=_reader, args=(port, i, halt, lat), daemon=True)
            t.start()
            threads.append(t)
        out, err = p.communicate(timeout=args.seconds + 120)
        halt.set()
        for t in threads:
            t.join(35)
        written, wdropped = (int(x) for x in out.split()[-3:-1])
        with open(out_file) as f:
            pdropped, said = _payload_dropped(json.load(f))
        ok = [x[2] for x in lat if x[1] == 200]
        res.update(written=written, dropped=wdropped, payload_dropped=pdropped,
                   dropped_per_million=round(1e6 * wdropped / max(written, 1), 1), loss_said_in_errors=said,
                   loss_lines_on_stderr=sum(1 for ln in err.splitlines() if "dropped" in ln and "record" in ln),
                   reads=len(ok), read_failures=len(lat) - len(ok),
                   read_p50_ms=round(1e3 * statistics.median(ok), 1) if ok else None)
        return res
    finally:
        halt.set()
        if p.poll() is None:
            p.terminate()
            p.wait(30)
        try:
            os.unlink(out_file)
        except OSError:
            pass
        if cwd:
            os.rmdir(cwd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=".", help="checkouts to compare, comma-separated ('.': this tree)")
    ap.add_argument("--readers", default="0,10,50", help="concurrent readers per run, comma-separated")
    ap.add_argument("--series", type=int, default=20000, help="distinct counter series the workload adds to")
    ap.add_argument("--rate", type=int, default=2_000_000, help="records per second (bench_ring's steady rate)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds the workload records")
    ap.add_argument("--threads", type=int, default=1, help="workload threads sharing the rate")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    writer = compile_c("counter_writer.c")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    counts = [int(r) for r in args.readers.split(",") if r.strip()]
    got = {}
    for rep in range(args.reps):
        for readers in counts:
            for c in configs:  # interleaved: a slow minute of the shared host hits every config alike
                r = one_run(c, writer, readers, args)
                emit(bench="readers_run", rep=rep, series=args.series, rate_per_s=args.rate, **r)
                got.setdefault((c, readers), []).append(r)
    for (c, readers), runs in got.items():
        emit(bench="readers", config=c, readers=readers, series=args.series, rate_per_s=args.rate,
             seconds=args.seconds, threads=args.threads, reps=len(runs),
             dropped_per_million_median=statistics.median(r["dropped_per_million"] for r in runs),
             dropped_per_million_all=[r["dropped_per_million"] for r in runs],
             written_median=statistics.median(r["written"] for r in runs),
             reads_median=statistics.median(r["reads"] for r in runs),
             read_p50_ms_median=statistics.median([r["read_p50_ms"] for r in runs if r["read_p50_ms"] is not None]
                                                  or [0]),
             loss_said_in_errors=[r["loss_said_in_errors"] for r in runs])


if __name__ == "__main__":
    main()
