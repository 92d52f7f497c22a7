"""A real graphsignal-server process for tests, and the raw-socket and
HTTP helpers that talk to it (tests/integration/test_fleet_*.py)."""
import gzip
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time

import orjson

from support.gsrun import free_port, get_json, quiet_env, wait_for

SERVER = [sys.executable, "-m", "graphsignal.cli.server"]
NS = 1_000_000_000
T0 = 1_800_000_000 * NS


class Backend:
    """A fleet database for tests: name "sqlite" (location: a file's path)
    or "postgresql" (location: a URL without the password, which is
    `password`)."""

    def __init__(self, name, location, password=None):
        self.name, self.location, self.password = name, location, password
        self.opened = []

    def open(self, **kw):
        """The storage itself, in this process (DB's or PgDB's keywords)."""
        if self.name == "sqlite":
            from graphsignal.fleet.db import DB

            db = DB(self.location, **kw)
        else:
            from graphsignal.fleet.pg import PgDB

            kw.pop("sync", None)
            db = PgDB(self.location, password=self.password, **kw)
        self.opened.append(db)
        return db

    def close_all(self):
        """Closes what open() made (a closed one again is harmless): a
        test's connections go back to PostgreSQL with the test."""
        for db in self.opened:
            try:
                db.close()
            except Exception:  # sqlite3.ProgrammingError and the like: already closed
                pass

    def env(self):
        """What a graphsignal-server process needs in its environment."""
        return {"PGPASSWORD": self.password} if self.password else {}

    def __repr__(self):
        return "Backend(%s)" % self.name


class ServerProc:
    """graphsignal-server on a free port. keys: given with --api-key (one
    flag each); env_keys: GRAPHSIGNAL_SERVER_API_KEYS; args: more options;
    nofile: RLIMIT_NOFILE (soft and hard) of the server process; command:
    what starts it (default SERVER). Its stderr goes to a file (stderr()).
    db: a SQLite path, or a Backend (then its PostgreSQL password is in
    the server's environment)."""

    def __init__(self, db, keys=("key-a", "key-b"), env_keys=None, port=None, args=(), nofile=None, command=None):
        self.backend = db if isinstance(db, Backend) else Backend("sqlite", str(db))
        self.db, self.keys, self.env_keys = self.backend.location, keys, env_keys
        self.command = list(command or SERVER)
        self.port = port or free_port()
        self.args, self.nofile = list(args), nofile
        self.proc = None
        fd, self.stderr_path = tempfile.mkstemp(prefix="gs-fleet-stderr-")
        os.close(fd)

    def start(self, wait=True):
        env = quiet_env(**self.backend.env())
        env.pop("GRAPHSIGNAL_SERVER_API_KEYS", None)
        if self.env_keys:
            env["GRAPHSIGNAL_SERVER_API_KEYS"] = self.env_keys
        args = self.command + ["--port", str(self.port), "--database", self.db] + self.args
        for k in self.keys:
            args += ["--api-key", k]
        nofile = self.nofile

        def pre():
            if nofile:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=pre)
        if wait:
            assert wait_for(self._up, 30), self.stderr() if self.proc.poll() is not None else "not up"
        return self

    def _up(self):
        if self.proc.poll() is not None:
            return False
        try:
            return get_json("http://127.0.0.1:%d/health" % self.port, 0.5)[0] == 200
        except OSError:
            return False

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    def get(self, path, key="key-a"):
        status, doc, _ = request(self.port, "GET", path, key=key)
        return status, doc

    def post(self, doc, key="key-a", raw=None):
        """POSTs an upload (a dict, or raw JSON bytes), gzip'd; (status, JSON)."""
        body = gzip.compress(raw if raw is not None else orjson.dumps(doc))
        status, out, _ = request(self.port, "POST", "/api/v1/ingest", body=body, key=key,
                                 headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        return status, out

    def threads(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            return int([line for line in f if line.startswith("Threads:")][0].split()[1])

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def cleanup(self):
        self.stop()
        try:
            os.unlink(self.stderr_path)
        except OSError:
            pass


def request(port, method, path, body=None, key=None, headers=None, timeout=10.0):
    """(status, parsed JSON or None, response headers) over a fresh
    connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = dict(headers or {})
        if key:
            h["X-API-Key"] = key
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = None
        return r.status, doc, r.headers
    finally:
        c.close()


def raw_head(method, path, headers, body=b""):
    """A request's bytes: the request line, Host, then headers as given
    (a list of pairs: repeats stay repeats), then body."""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"] + ["%s: %s" % kv for kv in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_all(sock):
    """What a connection says until the server closes it."""
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionError:
            return out
        if not chunk:
            return out
        out += chunk


def raw_exchange(port, data, timeout=10.0):
    """Sends bytes on a new connection and reads until the server closes it
    (or timeout); returns (status or None, body bytes, seconds until the
    close or None when it did not close within timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t0 = time.monotonic()
    got = b""
    closed = None
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionError:
                closed = time.monotonic() - t0
                break
            if not chunk:
                closed = time.monotonic() - t0
                break
            got += chunk
    finally:
        s.close()
    status = None
    if got.startswith(b"HTTP/"):
        try:
            status = int(got.split(b" ", 2)[1])
        except (IndexError, ValueError):
            pass
    return status, got.partition(b"\r\n\r\n")[2], closed


def upload_doc(iid="inst", payload_ns=T0, metrics=None, **extra):
    """A minimal valid upload."""
    doc = {"schema": 1, "instance_id": iid, "context": {"instance.id": iid}, "payload_ns": payload_ns, "seq": 1,
           "metrics": metrics if metrics is not None else [
               {"name": "g", "type": "gauge", "tags": {}, "stats": {"value": 1}, "updated_ns": payload_ns}],
           "errors": []}
    doc.update(extra)
    return doc


def series_doc(n, iid, payload_ns=T0):
    """An upload of n series (gauges, counters, histograms, 5-frame
    profiles in turn)."""
    ms = []
    for i in range(n):
        tags = {"i": str(i)}
        k = i % 4
        if k == 0:
            m = {"name": "g", "type": "gauge", "tags": tags, "stats": {"value": i * 1.5}}
        elif k == 1:
            m = {"name": "c", "type": "counter", "tags": tags, "stats": {"total": i}}
        elif k == 2:
            m = {"name": "h", "type": "histogram", "tags": tags,
                 "stats": {"count": 3, "sum": 6.0, "min": 1, "max": 3, "mean": 2, "p50": 2, "p95": 3, "p99": 3,
                           "bins": [1, 2, 3], "counts": [1, 1, 1]}}
        else:
            m = {"name": "p", "type": "profile", "tags": tags,
                 "stats": {"frames": [{"name": "k%d" % j, "value": 10, "samples": 1} for j in range(5)]}}
        m["updated_ns"] = payload_ns
        ms.append(m)
    return upload_doc(iid, payload_ns, ms)


class _AppHTTP:
    """What the sidecar's Uploader needs of a requests session, over a
    werkzeug test Client of the fleet app (in-process uploads)."""

    def __init__(self, app):
        from werkzeug.test import Client

        self.client = Client(app)

    def post(self, url, data, headers, **kw):
        import io

        r = self.client.post("/api/v1/ingest", data=data, headers=headers)

        class Raw:
            def __init__(self, body):
                self.f = io.BytesIO(body)

            def read(self, n, decode_content=True):
                return self.f.read(n)

        class Resp:
            status_code = r.status_code
            raw = Raw(r.data)
            headers = dict(r.headers)

            def close(self):
                pass

        return Resp()


def replay_payload(db_path, payload, minutes, key="key-a", end_ns=None):
    """Uploads a recorded /signals payload into a graphsignal-server
    database as `minutes` minutes of one upload a minute ending at end_ns
    (default: now), through the sidecar's real store and Uploader: counters
    and profiles grow at the recorded run's average rate (as if its load
    went on for that long), gauges hold their recorded readings (the GPU's utilization gauge is its busy-time
    counter's average, the recorded gauge being the idle tail after the
    load), resources and context as recorded. Returns the instance id."""
    import numpy as np  # noqa: F401  (the store needs it)

    from graphsignal.fleet.app import make_app
    from graphsignal.fleet.db import DB
    from graphsignal.sidecar.store import MetricStore
    from graphsignal.sidecar.upload import Uploader

    end_ns = end_ns or time.time_ns()
    clock = [end_ns - minutes * 60 * NS]
    db = DB(str(db_path), clock=lambda: clock[0])
    store = MetricStore(clock=lambda: clock[0])
    store.set_context(**payload["context"])
    span = max(1, (payload["payload_ns"] - payload["start_ns"])) / NS
    busy = {m["tags"].get("device.uuid"): m["stats"]["total"] / span / 1e7 for m in payload["metrics"]
            if m["name"] == "gpu_busy_time_nanoseconds"}
    up = Uploader(store, key, "http://fleet", clock=lambda: 0.0, http=_AppHTTP(make_app(db, [key])))
    try:
        for step in range(1, minutes + 1):
            clock[0] += 60 * NS
            with store.batch():
                for m in payload["metrics"]:
                    name, tags, st = m["name"], m["tags"], m["stats"]
                    if m["type"] == "gauge":
                        value = st["value"]
                        if name == "gpu_utilization_percent" and tags.get("device.uuid") in busy:
                            value = round(busy[tags["device.uuid"]], 1)
                        store.set_gauge(name, tags, value)
                    elif m["type"] == "counter" and st["total"] is not None:
                        store.set_counter(name, tags, int(st["total"] * step * 60 / span))
                    elif m["type"] == "profile":
                        store.add_profile(name, tags, [(f["name"], int(f["value"] * 60 / span),
                                                        int(f["samples"] * 60 / span)) for f in st["frames"]])
                        store.ensure_profile(name, tags)
                for r in payload["resources"]:
                    store.set_resource(r["kind"], r["tags"], r["attributes"])
            assert up.step()
    finally:
        db.close()
    return payload["context"]["instance.id"]


def zlib_bomb(mib):
    """zlib data that expands to `mib` MiB of spaces, made in well under a
    second: one MiB deflated after a full flush (which resets the
    compressor, so every MiB deflates to the same bytes) repeated, then the
    end block and the checksum of the whole."""
    import struct
    import zlib

    block = b" " * (1 << 20)
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = z.compress(block) + z.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(mib):
        adler = zlib.adler32(block, adler)
    return b"\x78\xda" + chunk * mib + z.flush() + struct.pack(">I", adler)
