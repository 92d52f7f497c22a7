#!/usr/bin/env python3
"""graphsignal-server against hostile clients (JSON lines; also
`bench_fleet.py --only hostile`): one line per case, against a real
graphsignal-server process; --server-root DIR runs the server from another
tree, e.g. `git archive` of an older commit, so the same command gives the
before and after figures:

  short_body    a POST that declares 1000 bytes and sends 10: seconds until
                the server answers or closes (null: still held after 30 s)
  framing       the status each malformed framing gets (duplicate or listed
                Content-Length, Content-Length with chunked, chunked alone)
  idle_flood    1,500 idle sockets against a server under a 1,024-file limit:
                its threads and open files, and whether a real GET and a
                real upload still answer (and how fast)
  fairness      tenant A floods with 50,000-series uploads from 4 connections
                while tenant B uploads a 269-series body every 0.25 s: B's
                latency (p50, p95, max, how many took over 1 s and over the
                uploader's 3 s timeout), A's accepted and refused uploads
  big_ints      payload_ns/seq/start_ns/updated_ns/dropped_errors of 2^63,
                2^64-1 and 2^64: the status, and whether GET /api/v1/signals
                gives the same integers back
  deep          a context value nested 1,000, 33 and 32 deep: the status
  key_cmdline   whether the key is in /proc/PID/cmdline, with --api-key and
                with --api-key-file
"""
import argparse
import gzip
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import orjson
from benchutil import emit, free_port, percentile

NS = 1_000_000_000
KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"
T0 = 1_800_000_000 * NS


class Server:
    """A graphsignal-server process (from --server-root's tree when given)
    with tenant A's and B's keys from the environment."""

    def __init__(self, args, tmp, name, nofile=None, cpu=None, argv=(), env_keys=True):
        self.port = free_port()
        env = dict(os.environ)
        if args.server_root:
            env["PYTHONPATH"] = os.pathsep.join([args.server_root, env.get("PYTHONPATH", "")])
        if env_keys:
            env["GRAPHSIGNAL_SERVER_API_KEYS"] = "%s,%s" % (KEY_A, KEY_B)

        def pre():
            if nofile:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if cpu is not None:
                os.sched_setaffinity(0, {cpu})

        self.stderr_path = os.path.join(tmp, name + ".stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "graphsignal.cli.server", "--port", str(self.port),
                                          "--db", os.path.join(tmp, name + ".db")] + list(argv),
                                         env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=pre, cwd=tmp)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit("graphsignal-server did not come up")

    def threads(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int([line for line in f if line.startswith("Threads:")][0].split()[1])

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def request(port, method, path, body=None, key=None, timeout=10.0, gz=True):
    """(status, parsed JSON or None) over a fresh connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"X-API-Key": key} if key else {}
        if body is not None:
            headers.update({"Content-Type": "application/json"})
            if gz:
                headers["Content-Encoding"] = "gzip"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, orjson.loads(data)
        except orjson.JSONDecodeError:
            return r.status, None
    finally:
        c.close()


def raw_exchange(port, data, timeout=5.0):
    """Sends raw bytes; (status or None, seconds until the answer or the
    close, None when neither came within timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    try:
        s.sendall(data)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return _status_of(got), None
            except ConnectionError:
                return _status_of(got), round(time.monotonic() - t0, 3)
            if not chunk:
                return _status_of(got), round(time.monotonic() - t0, 3)
            got += chunk
            if b"\r\n\r\n" in got:
                return _status_of(got), round(time.monotonic() - t0, 3)
    finally:
        s.close()


def _status_of(data):
    try:
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else None
    except (IndexError, ValueError):
        return None


def synthetic_body(n, iid, payload_ns, seq=1):
    """An upload of n series (gauges, counters, histograms, 5-frame
    profiles in turn), as JSON bytes."""
    ms = []
    for i in range(n):
        tags = {"i": str(i)}
        k = i % 4
        if k == 0:
            m = {"name": "g_%d" % (i % 100), "type": "gauge", "tags": tags, "stats": {"value": i * 1.5}}
        elif k == 1:
            m = {"name": "c_%d" % (i % 100), "type": "counter", "tags": tags, "stats": {"total": i}}
        elif k == 2:
            m = {"name": "h_%d" % (i % 100), "type": "histogram", "tags": tags,
                 "stats": {"count": 3, "sum": 6.0, "min": 1, "max": 3, "mean": 2, "p50": 2, "p95": 3, "p99": 3,
                           "bins": [1, 2, 3], "counts": [1, 1, 1]}}
        else:
            m = {"name": "p_%d" % (i % 100), "type": "profile", "tags": tags,
                 "stats": {"frames": [{"name": "k%d" % j, "value": 10, "samples": 1} for j in range(5)]}}
        m["updated_ns"] = payload_ns
        ms.append(m)
    return orjson.dumps({"schema": 1, "instance_id": iid, "context": {"instance.id": iid}, "payload_ns": payload_ns,
                         "seq": seq, "metrics": ms, "errors": []})


def small_body(iid="small", payload_ns=T0):
    return gzip.compress(synthetic_body(3, iid, payload_ns))


def head(method, path, headers, body=b""):
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"] + ["%s: %s" % kv for kv in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def hostile_short_body(args, tmp):
    srv = Server(args, tmp, "short")
    try:
        data = head("POST", "/api/v1/ingest", [("X-API-Key", KEY_A), ("Content-Encoding", "gzip"),
                                              ("Content-Length", "1000")], b"x" * 10)
        threads0 = srv.threads()
        status, seconds = raw_exchange(srv.port, data, timeout=30)
        emit(bench="fleet_hostile", case="short_body", declared=1000, sent=10, status=status,
             closed_after_s=seconds, waited_s=30, server_threads_before=threads0,
             server_threads_after=srv.threads())
    finally:
        srv.stop()


def hostile_framing(args, tmp):
    srv = Server(args, tmp, "framing")
    body = small_body()
    base = [("X-API-Key", KEY_A), ("Content-Encoding", "gzip")]
    cases = {
        "duplicate_content_length_differing": base + [("Content-Length", str(len(body))), ("Content-Length", "3")],
        "duplicate_content_length_equal": base + [("Content-Length", str(len(body)))] * 2,
        "content_length_list": base + [("Content-Length", "%d, %d" % (len(body), len(body)))],
        "content_length_and_chunked": base + [("Content-Length", str(len(body))),
                                              ("Transfer-Encoding", "chunked")],
        "chunked_alone": base + [("Transfer-Encoding", "chunked")],
        "content_length_plus_sign": base + [("Content-Length", "+%d" % len(body))],
    }
    try:
        for name, hdrs in cases.items():
            payload = body
            if "chunked" in name:
                payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            status, seconds = raw_exchange(srv.port, head("POST", "/api/v1/ingest", hdrs, payload), timeout=10)
            emit(bench="fleet_hostile", case="framing", what=name, status=status, answered_after_s=seconds)
    finally:
        srv.stop()


def hostile_idle_flood(args, tmp, n=1500, nofile=1024):
    srv = Server(args, tmp, "idle", nofile=nofile)
    socks, failed = [], [0]
    lock = threading.Lock()

    deadline = time.monotonic() + 30

    def opener(k):
        for _ in range(k):
            left = deadline - time.monotonic()
            if left <= 0:
                with lock:
                    failed[0] += 1
                continue
            try:
                sk = socket.create_connection(("127.0.0.1", srv.port), timeout=left)
            except OSError:
                with lock:
                    failed[0] += 1
                continue
            with lock:
                socks.append(sk)

    try:
        openers = [threading.Thread(target=opener, args=(n // 50,)) for _ in range(50)]
        for t in openers:
            t.start()
        for t in openers:
            t.join()
        time.sleep(2)
        threads, fds = srv.threads(), srv.fds()
        out = {}
        for what, method, path, body, key in (("health", "GET", "/health", None, None),
                                              ("ingest", "POST", "/api/v1/ingest", small_body(), KEY_A)):
            t0 = time.monotonic()
            try:
                status = request(srv.port, method, path, body, key, timeout=10)[0]
            except (OSError, http.client.HTTPException) as e:
                status = type(e).__name__
            out[what] = (status, round(time.monotonic() - t0, 3))
        closed = 0
        for sk in socks:
            sk.setblocking(False)
            try:
                closed += sk.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        emit(bench="fleet_hostile", case="idle_flood", idle_sockets=n, connected=len(socks), connect_failed=failed[0],
             nofile=nofile, server_threads=threads,
             server_fds=fds, health_status=out["health"][0], health_s=out["health"][1],
             ingest_status=out["ingest"][0], ingest_s=out["ingest"][1], idle_closed_by_server=closed)
    finally:
        for sk in socks:
            sk.close()
        srv.stop()


def hostile_fairness(args, tmp, seconds=20.0, flooders=4, series=50_000):
    srv = Server(args, tmp, "fair", cpu=0)
    os.sched_setaffinity(0, {1} if os.cpu_count() > 1 else {0})
    big = [gzip.compress(synthetic_body(series, "flood-%d" % i, T0), 3) for i in range(flooders)]
    small = gzip.compress(synthetic_body(269, "small", T0), 3)
    stop = threading.Event()
    flood = {"accepted": 0, "refused": 0, "failed": 0}
    lock = threading.Lock()

    def flooder(body):
        while not stop.is_set():
            try:
                status = request(srv.port, "POST", "/api/v1/ingest", body, KEY_A, timeout=60)[0]
                k = "accepted" if status == 200 else "refused"
            except (OSError, http.client.HTTPException):
                k = "failed"
            with lock:
                flood[k] += 1

    try:
        threads = [threading.Thread(target=flooder, args=(b,), daemon=True) for b in big]
        for t in threads:
            t.start()
        time.sleep(2)  # the flood is on
        lat, statuses = [], []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                statuses.append(request(srv.port, "POST", "/api/v1/ingest", small, KEY_B, timeout=30)[0])
            except (OSError, http.client.HTTPException) as e:
                statuses.append(type(e).__name__)
            lat.append(time.monotonic() - t0)
            time.sleep(max(0.0, 0.25 - (time.monotonic() - t0)))
        stop.set()
        for t in threads:
            t.join(70)
        emit(bench="fleet_hostile", case="fairness", flood_connections=flooders, flood_series=series,
             flood_body_bytes=len(big[0]), small_series=269, small_uploads=len(lat),
             small_ok=sum(1 for s in statuses if s == 200),
             small_p50_s=round(percentile(lat, 50), 3), small_p95_s=round(percentile(lat, 95), 3),
             small_max_s=round(max(lat), 3), small_over_1s=sum(1 for x in lat if x > 1),
             small_over_3s=sum(1 for x in lat if x > 3), flood_accepted=flood["accepted"],
             flood_refused=flood["refused"], flood_failed=flood["failed"], seconds=seconds)
    finally:
        stop.set()
        srv.stop()
        os.sched_setaffinity(0, set(range(os.cpu_count())))


def hostile_big_ints(args, tmp):
    srv = Server(args, tmp, "ints")
    try:
        for label, value in (("2^63", 2 ** 63), ("2^64-1", 2 ** 64 - 1), ("2^64", 2 ** 64)):
            for field in ("payload_ns", "seq", "start_ns", "updated_ns", "dropped_errors"):
                iid = "ints-%s-%d" % (field, value.bit_length())
                doc = {"schema": 1, "instance_id": iid, "context": {"instance.id": iid}, "payload_ns": T0,
                       "seq": 1, "start_ns": T0, "dropped_errors": 0, "errors": [],
                       "metrics": [{"name": "g", "type": "gauge", "tags": {}, "stats": {"value": 1},
                                    "updated_ns": T0}]}
                mark = 123456789123  # written as the value itself (orjson writes at most 2^64-1)
                if field == "updated_ns":
                    doc["metrics"][0]["updated_ns"] = mark
                else:
                    doc[field] = mark
                raw = orjson.dumps(doc).replace(b"%d" % mark, b"%d" % value)
                status = request(srv.port, "POST", "/api/v1/ingest", gzip.compress(raw), KEY_A)[0]
                back = None
                if status == 200:
                    code, snap = request(srv.port, "GET", "/api/v1/signals?instance_id=" + iid, key=KEY_A)
                    if code == 200:
                        got = {"payload_ns": snap.get("payload_ns"), "start_ns": snap.get("start_ns"),
                               "updated_ns": snap["metrics"][0].get("updated_ns"),
                               "seq": snap["instance"].get("seq"),
                               "dropped_errors": snap["instance"].get("dropped_errors")}
                        back = got[field] == value
                emit(bench="fleet_hostile", case="big_ints", field=field, value=label, status=status,
                     round_trip=back)
    finally:
        srv.stop()


def hostile_deep(args, tmp):
    """Documents whose containers nest `depth` levels (the body object is
    level 1, context level 2, then lists in a context value)."""
    srv = Server(args, tmp, "deep")
    try:
        for depth in (1000, 33, 32):
            lists = depth - 2
            raw = b'{"schema":1,"instance_id":"deep","context":{"instance.id":"deep","x":%s"leaf"%s},' \
                  b'"payload_ns":%d,"metrics":[],"errors":[]}' % (b"[" * lists, b"]" * lists, T0)
            status, doc = request(srv.port, "POST", "/api/v1/ingest", gzip.compress(raw), KEY_A)
            emit(bench="fleet_hostile", case="deep", document_depth=depth, status=status,
                 error=(doc or {}).get("error", "")[:80] or None)
    finally:
        srv.stop()


def hostile_key_cmdline(args, tmp):
    secret = "cmdline-secret-%d" % os.getpid()
    for how in ("--api-key", "--api-key-file"):
        argv = ["--api-key", secret]
        if how == "--api-key-file":
            path = os.path.join(tmp, "keys")
            with open(path, "w") as f:
                f.write(secret + "\n")
            os.chmod(path, 0o600)
            argv = ["--api-key-file", path]
        try:
            srv = Server(args, tmp, "cmdline", argv=argv, env_keys=False)
        except SystemExit:
            emit(bench="fleet_hostile", case="key_cmdline", how=how, started=False)
            continue
        try:
            with open("/proc/%d/cmdline" % srv.proc.pid, "rb") as f:
                visible = secret.encode() in f.read()
            mode = oct(os.stat("/proc/%d/cmdline" % srv.proc.pid).st_mode & 0o777)
            works = request(srv.port, "GET", "/api/v1/instances", key=secret)[0] == 200
            srv.stop()
            with open(srv.stderr_path, "rb") as f:
                warned = b"visible" in f.read()
            emit(bench="fleet_hostile", case="key_cmdline", how=how, started=True, key_works=works,
                 key_in_cmdline=visible, cmdline_mode=mode, warned=warned)
        finally:
            srv.stop()


HOSTILE_CASES = {"short_body": hostile_short_body, "framing": hostile_framing, "idle_flood": hostile_idle_flood,
                 "fairness": hostile_fairness, "big_ints": hostile_big_ints, "deep": hostile_deep,
                 "key_cmdline": hostile_key_cmdline}


def run(args, tmp):
    for case in args.cases.split(","):
        HOSTILE_CASES[case](args, tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(HOSTILE_CASES), help="cases to run (comma-separated)")
    ap.add_argument("--server-root", default=None, help="run graphsignal-server from this tree")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gs-bench-fleet-") as tmp:
        run(args, tmp)


if __name__ == "__main__":
    main()
