"""graphsignal-server against hostile and careless clients, over real
sockets to a real graphsignal-server process: integers past 2^63, deep
nesting, malformed framing, bodies that never arrive, idle-socket floods
under a low file limit, one tenant flooding while another uploads, and
API keys kept off the command line."""
import gzip
import os
import socket
import sqlite3
import subprocess
import time

import orjson
import pytest

from support.fleet import NS, SERVER, T0, ServerProc, raw_exchange, raw_head, read_all, upload_doc, zlib_bomb
from support.gsrun import quiet_env

from graphsignal.fleet import db as fdb
from graphsignal.fleet.db import DB

U64_MAX = 2 ** 64 - 1


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProc(tmp_path_factory.mktemp("fleet") / "fleet.db", keys=(), env_keys="key-a,key-b").start()
    yield srv
    srv.cleanup()


# -- integers and nesting ------------------------------------------------------------------------------------------
INT_FIELDS = ("payload_ns", "start_ns", "ended_ns", "seq", "dropped_errors", "updated_ns")


def _with(field, value, iid):
    doc = upload_doc(iid, start_ns=T0, dropped_errors=0)
    if field == "updated_ns":
        doc["metrics"][0]["updated_ns"] = value
    else:
        doc[field] = value
    return doc


def _read_back(snap, field):
    if field == "updated_ns":
        return snap["metrics"][0]["updated_ns"]
    if field in ("seq", "dropped_errors"):
        return snap["instance"][field]
    return snap[field]


@pytest.mark.parametrize("value", [0, 2 ** 63 - 1, 2 ** 63, U64_MAX], ids=["0", "2^63-1", "2^63", "2^64-1"])
@pytest.mark.parametrize("field", INT_FIELDS)
def test_every_integer_up_to_2_64_minus_1_is_stored_exactly(server, field, value):
    iid = "int-%s-%d" % (field, value)
    status, ack = server.post(_with(field, value, iid))
    assert status == 200, ack
    status, snap = server.get("/api/v1/signals?instance_id=" + iid)
    assert status == 200, snap
    got = _read_back(snap, field)
    assert type(got) is int and got == value


@pytest.mark.parametrize("field", INT_FIELDS)
def test_integers_outside_0_to_2_64_minus_1_are_a_400_naming_the_field(server, field):
    for text in (b"18446744073709551616", b"-1", b"99999999999999999999999999"):
        mark = 271828182845
        raw = orjson.dumps(_with(field, mark, "bad-int-" + field)).replace(b"%d" % mark, text)
        status, doc = server.post(None, raw=raw)
        assert status == 400 and field in doc["error"], (text, doc)
    assert server.get("/api/v1/signals?instance_id=bad-int-" + field)[0] == 404  # nothing stored


def test_the_exit_status_is_stored_as_sent_and_checked(server):
    for i, (status, code) in enumerate(((-9, 200), (0, 200), (255, 200), (256, 400), (-129, 400), ("1", 400),
                                        (1.5, 400), (True, 400))):
        iid = "exit-%d" % i
        got, doc = server.post(upload_doc(iid, ended_ns=T0, exit_status=status))
        assert got == code, (status, doc)
        if code == 200:
            assert server.get("/api/v1/signals?instance_id=" + iid)[1]["exit_status"] == status
        else:
            assert "exit_status" in doc["error"]


def test_history_and_windows_work_past_2_63(server):
    """Two uploads a minute apart near 2^64-1: the first minute becomes a
    history row (ts_ns past 2^63) and a window is computed from it."""
    iid = "late"
    base = U64_MAX - 10 * 60 * NS
    for k in range(3):
        t = base + k * 61 * NS
        doc = upload_doc(iid, t, metrics=[{"name": "c", "type": "counter", "tags": {}, "stats": {"total": 10 * k},
                                           "updated_ns": t}])
        assert server.post(doc)[0] == 200
    status, snap = server.get("/api/v1/signals?instance_id=%s&window=120" % iid)
    assert status == 200, snap
    w = snap["window"]
    assert w["end_ns"] == base + 122 * NS and w["start_ns"] in (base, base + 61 * NS)
    (c,) = w["metrics"]
    assert c["stats"]["delta"] == (20 if w["start_ns"] == base else 10)


def _nested(levels):
    """An upload whose context value nests lists so that the document's
    containers go `levels` deep (the body is 1, context 2)."""
    lists = levels - 2
    return (b'{"schema":1,"instance_id":"deep","context":{"instance.id":"deep","x":%s"leaf"%s},"payload_ns":%d,'
            b'"metrics":[],"errors":[]}' % (b"[" * lists, b"]" * lists, T0))


@pytest.mark.parametrize("levels", [33, 100, 254, 255, 1000, 1023, 300000])  # 300,000: SIGSEGV of the server before
def test_nesting_deeper_than_32_is_a_400(server, levels):
    status, doc = server.post(None, raw=_nested(levels))
    assert status == 400, doc
    assert "32" in doc["error"] and ("levels" in doc["error"] or "JSON" in doc["error"])


def test_nesting_of_32_levels_and_brackets_inside_strings_are_accepted(server):
    assert server.post(None, raw=_nested(32))[0] == 200
    doc = upload_doc("brackets", context={"instance.id": "brackets", "x": "[[[{{{" * 200 + '\\"[[[' + "]" * 50})
    doc["metrics"][0]["stats"]["note"] = "{" * 500
    status, ack = server.post(doc)
    assert status == 200, ack
    snap = server.get("/api/v1/signals?instance_id=brackets")[1]
    assert snap["context"]["x"] == doc["context"]["x"]


@pytest.mark.parametrize("where", ["context", "stats", "engine", "error", "resource"])
def test_deep_values_anywhere_in_the_body_are_refused(server, where):
    deep = "x"
    for _ in range(40):
        deep = {"k": deep}
    doc = upload_doc("deep-" + where)
    if where == "context":
        doc["context"]["v"] = deep
    elif where == "stats":
        doc["metrics"][0]["stats"]["extra"] = deep
    elif where == "engine":
        doc["engine"] = deep
    elif where == "error":
        doc["errors"] = [{"level": "error", "message": "m", "tags": {}, "extra": deep}]
    else:
        doc["resources"] = [{"kind": "host", "tags": {}, "attributes": {"a": deep}}]
    status, out = server.post(doc)
    assert status == 400 and "levels" in out["error"], out
    assert server.get("/api/v1/signals?instance_id=deep-" + where)[0] == 404


def test_a_version_1_database_is_converted_and_reads_the_same(tmp_path):
    """Version 1 stored the integers as they were; opening it with this
    server converts them (minus 2^63) and the snapshot, history and window
    read back the same."""
    clock = [T0]
    path = str(tmp_path / "v1.db")
    db = DB(path, clock=lambda: clock[0])
    owner = fdb.owner_of("key-a")
    for k in range(3):
        t = T0 + k * 61 * NS
        clock[0] = t
        db.ingest(owner, upload_doc("old", t, seq=k + 1, start_ns=T0 - NS, dropped_errors=k, metrics=[
            {"name": "c", "type": "counter", "tags": {}, "stats": {"total": k}, "updated_ns": t}]))
    before = db.snapshot(owner, "old"), db.history(owner, "old", 0)
    # back to version 1's layout: the values as they were
    c = db.conn
    for table, cols in fdb._ENCODED:
        c.execute("UPDATE %s SET %s" % (table, ", ".join("%s = %s + ? + 1" % (col, col) for col in cols)),
                  [fdb.OFFSET - 1] * len(cols))
    c.execute("PRAGMA user_version=1")
    assert c.execute("SELECT payload_ns FROM instances").fetchone()[0] == T0 + 122 * NS
    db.close()
    db = DB(path, clock=lambda: clock[0])
    assert db.conn.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION
    assert (db.snapshot(owner, "old"), db.history(owner, "old", 0)) == before
    assert before[0]["instance"]["seq"] == 3 and before[0]["payload_ns"] == T0 + 122 * NS
    db.close()



def test_a_version_2_database_gets_the_workloads_end_and_reads_the_same(tmp_path):
    path = str(tmp_path / "v2.db")
    db = DB(path, clock=lambda: T0)
    owner = fdb.owner_of("key-a")
    db.ingest(owner, upload_doc("old", T0, seq=1, start_ns=T0 - NS))
    before = db.snapshot(owner, "old")
    for col in ("ended_ns", "exit_status"):  # back to version 2's layout
        db.conn.execute("ALTER TABLE instances DROP COLUMN %s" % col)
    db.conn.execute("PRAGMA user_version=2")
    db.close()
    db = DB(path, clock=lambda: T0 + NS)
    assert db.conn.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION
    assert db.snapshot(owner, "old") == before and before["ended_ns"] is None
    # the run's final upload says how it ended; it stays
    db.ingest(owner, upload_doc("old", T0 + NS, seq=2, start_ns=T0 - NS, ended_ns=T0 + NS // 2, exit_status=-9))
    db.ingest(owner, upload_doc("old", T0 + 2 * NS, seq=3, start_ns=T0 - NS))
    snap = db.snapshot(owner, "old")
    assert (snap["ended_ns"], snap["exit_status"]) == (T0 + NS // 2, -9)
    db.close()


def _peak_rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([line for line in f if line.startswith("VmHWM:")][0].split()[1]) >> 10


def test_a_bomb_and_a_broken_history_row_cost_the_upgrade_two_rows_not_the_server(tmp_path):
    """An old database (schema 3) with a row that is not zlib and one that
    expands to 1 GiB: graphsignal-server starts, says it dropped them in
    one line, stays within its memory bound and serves the rest."""
    import shutil

    path = tmp_path / "old.db"
    shutil.copyfile(os.path.join(os.path.dirname(__file__), "..", "data", "fleet", "schema3.db"), path)
    bomb = zlib_bomb(1024)
    with sqlite3.connect(path) as c:
        for ts, blob in ((T0 + 1, bomb), (T0 + 2, b"\x00 not zlib")):
            c.execute("INSERT INTO history (owner, instance_id, ts_ns, snapshot) VALUES (?,?,?,?)",
                      (fdb.owner_of("key-a"), "inst-1", fdb.enc(ts), blob))
    srv = ServerProc(path, keys=("key-a",)).start()
    try:
        peak = _peak_rss_mib(srv.proc.pid)
        status, doc = srv.get("/api/v1/instances")
        assert status == 200 and sorted(i["instance_id"] for i in doc["instances"]) == ["inst-1", "inst-2"]
        assert srv.get("/api/v1/signals?instance_id=inst-1&window=600")[0] == 200
    finally:
        srv.stop()
    err = srv.stderr()
    srv.cleanup()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "schema upgrade" in line]
    assert len(lines) == 1 and "dropped 2 history rows it could not read" in lines[0], err
    # the bomb is read no further than a row may be (64 MiB), never to its 1 GiB
    assert peak < 400, "peak RSS %d MiB" % peak
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION


# -- API keys off the command line ---------------------------------------------------------------------------------
def _key_file(tmp_path, text, mode=0o600):
    path = tmp_path / "keys"
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def _cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read()


def test_keys_from_a_file_work_and_stay_off_the_command_line(tmp_path):
    path = _key_file(tmp_path, "# fleet keys\n\n  file-key-1  \nfile-key-2\n#file-key-3\n", 0o640)
    srv = ServerProc(tmp_path / "f.db", keys=(), args=["--api-key-file", path]).start()
    try:
        for key in ("file-key-1", "file-key-2"):
            assert srv.get("/api/v1/instances", key) == (200, {"instances": []})
        assert srv.get("/api/v1/instances", "file-key-3")[0] == 401  # a comment
        assert srv.get("/api/v1/instances", "# fleet keys")[0] == 401
        assert b"file-key" not in _cmdline(srv.proc.pid)
    finally:
        srv.stop()
    assert "warning" not in srv.stderr()
    srv.cleanup()


def test_a_key_file_other_users_can_read_or_write_is_refused(tmp_path):
    for mode in (0o644, 0o602, 0o666):
        path = _key_file(tmp_path, "k\n", mode)
        proc = subprocess.run(SERVER + ["--port", "0", "--db", str(tmp_path / "x.db"), "--api-key-file", path],
                              capture_output=True, timeout=60, env=quiet_env())
        lines = proc.stderr.decode().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "other users" in lines[0] and "%04o" % mode in lines[0] and "chmod" in lines[0]
    for text, needle in (("# only a comment\n\n", "no keys"), (None, "No such file")):
        path = _key_file(tmp_path, text) if text is not None else str(tmp_path / "missing")
        proc = subprocess.run(SERVER + ["--port", "0", "--db", str(tmp_path / "x.db"), "--api-key-file", path],
                              capture_output=True, timeout=60, env=quiet_env())
        assert proc.returncode == 2 and needle in proc.stderr.decode(), proc.stderr
    assert not os.path.exists(tmp_path / "x.db")  # refused before anything was opened


def test_a_key_file_of_another_user_or_not_a_file_is_refused_at_once(tmp_path):
    # before: root took another user's 0600 key file (its owner could rewrite the keys), a FIFO hung the start
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo, 0o600)
    cases = [(fifo, "not a regular file")]
    if os.geteuid() == 0:
        theirs = _key_file(tmp_path, "EVILKEY\n", 0o600)
        os.chown(theirs, 65534, 65534)
        link = str(tmp_path / "link")
        os.symlink(theirs, link)
        cases += [(theirs, "belongs to uid 65534"), (link, "belongs to uid 65534")]
    for path, needle in cases:
        proc = subprocess.run(SERVER + ["--port", "0", "--db", str(tmp_path / "x.db"), "--api-key-file", path],
                              capture_output=True, timeout=60, env=quiet_env())
        lines = proc.stderr.decode().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
    assert not os.path.exists(tmp_path / "x.db")


def test_api_key_on_the_command_line_still_works_with_a_warning(tmp_path):
    srv = ServerProc(tmp_path / "k.db", keys=("cmdline-key",)).start()
    try:
        assert srv.get("/api/v1/instances", "cmdline-key")[0] == 200
        assert b"cmdline-key" in _cmdline(srv.proc.pid)  # why it warns
    finally:
        srv.stop()
    (warning,) = [line for line in srv.stderr().splitlines() if "warning" in line]
    assert "--api-key" in warning and "visible" in warning and "--api-key-file" in warning
    srv.cleanup()


def test_keys_from_file_flag_and_environment_add_up(tmp_path):
    from graphsignal.cli import server as cli

    path = _key_file(tmp_path, "f1\nshared\n")
    cfg = cli.parse_args(["--api-key-file", path, "--api-key", "c1", "shared"], {"GRAPHSIGNAL_SERVER_API_KEYS": "e1"})
    assert cfg.api_keys == ("f1", "shared", "c1", "e1") and cfg.key_on_command_line
    cfg = cli.parse_args(["--api-key-file=" + path], {})
    assert cfg.api_keys == ("f1", "shared") and not cfg.key_on_command_line


# -- framing and timeouts, through the graphsignal-server process ---------------------------------------------------
def test_the_server_process_refuses_duplicate_content_length_and_chunked_with_it(server):
    body = gzip.compress(orjson.dumps(upload_doc("framing")))
    base = [("X-API-Key", "key-a"), ("Content-Encoding", "gzip")]
    for headers, status in (([("Content-Length", str(len(body)))] * 2, 400),
                            ([("Content-Length", str(len(body))), ("Transfer-Encoding", "chunked")], 400),
                            ([("Transfer-Encoding", "chunked")], 411)):
        got, data, closed = raw_exchange(server.port, raw_head("POST", "/api/v1/ingest", base + headers, body))
        assert got == status and closed is not None, data
    assert server.get("/api/v1/signals?instance_id=framing")[0] == 404


@pytest.mark.slow
def test_the_server_process_closes_a_short_body_after_its_read_timeout(server):
    """10 of 1000 declared bytes: 408 after the 10 s read timeout, and the
    server answers others meanwhile."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        t0 = time.monotonic()
        s.sendall(raw_head("POST", "/api/v1/ingest", [("X-API-Key", "key-a"), ("Content-Length", "1000")],
                           b"x" * 10))
        assert server.get("/api/v1/instances")[0] == 200
        reply = read_all(s)  # to the server's close
        waited = time.monotonic() - t0
    finally:
        s.close()
    assert reply.startswith(b"HTTP/1.1 408 ") and b"10 of 1000" in reply and waited >= 10
