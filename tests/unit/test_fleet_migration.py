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

from graphsignal import windowmath
from graphsignal.fleet import db as fdb
from graphsignal.fleet.app import make_app

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
    path = _copy(tmp_path)
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
                assert {k: inst.pop(k) for k in ADDED} == {"ended_ns": None, "exit_status": None, "gpus": 0,
                                                           "service": "vllm"}, url
        assert got == want, url
    db.close()


def test_the_history_is_rewritten_once_as_windowmath_states(tmp_path):
    path = _copy(tmp_path)
    before = _rows(path)
    assert any(isinstance(v, list) and len(v) == 4 for _, states in before for v in states.values())
    fdb.DB(path).close()
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == fdb.SCHEMA_VERSION == 4
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
