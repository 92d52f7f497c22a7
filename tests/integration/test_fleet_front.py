"""graphsignal-server's connections (graphsignal.fleet.serving) over real
sockets: malformed framing, bodies that never arrive, idle connections,
floods of them under a low file limit, excess connections, and one tenant
flooding while another uploads. Most run the server in this process on a
real socket with short timeouts (Front); the file-limit and SIGTERM cases
run a graphsignal-server process."""
import gzip
import http.client
import socket
import threading
import time

import orjson
import pytest

from support.fleet import ServerProc, raw_exchange, raw_head, read_all, request, series_doc, upload_doc
from support.gsrun import wait_for

from graphsignal.fleet.app import make_app, tenant_of
from graphsignal.fleet.db import DB
from graphsignal.fleet.serving import FleetServer, Limits

KEYS = ("key-a", "key-b")


class Front:
    """The app of a fresh database served by a FleetServer on 127.0.0.1,
    in a thread of this process. wrap(app) -> app puts something around
    the app (a recorder, a delay)."""

    def __init__(self, tmp_path, wrap=None, **limits):
        self.db = DB(str(tmp_path / ("front-%d.db" % id(self))))
        app = make_app(self.db, KEYS)
        self.app = wrap(app) if wrap else app
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self.srv = FleetServer(sock, self.app, tenant_of(KEYS), Limits(**limits))
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def post(self, doc, key="key-a", timeout=10.0):
        body = gzip.compress(orjson.dumps(doc))
        return request(self.port, "POST", "/api/v1/ingest", body=body, key=key, timeout=timeout,
                       headers={"Content-Encoding": "gzip"})

    def instances(self, key="key-a"):
        return request(self.port, "GET", "/api/v1/instances", key=key)[1]["instances"]

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.thread.join(5)
        self.db.close()


@pytest.fixture
def front(tmp_path):
    fronts = []

    def make(**kw):
        f = Front(tmp_path, **kw)
        fronts.append(f)
        return f

    yield make
    for f in fronts:
        f.close()


def _body(iid="inst"):
    return gzip.compress(orjson.dumps(upload_doc(iid)))


def _ingest_head(headers, body):
    return raw_head("POST", "/api/v1/ingest", [("X-API-Key", "key-a"), ("Content-Encoding", "gzip")] + headers, body)


# -- framing ------------------------------------------------------------------------------------------------------
def _framing_cases():
    body = _body()
    n = str(len(body))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return [
        ("duplicate Content-Length", [("Content-Length", n), ("Content-Length", n)], body, 400),
        ("conflicting Content-Length", [("Content-Length", n), ("Content-Length", "3")], body, 400),
        ("Content-Length list", [("Content-Length", "%s, %s" % (n, n))], body, 400),
        ("Content-Length and chunked", [("Content-Length", n), ("Transfer-Encoding", "chunked")], chunked, 400),
        ("chunked alone", [("Transfer-Encoding", "chunked")], chunked, 411),
        ("signed Content-Length", [("Content-Length", "+" + n)], body, 400),
    ]


@pytest.mark.parametrize("case", range(6), ids=[c[0] for c in _framing_cases()])
def test_malformed_framing_is_refused_before_the_app_and_nothing_is_stored(front, case):
    what, headers, body, status = _framing_cases()[case]
    f = front()
    got, data, closed = raw_exchange(f.port, _ingest_head(headers, body))
    assert got == status, (what, data)
    assert "error" in orjson.loads(data) and closed is not None
    assert f.instances() == []
    # the same bytes, framed properly, are taken
    assert raw_exchange(f.port, _ingest_head([("Content-Length", str(len(_body())))], _body()))[0] == 200
    assert len(f.instances()) == 1


def test_a_head_over_64_kib_is_431_and_a_body_over_the_cap_is_413_unread(front):
    f = front()
    status, _, _ = raw_exchange(f.port, _ingest_head([("X-Pad", "p" * 70_000)], b""))
    assert status == 431
    # 9 MiB declared: answered at once, before any of it is sent
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    try:
        s.sendall(_ingest_head([("Content-Length", str(9 << 20))], b""))
        reply = read_all(s)
        assert reply.startswith(b"HTTP/1.1 413 ") and b"cap" in reply
    finally:
        s.close()
    assert f.instances() == []


@pytest.fixture
def server_proc(tmp_path):
    srv = ServerProc(tmp_path / "fleet.db").start()
    yield srv
    srv.cleanup()


def _post_whole(port, body, timeout=30.0):
    """POSTs body as an HTTP client does (all of it, then the answer):
    (status, JSON) or the exception's name when the send or read failed."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/api/v1/ingest", body=body, headers={"X-API-Key": "key-a", "Content-Encoding": "gzip"})
        r = c.getresponse()
        return r.status, orjson.loads(r.read())
    except OSError as e:
        return type(e).__name__, None
    finally:
        c.close()


def test_a_body_over_the_cap_sent_whole_gets_its_413_not_a_broken_pipe(server_proc):
    # the client sends every byte before it reads: the server must read what
    # it sends (and drop it) after answering, or the close resets the connection
    got = [_post_whole(server_proc.port, b"x" * size) for size in (9 << 20, 16 << 20, 48 << 20) for _ in range(8)]
    assert [s for s, _ in got] == [413] * len(got), got
    assert all("cap" in doc["error"] for _, doc in got)
    # the server goes on: a good upload right after is taken
    assert _post_whole(server_proc.port, _body())[0] == 200


def test_every_json_answer_says_nosniff(server_proc):
    port = server_proc.port
    cases = [("GET", "/health", None, "key-a", 200), ("GET", "/api/v1/version", None, None, 200),
             ("POST", "/api/v1/ingest", _body(), "key-a", 200), ("GET", "/api/v1/instances", None, "key-a", 200),
             ("GET", "/api/v1/signals?instance_id=inst", None, "key-a", 200),
             ("GET", "/api/v1/history?instance_id=inst", None, "key-a", 200),
             ("GET", "/api/v1/instances", None, None, 401), ("GET", "/api/v1/instances", None, "nope", 401),
             ("GET", "/api/v1/signals?instance_id=other", None, "key-a", 404), ("GET", "/nowhere", None, None, 404),
             ("GET", "/static/nowhere.js", None, None, 404), ("DELETE", "/api/v1/instances", None, "key-a", 405),
             ("GET", "/api/v1/instances?x=1", None, "key-a", 400),
             ("POST", "/api/v1/ingest", b"not gzip", "key-a", 400)]
    for method, path, body, key, status in cases:
        got, doc, headers = request(port, method, path, body=body, key=key,
                                    headers={"Content-Encoding": "gzip"} if body else None)
        assert (got, headers["Content-Type"], headers["X-Content-Type-Options"]) == (
            status, "application/json", "nosniff"), (method, path, doc)
    # and the front's own answers (raw, before the app)
    for head, status in ((_ingest_head([("Content-Length", str(9 << 20))], b""), 413),
                         (_ingest_head([("Transfer-Encoding", "chunked")], b"0\r\n\r\n"), 411)):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            s.sendall(head)
            reply = read_all(s)
        finally:
            s.close()
        lines = reply.partition(b"\r\n\r\n")[0].split(b"\r\n")
        assert lines[0].startswith(b"HTTP/1.1 %d " % status)
        assert b"X-Content-Type-Options: nosniff" in lines and b"Content-Type: application/json" in lines


def test_expect_100_continue_gets_its_100_before_the_body(front):
    f = front()
    body = _body()
    s = socket.create_connection(("127.0.0.1", f.port), timeout=10)
    try:
        s.sendall(_ingest_head([("Content-Length", str(len(body))), ("Expect", "100-continue")], b""))
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        reply = read_all(s)
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.count(b"100 Continue") == 0
    assert len(f.instances()) == 1


def test_unknown_keys_bodies_are_read_and_dropped_and_answered_401(front):
    f = front()
    body = gzip.compress(orjson.dumps(series_doc(2000, "x")))
    status, data, _ = raw_exchange(f.port, raw_head("POST", "/api/v1/ingest", [
        ("X-API-Key", "nope"), ("Content-Encoding", "gzip"), ("Content-Length", str(len(body)))], body))
    assert status == 401 and b"key" in data
    assert f.srv.buffered == 0 and not f.srv.tenant_bytes


# -- timeouts -----------------------------------------------------------------------------------------------------
def test_a_body_shorter_than_its_content_length_is_answered_408_and_closed_holding_no_worker(front):
    f = front(workers=1, read_timeout=0.5, request_timeout=30.0)
    s = socket.create_connection(("127.0.0.1", f.port), timeout=30)
    try:
        t0 = time.monotonic()
        s.sendall(_ingest_head([("Content-Length", "1000")], b"x" * 10))
        # meanwhile the only worker answers others: the short body holds none
        for i in range(3):
            assert f.post(upload_doc("other-%d" % i), timeout=5)[0] == 200
        reply = read_all(s)
        waited = time.monotonic() - t0
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 408 ") and b"10 of 1000 bytes" in reply
    assert waited >= 0.5  # not before the read timeout
    assert f.srv.stats["timed_out"] == 1
    assert wait_for(lambda: f.srv.open == 0, 10)


def test_a_trickling_body_is_cut_at_the_request_timeout(front):
    """A byte every 0.1 s never pauses for read_timeout; the request budget
    (1 s) cuts it long before its 1000 bytes are in."""
    f = front(read_timeout=5.0, request_timeout=1.0)
    s = socket.create_connection(("127.0.0.1", f.port), timeout=60)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                s.send(b"x")
            except OSError:
                return
            stop.wait(0.1)

    t0 = time.monotonic()
    s.sendall(_ingest_head([("Content-Length", "1000")], b""))
    t = threading.Thread(target=trickle)
    t.start()
    try:
        reply = read_all(s)
        waited = time.monotonic() - t0
    finally:
        stop.set()
        t.join(5)
        s.close()
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    got = int(reply.split(b'did not arrive: ')[1].split(b" ")[0])
    assert got < 1000 and waited >= 1.0


def test_idle_connections_are_closed_after_the_head_timeout(front):
    f = front(head_timeout=0.5)
    t0 = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", f.port), timeout=30) for _ in range(5)]
    partial = socket.create_connection(("127.0.0.1", f.port), timeout=30)
    partial.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
    try:
        for s in socks:
            assert s.recv(10) == b""  # closed, nothing said
        assert partial.recv(100).startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - t0 >= 0.5
        assert wait_for(lambda: f.srv.open == 0, 10)
    finally:
        for s in socks + [partial]:
            s.close()


# -- connection floods --------------------------------------------------------------------------------------------
def test_when_full_the_oldest_idle_connection_makes_way_for_a_new_one(front):
    f = front(max_connections=16, head_timeout=60.0)
    idle = [socket.create_connection(("127.0.0.1", f.port), timeout=30) for _ in range(40)]
    try:
        assert wait_for(lambda: f.srv.stats["accepted"] >= 40, 10)
        assert f.srv.open <= 16
        # the oldest were closed to make room, the newest are still open
        for s in idle[:24]:
            assert s.recv(10) == b""
        for s in idle[-16:]:
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(10)
        assert f.post(upload_doc("real"))[0] == 200
        assert request(f.port, "GET", "/health")[0] == 200
    finally:
        for s in idle:
            s.close()


def test_when_every_connection_holds_a_request_a_new_one_is_refused_at_once(front):
    f = front(max_connections=16, read_timeout=60.0, request_timeout=60.0)
    held = []
    try:
        for i in range(16):  # 16 uploads with a key, each waiting for the rest of its body
            s = socket.create_connection(("127.0.0.1", f.port), timeout=30)
            s.sendall(raw_head("POST", "/api/v1/ingest", [("X-API-Key", KEYS[i % 2]), ("Content-Length", "100")],
                               b"x"))
            held.append(s)
        assert wait_for(lambda: sum(f.srv.tenant_admitted.values()) == 16, 10)
        status, data, closed = raw_exchange(f.port, raw_head("GET", "/health", []), timeout=10)
        assert closed is not None  # answered and closed, not left waiting
        assert status in (503, None)  # the 503 may be lost to the reset of the unread request
        assert f.srv.stats["refused"] >= 1
    finally:
        for s in held:
            s.close()
    assert wait_for(lambda: request(f.port, "GET", "/health")[0] == 200, 10)


def test_1500_idle_sockets_under_a_256_file_limit_take_no_threads_and_real_requests_answer(tmp_path):
    srv = ServerProc(tmp_path / "idle.db", keys=(), env_keys="key-a", nofile=256).start()
    socks = []
    try:
        threads0 = srv.threads()
        for _ in range(300):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=30))
        for _ in range(1200):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", srv.port))
            socks.append(s)
        time.sleep(1)
        assert srv.threads() == threads0  # a fixed pool: no thread per connection
        # real requests answer (each within its 10 s socket timeout; before, they never did)
        status, doc = srv.post(upload_doc("real"))
        assert status == 200, doc
        assert srv.get("/api/v1/signals?instance_id=real")[0] == 200
        assert request(srv.port, "GET", "/health")[0] == 200
        assert srv.threads() == threads0
        assert srv.fds() <= 192 + 20  # the connections, the database, the listener: not the file limit
        closed = 0
        for s in socks[:300]:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        assert closed >= 300 - 192  # the oldest idle ones made way
        assert "at most 192 connections" in srv.stderr()
    finally:
        for s in socks:
            s.close()
        srv.stop()
    assert srv.proc.returncode == 0
    srv.cleanup()


def test_sigterm_stops_the_server_promptly_with_connections_open(tmp_path):
    srv = ServerProc(tmp_path / "t.db", keys=(), env_keys="key-a").start()
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(20)]
    half = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    half.sendall(_ingest_head([("Content-Length", "1000")], b"x"))
    try:
        t0 = time.monotonic()
        srv.proc.terminate()
        assert srv.proc.wait(15) == 0
        assert time.monotonic() - t0 < 15
    finally:
        for s in socks + [half]:
            s.close()
        srv.cleanup()


# -- tenants ------------------------------------------------------------------------------------------------------
class Recorder:
    """Wraps the app: records (key, start, end) of each ingest; tenant A's
    ingests wait for `gate` (a stand-in for big uploads that take long)."""

    def __init__(self, gate, slow_key="key-a"):
        self.gate, self.slow_key = gate, slow_key
        self.log = []
        self.lock = threading.Lock()

    def __call__(self, app):
        def wrapped(environ, start_response):
            key = environ.get("HTTP_X_API_KEY")
            t0 = time.monotonic()
            if key == self.slow_key and environ["PATH_INFO"] == "/api/v1/ingest":
                self.gate.wait(60)
            try:
                return app(environ, start_response)
            finally:
                with self.lock:
                    self.log.append((key, t0, time.monotonic()))
        return wrapped


def test_a_tenant_flooding_waits_behind_itself_not_in_front_of_another(front):
    gate = threading.Event()
    rec = Recorder(gate)
    f = front(wrap=rec, workers=2, tenant_inflight=1)
    results = {}

    def flood(i):
        body = gzip.compress(orjson.dumps(upload_doc("flood-%d" % i)))
        results[i] = request(f.port, "POST", "/api/v1/ingest", body=body, key="key-a", timeout=90,
                             headers={"Content-Encoding": "gzip"})[0]

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        # all 8 of A's uploads are in: one running (held at the gate), seven queued behind it
        owner_a = f.srv.tenant_of(_Key("key-a"))
        assert wait_for(lambda: f.srv.tenant_admitted.get(owner_a) == 8 and len(f.srv.scheduler.queues.get(
            owner_a, ())) == 7, 10)
        # B is answered while A's first upload is still running and the seven wait
        status = request(f.port, "POST", "/api/v1/ingest", body=_body("small"), key="key-b", timeout=30,
                         headers={"Content-Encoding": "gzip"})[0]
        assert status == 200
        assert [r[0] for r in rec.log] == ["key-b"]
        assert len(f.srv.scheduler.queues.get(owner_a, ())) == 7
    finally:
        gate.set()
        for t in threads:
            t.join(90)
    assert sorted(results.values()) == [200] * 8
    # A never ran two at once
    a = sorted((r[1], r[2]) for r in rec.log if r[0] == "key-a")
    assert len(a) == 8 and all(a[i][1] <= a[i + 1][0] for i in range(7))


class _Key:
    """A head stand-in for tenant_of: only X-API-Key."""

    def __init__(self, key):
        self.key = key

    def get(self, name):
        return self.key if name.lower() == "x-api-key" else None


def test_a_tenant_past_its_admission_cap_gets_503_and_others_do_not(front):
    f = front(tenant_queue=2, read_timeout=30.0)
    held = []
    try:
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", f.port), timeout=30)
            s.sendall(raw_head("POST", "/api/v1/ingest", [("X-API-Key", "key-a"), ("Content-Length", "100")],
                               b"x"))
            held.append(s)
        assert wait_for(lambda: sum(f.srv.tenant_admitted.values()) == 2, 10)
        status, _, headers = f.post(upload_doc("third"), key="key-a")
        assert status == 503 and headers["Retry-After"] == "1"
        assert f.post(upload_doc("other"), key="key-b")[0] == 200
    finally:
        for s in held:
            s.close()
    assert wait_for(lambda: f.post(upload_doc("third"), key="key-a")[0] == 200, 10)


def test_a_refused_request_without_a_body_is_closed_once_with_bytes_after_its_head(front):
    # nothing more is expected of it, so it is closed at once: what came after its head must not close it again
    f = front(tenant_queue=1, read_timeout=30.0)
    held = socket.create_connection(("127.0.0.1", f.port), timeout=30)
    try:
        held.sendall(raw_head("POST", "/api/v1/ingest", [("X-API-Key", "key-a"), ("Content-Length", "100")], b"x"))
        assert wait_for(lambda: sum(f.srv.tenant_admitted.values()) == 1, 10)
        status, _, _ = raw_exchange(f.port, raw_head("GET", "/api/v1/instances", [("X-API-Key", "key-a")]) + b"extra")
        assert status == 503
        assert wait_for(lambda: f.srv.open == 1, 10), f.srv.open
    finally:
        held.close()
