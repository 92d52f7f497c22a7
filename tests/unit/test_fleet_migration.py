"""A graphsignal-server database written before the history held
graphsignal.windowmath's states (schema 3, tests/data/fleet/schema3.db,
made by make_schema3_db.py there) opens with today's server, is rewritten
once, and gives the answers that server gave from it, windows included."""
import os
import shutil
import sqlite3
import zlib

import orjson
from werkzeug.test import Client

from support.fleet import zlib_bomb

from graphsignal import windowmath
from graphsignal.fleet import db as fdb
from graphsignal.fleet.app import make_app
from graphsignal.fleet.rows import whole_state

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "fleet")
ADDED = ("ended_ns", "exit_status", "gpus", "service")


def _copy(tmp_path):
    path = str(tmp_path / "server.db")
    shutil.copyfile(os.path.join(DATA, "schema3.db"), path)
    return path


def _rows(path):
    with sqlite3.connect(path) as c:
        return [(ts, orjson.loads(zlib.decompress(blob))) for ts, blob in
                c.execute("SELECT ts_ns, snapshot FROM history ORDER BY owner, instance_id, ts_ns")]


def test_a_schema_3_database_gives_the_answers_it_gave(tmp_path):
    _answers_as_given(_copy(tmp_path))


def _answers_as_given(path):
    """Opens the schema 3 database at path and checks every answer the
    server of that version gave from it."""
    with open(os.path.join(DATA, "schema3_answers.json"), "rb") as f:
        answers = orjson.loads(f.read())
    assert sum("window=" in u for u in answers) == 14
    db = fdb.DB(path, clock=lambda: 1_800_001_500 * fdb.NS)
    c = Client(make_app(db, ["key-a"]))
    for url, want in answers.items():
        r = c.get(url, headers={"X-API-Key": "key-a"})
        assert r.status_code == 200, (url, r.data)
        got = orjson.loads(r.data)
        if url.startswith("/api/v1/instances"):
            # what instances came to say since (the run's end, its GPUs, its service) comes on top
            for inst in got["instances"]:
                # its uploads held vLLM's metrics and no device
                start = inst.pop("start_ns")  # the run's start: told apart from another run of the service
                assert isinstance(start, int), url
                assert {k: inst.pop(k) for k in ADDED} == {"ended_ns": None, "exit_status": None, "gpus": 0,
                                                           "service": "vllm"}, url
        if url.startswith("/api/v1/signals") and "findings" not in want:
            # findings came since: computed from the stored snapshot when it is read
            assert isinstance(got.pop("findings"), list), url
        assert got == want, url
    db.close()


def test_the_history_is_rewritten_once_as_windowmath_states(tmp_path):
    path = _copy(tmp_path)
    before = _rows(path)
    assert any(isinstance(v, list) and len(v) == 4 for _, states in before for v in states.values())
    fdb.DB(path).close()
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION == 6
    after = _rows(path)
    assert [ts for ts, _ in after] == [ts for ts, _ in before]
    kinds = set()
    for (_, old), (_, new) in zip(before, after):
        assert set(old) == set(new)
        for k, v in new.items():
            type_ = orjson.loads(k)[1]
            if type_ == "histogram":
                count, total, bins = v
                assert [count, total] == old[k][:2]
                kinds.add(next(iter(bins)))
                state = windowmath.load_state(type_, v)
                if "idx" in bins:  # the same bins, by index
                    assert [int(x) for x in state[2].dense()[bins["idx"]]] == old[k][3]
                else:
                    assert list(state[2][1]) == old[k][3]
            elif type_ == "profile":
                assert v == {n: [val, s] for n, val, s in old[k]}
            else:
                assert v == old[k]
    assert kinds == {"idx", "le"}
    # opening it again changes nothing
    fdb.DB(path).close()
    assert _rows(path) == after


def _bad_rows():
    """(what, stored blob) of history rows the upgrade cannot read or convert."""
    hist = orjson.dumps(["myapp_latency_nanoseconds", "histogram", {}]).decode()
    prof = orjson.dumps(["kernel_time", "profile", {}]).decode()
    gauge = orjson.dumps(["g", "gauge", {}]).decode()
    return [
        ("not zlib", b"not zlib at all"),
        ("truncated zlib", zlib.compress(orjson.dumps({gauge: 1}))[:-6]),
        ("not JSON", zlib.compress(b"{not json")),
        ("not an object", zlib.compress(b"[1, 2, 3]")),
        ("too deep", zlib.compress(b"[" * 100_000 + b"]" * 100_000)),
        ("a histogram of 2 fields", zlib.compress(orjson.dumps({hist: [1, 2]}))),
        ("a profile of objects", zlib.compress(orjson.dumps({prof: [{"a": 1}]}))),
        ("a key of no type", zlib.compress(orjson.dumps({'["g"]': 1}))),
        ("a key that is no JSON", zlib.compress(orjson.dumps({"g,gauge": 1}))),
        ("a text, not a blob", "text"),
        ("a bomb", zlib_bomb(65)),  # past the 64 MiB a row may expand to
    ]


def test_rows_the_upgrade_cannot_read_are_dropped_with_one_line_and_the_rest_answers_as_before(tmp_path, caplog):
    path = _copy(tmp_path)
    owner = fdb.owner_of("key-a")
    good = len(_rows(path))
    with sqlite3.connect(path) as c:
        ts = sorted(fdb.dec(t) for (t,) in c.execute("SELECT ts_ns FROM history WHERE instance_id='inst-1'"))
        bad = _bad_rows()
        # between the instance's real rows: kept, they would change its windows
        for i, (_, blob) in enumerate(bad):
            c.execute("INSERT INTO history (owner, instance_id, ts_ns, snapshot) VALUES (?,?,?,?)",
                      (owner, "inst-1", fdb.enc(ts[3] + 1 + i), blob))
    with caplog.at_level("WARNING", logger="graphsignal.fleet"):
        _answers_as_given(path)
    lines = [r.getMessage() for r in caplog.records if r.name == "graphsignal.fleet"]
    assert len(lines) == 1, lines
    assert "dropped %d history rows it could not read" % len(bad) in lines[0]
    assert "instance 'inst-1'" in lines[0] and "not zlib" in lines[0]
    assert len(_rows(path)) == good
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION
    fdb.DB(path).close()  # nothing left to say the second time
    assert len([r for r in caplog.records if r.name == "graphsignal.fleet"]) == 1


def test_the_upgrade_counts_instances_as_seen_at_it_and_history_rows_as_old_as_on_their_clock(tmp_path):
    path = _copy(tmp_path)
    fdb.DB(path).close()
    with sqlite3.connect(path) as c:
        assert {s for (s,) in c.execute("SELECT seen_up_ns FROM instances")} == {0}
        newest = dict(c.execute("SELECT instance_id, payload_ns FROM instances"))
        rows = c.execute("SELECT instance_id, ts_ns, kept_up_ns FROM history").fetchall()
    assert rows and all(kept == ts - newest[iid] <= 0 for iid, ts, kept in rows)


def test_the_upgrade_gives_every_stored_series_the_state_its_stats_give(tmp_path):
    path = _copy(tmp_path)
    with sqlite3.connect(path) as c:
        assert "state" not in {r[1] for r in c.execute("PRAGMA table_info(series)")}
    fdb.DB(path).close()
    with sqlite3.connect(path) as c:
        rows = c.execute("SELECT doc, state FROM series").fetchall()
    types = set()
    for doc, state in rows:
        m = orjson.loads(doc)
        assert "state" not in m  # the snapshot's series as they were
        stored = orjson.loads(state)
        assert (stored is None) == (m["type"] == "profile")  # a profile's stats are all there is of it
        assert whole_state(m["type"], m["stats"], stored) == windowmath.stored_state(m["type"], m["stats"])
        types.add(m["type"])
    assert types == {"gauge", "counter", "histogram", "profile"}
