"""graphsignal-server on PostgreSQL: the same bytes as the SQLite file for
the same requests, several replicas on one database (an upload through
one is read through another at once; the schema made once however many
start together; one retention pass at a time; a kill -9 of one replica
loses nothing acknowledged while the other goes on answering), a lost
connection costing one request, and the password never on the command
line. A real PostgreSQL (tests/support/pg.py), no stand-in."""
import gzip
import http.client
import os
import signal
import socket
import subprocess
import threading
import time

import orjson
import pytest
from werkzeug.test import Client

from support.fleet import SERVER, Backend, ServerProc, upload_doc
from support.gsrun import quiet_env

from graphsignal import windowmath
from graphsignal.fleet import pg as fpg
from graphsignal.fleet.app import make_app
from graphsignal.fleet.rows import whole_state
from graphsignal.fleet.storage import owner_of

NS = 1_000_000_000
T0 = 1_800_000_000 * NS


@pytest.fixture
def pg_backend(pg_server):
    from support import pg

    b = Backend("postgresql", pg_server.new_database(), pg.PASSWORD)
    yield b
    b.close_all()


def _store(clock, iid):
    import numpy as np

    from graphsignal.sidecar.store import MetricStore

    s = MetricStore(clock=clock)
    s.context.update({"instance.id": iid, "host.name": "gpu-box", "service.name": "svc-" + iid[-1]})
    s.set_resource("device", {"device.index": "0"}, {"name": "NVIDIA H200"})
    s.set_resource("process", {"process.pid": "7"}, {"process.command_line": "python -m vllm serve m"})
    s.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([1000, 2000, 3000], dtype=np.uint64))
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {"model_name": "m"}, 4, 2.0,
                            [0.1, 1.0, float("inf")], [1, 3, 4])
    return s


def _answers(backend, tmp):
    """Every read's raw bytes after the same simulated uploads (20 minutes of
    two instances, errors, an end) into `backend`."""
    import numpy as np

    from support.fleet import _AppHTTP
    from graphsignal.sidecar.upload import Uploader

    clock = [T0]
    db = backend.open(clock=lambda: clock[0], retention_days=7)
    # the stored history on both: the file's server adds a per-second tier of its own (memory), replicas none
    app = make_app(db, ["key-a", "key-b"], recent=False)
    stores = [_store(lambda: clock[0], "inst-%d" % i) for i in (1, 2)]
    ups = [Uploader(s, "key-a", "http://fleet", clock=lambda: 0.0, http=_AppHTTP(app)) for s in stores]
    for sec in range(0, 20 * 60, 5):
        clock[0] += 5 * NS
        for i, (s, up) in enumerate(zip(stores, ups)):
            s.add_counter("myapp_requests_total", {"route": "/v1"}, 3 + i)
            s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, (sec * 7) % 100 + 0.5)
            s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm_%d" % (sec % 3), 1000 + sec, 1)])
            s.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([5000 + sec], dtype=np.uint64))
            if sec % 300 == 0:
                s.add_error("error", "CUDA error: out of memory (%d)" % (sec // 300), tags={"process.pid": "7"})
            assert up.step()
    stores[1].set_ended(clock[0], 3)
    clock[0] += NS
    assert ups[1].step()
    c = Client(app)
    out = []
    for path in ("/api/v1/instances", "/api/v1/instances?service=svc-1", "/api/v1/signals?instance_id=inst-1",
                 "/api/v1/signals?instance_id=inst-2&window=300", "/api/v1/signals?instance_id=inst-1&window=3600",
                 "/api/v1/history?instance_id=inst-1&seconds=600", "/api/v1/history?instance_id=inst-2",
                 "/api/v1/signals?instance_id=nope"):
        for key in ("key-a", "key-b"):
            r = c.get(path, headers={"X-API-Key": key})
            out.append((path, key, r.status_code, r.get_data()))
    db.close()
    return out


def test_both_backends_answer_the_same_bytes_to_the_same_requests(pg_backend, tmp_path):
    lite = _answers(Backend("sqlite", str(tmp_path / "fleet.db")), tmp_path)
    pgs = _answers(pg_backend, tmp_path)
    assert [a[:3] for a in lite] == [a[:3] for a in pgs]
    assert sum(1 for a in lite if a[2] == 200) == 9  # key-a: all but "nope"; key-b: two empty lists, 404s
    for a, b in zip(lite, pgs):
        assert a[3] == b[3], (a[0], a[1])
    w = orjson.loads(lite[6][3])["window"]
    assert w["snapshots"] >= 5 and any(m["name"] == "myapp_requests_total" for m in w["metrics"])


def _keys_file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text + "\n")
    os.chmod(path, 0o600)
    return str(path)


def _two_replicas(pg_backend, tmp_path, **kw):
    """Two graphsignal-server processes on one database: the first with
    PGPASSWORD, the second with --database-password-file."""
    a = ServerProc(pg_backend, **kw).start()
    pw = _keys_file(tmp_path, "pw", pg_backend.password)
    b = ServerProc(Backend("postgresql", pg_backend.location), args=["--database-password-file", pw], **kw).start()
    return a, b


def test_an_upload_through_one_replica_reads_back_through_the_other_at_once(pg_backend, tmp_path):
    a, b = _two_replicas(pg_backend, tmp_path)
    try:
        for i in range(5):
            srv, other = (a, b) if i % 2 == 0 else (b, a)
            doc = upload_doc("inst", T0 + i * 61 * NS, seq=i + 1, metrics=[
                {"name": "c", "type": "counter", "tags": {}, "stats": {"total": i}, "updated_ns": T0 + i}])
            assert srv.post(doc)[0] == 200
            status, snap = other.get("/api/v1/signals?instance_id=inst")
            assert status == 200 and snap["instance"]["seq"] == i + 1 and snap["metrics"][0]["stats"] == {"total": i}
            assert snap == srv.get("/api/v1/signals?instance_id=inst")[1]
        assert a.get("/api/v1/signals?instance_id=inst&window=120")[1]["window"]["snapshots"] >= 2
        assert b.get("/api/v1/instances", "key-b") == (200, {"instances": []})
        a.stop(), b.stop()
        for s in (a, b):
            assert "Traceback" not in s.stderr()
    finally:
        a.cleanup(), b.cleanup()


def test_replicas_that_start_together_make_the_schema_once(pg_backend):
    got, errors = [], []

    def open_one():
        try:
            got.append(pg_backend.open())
        except Exception as e:  # what a racing CREATE TABLE would raise
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(got) == 6
    assert got[0].fetchall("SELECT version FROM graphsignal_schema") == [(fpg.SCHEMA_VERSION,)]
    # a database a newer server made is refused, with one line that says so
    with got[0].pool.connection() as conn:
        conn.execute("UPDATE graphsignal_schema SET version = %s", (fpg.SCHEMA_VERSION + 1,))
    with pytest.raises(RuntimeError, match="schema version %d" % (fpg.SCHEMA_VERSION + 1)):
        pg_backend.open()


def test_a_version_1_database_gets_each_series_state_and_answers_the_same(pg_backend):
    """Version 1 kept no states: the upgrade gives each stored series the
    one its stats give, and every answer stays the same bytes."""
    clock = [T0]
    db = pg_backend.open(clock=lambda: clock[0])
    app = make_app(db, ["key-a"], recent=False)
    from support.fleet import _AppHTTP
    from graphsignal.sidecar.upload import Uploader

    s = _store(lambda: clock[0], "inst-1")
    up = Uploader(s, "key-a", "http://fleet", clock=lambda: 0.0, http=_AppHTTP(app))
    for _ in range(40):
        clock[0] += 5 * NS
        s.add_counter("myapp_requests_total", {"route": "/v1"}, 3)
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm", 1000, 1)])
        assert up.step()
    reads = ("/api/v1/signals?instance_id=inst-1", "/api/v1/signals?instance_id=inst-1&window=120",
             "/api/v1/history?instance_id=inst-1&seconds=600")
    before = [Client(app).get(p, headers={"X-API-Key": "key-a"}).get_data() for p in reads]
    states = dict(db.fetchall("SELECT skey, state FROM series"))
    # back to version 1's layout: no state column
    with db.pool.connection() as conn:
        conn.execute("ALTER TABLE series DROP COLUMN state")
        conn.execute("UPDATE graphsignal_schema SET version = 1")
    db.close()
    db = pg_backend.open(clock=lambda: clock[0])
    assert db.fetchall("SELECT version FROM graphsignal_schema") == [(fpg.SCHEMA_VERSION,)] == [(2,)]
    after = dict(db.fetchall("SELECT skey, state FROM series"))
    assert after.keys() == states.keys()
    for k, doc in db.fetchall("SELECT skey, doc FROM series"):
        m = orjson.loads(doc)
        whole = whole_state(m["type"], m["stats"], orjson.loads(after[k]))
        assert whole == windowmath.stored_state(m["type"], m["stats"])
    app = make_app(db, ["key-a"], recent=False)
    assert [Client(app).get(p, headers={"X-API-Key": "key-a"}).get_data() for p in reads] == before


def test_one_replica_runs_a_retention_pass_at_a_time(pg_backend, pg_server):
    from support import pg

    clock = [T0]
    one = pg_backend.open(clock=lambda: clock[0], retention_days=1)
    owner = owner_of("key-a")
    for i in range(3):
        one.ingest(owner, upload_doc("old-%d" % i, clock[0]))
    clock[0] += 2 * 86400 * NS
    two = pg_backend.open(clock=lambda: clock[0], retention_days=1)
    two.up = one.up  # the same up time as the first (the second started when it had run two days)
    import psycopg

    with psycopg.connect(pg_backend.location, password=pg.PASSWORD, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (fpg.EXPIRE_LOCK,))  # another replica's pass
        two.ingest(owner, upload_doc("live", clock[0]))
        assert len(two.instances(owner)) == 4  # it skipped its pass
        other.execute("SELECT pg_advisory_unlock(%s)", (fpg.EXPIRE_LOCK,))
    clock[0] += 2 * 3600 * NS  # an hour later: its next pass
    two.ingest(owner, upload_doc("live", clock[0]))
    assert [i["instance_id"] for i in one.instances(owner)] == ["live"]


def test_a_lost_connection_costs_the_request_in_flight_not_the_server(pg_backend, pg_server):
    db = pg_backend.open(pool_size=1)
    app = make_app(db, ["key-a"])
    c = Client(app)
    body = gzip.compress(orjson.dumps(upload_doc("inst")))
    h = {"X-API-Key": "key-a", "Content-Encoding": "gzip"}
    assert c.post("/api/v1/ingest", data=body, headers=h).status_code == 200
    with pg_server.admin() as admin:  # what a restart of PostgreSQL does to open connections
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (pg_backend.location.rsplit("/", 1)[1],))
    r = c.post("/api/v1/ingest", data=body, headers=h)
    assert r.status_code == 503 and r.headers["Retry-After"] == "10" and "unavailable" in r.json["error"]
    assert c.post("/api/v1/ingest", data=body, headers=h).status_code == 200  # a new connection
    assert c.get("/api/v1/signals?instance_id=inst", headers=h).json["instance"]["uploads"] == 2


def test_a_password_in_the_database_url_is_refused_on_the_command_line(tmp_path):
    from graphsignal.cli import server as cli

    for url in ("postgresql://gs:secret@127.0.0.1/fleet", "postgresql://gs@127.0.0.1/fleet?password=secret"):
        with pytest.raises(cli.UsageError, match="visible to every user"):
            cli.parse_args(["--database", url, "--api-key", "k"], {})
    with pytest.raises(cli.UsageError, match="neither a SQLite path"):
        cli.parse_args(["--database", "mysql://x/y", "--api-key", "k"], {})
    cfg = cli.parse_args(["--database", "sqlite:///var/lib/x.db", "--api-key", "k"], {})
    assert cfg.db == "/var/lib/x.db"
    # in the environment (readable by its user only) it may be given; log lines never show it
    from graphsignal.fleet import settings

    cfg = settings.resolve({"GRAPHSIGNAL_SERVER_DB": "postgresql://gs:secret@h:5/db", "GRAPHSIGNAL_SERVER_API_KEYS": "k"})
    assert cfg.db == "postgresql://gs:secret@h:5/db" and "secret" not in settings.redacted(cfg.db)
    # from a file of one's own, kept out of the configuration's repr; only for PostgreSQL
    pw = _keys_file(tmp_path, "pw", "file-secret")
    cfg = cli.parse_args(["--database", "postgresql://gs@h/db", "--database-password-file", pw, "--api-key", "k"], {})
    assert cfg.db_password == "file-secret" and "file-secret" not in repr(cfg)
    with pytest.raises(cli.UsageError, match="is for a postgresql:// database"):
        cli.parse_args(["--database", "x.db", "--database-password-file", pw, "--api-key", "k"], {})
    os.chmod(pw, 0o644)
    with pytest.raises(cli.UsageError, match="readable or writable by other users"):
        cli.parse_args(["--database", "postgresql://gs@h/db", "--database-password-file", pw, "--api-key", "k"], {})


def test_a_database_that_cannot_be_reached_is_one_line_and_exit_1(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    proc = subprocess.run(SERVER + ["--port", "0", "--database", "postgresql://gs@127.0.0.1:%d/fleet" % port],
                          capture_output=True, timeout=60, env=quiet_env(GRAPHSIGNAL_SERVER_API_KEYS="k",
                                                                         PGPASSWORD="pw"))
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, lines
    assert "cannot open the database postgresql://gs@127.0.0.1:%d/fleet" % port in lines[0]


def _post(port, body, timeout=30.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/api/v1/ingest", body=body, headers={"X-API-Key": "key-a", "Content-Encoding": "gzip"})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def test_a_kill_9_of_one_replica_during_uploads_from_6_clients_loses_nothing_acknowledged(pg_backend, tmp_path):
    from support.gsrun import wait_for

    a, b = _two_replicas(pg_backend, tmp_path)
    acked = {}  # instance -> highest seq acknowledged
    through = {a.port: 0, b.port: 0}  # acknowledgements by replica
    b_failures = []
    stop = threading.Event()
    lock = threading.Lock()

    def client(n):
        iid = "inst-%d" % n
        seq = 0
        while not stop.is_set():
            seq += 1
            body = gzip.compress(orjson.dumps(upload_doc(iid, T0 + seq * NS, seq=seq, metrics=[
                {"name": "requests", "type": "counter", "tags": {}, "stats": {"total": seq}, "updated_ns": T0 + seq}])))
            # a load balancer's round robin: even uploads to the first replica, odd ones to the second,
            # and what the first cannot take (it was killed) to the second
            for srv in ((a, b) if seq % 2 == 0 else (b,)):
                try:
                    status = _post(srv.port, body)
                except OSError as e:
                    status = type(e).__name__
                if srv is b and status != 200:
                    b_failures.append((iid, seq, status))
                if status == 200:
                    with lock:
                        acked[iid] = seq
                        through[srv.port] += 1
                    break
            time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    try:
        for t in threads:
            t.start()
        assert wait_for(lambda: through[a.port] >= 12 and len(acked) == 6, 60)  # both replicas take uploads
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait(10)
        with lock:
            before = dict(acked)
        # every client goes on through the second replica
        assert wait_for(lambda: all(acked[k] >= before[k] + 4 for k in before), 60), (before, acked)
        stop.set()
        for t in threads:
            t.join(60)
        assert b_failures == []
        for iid, seq in acked.items():
            status, snap = b.get("/api/v1/signals?instance_id=" + iid)
            assert status == 200
            assert snap["instance"]["seq"] >= seq and snap["metrics"][0]["stats"]["total"] >= seq, iid
    finally:
        stop.set()
        a.cleanup(), b.cleanup()
