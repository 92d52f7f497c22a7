"""graphsignal-server's recent tier (graphsignal.fleet.recent): the last
15 minutes of an instance a point a second, through the app and a real
SQLite database, with uploads that carry only what changed (as the
sidecar's do); the workload's own probes in it; and its memory bound."""
import orjson
import pytest
from werkzeug.test import Client

from graphsignal import histo
from graphsignal.fleet import db as fdb
from graphsignal.fleet.app import make_app
from graphsignal.fleet.recent import Recent
from support.fleet import upload_doc

S = 1_000_000_000
T0 = 1_800_000_000 * S
PID = {"process.pid": "4242"}


def probes_at(t, i):
    """The series of upload i: a latency histogram of 10 values a second
    (5 ms, then 50 ms from the 600th second), a counter of 30 tokens a
    second, a queue gauge that changes every other second, host CPU."""
    value = 5_000_000 if i < 600 else 50_000_000
    slow = max(0, i - 599)
    count = 10 * i
    upper = int(histo.BIN_UPPER[histo.bin_index(value)])
    bins = sorted({int(histo.BIN_UPPER[histo.bin_index(5_000_000)]), upper})
    counts = [10 * (i - slow), 10 * slow] if len(bins) == 2 else [count]
    ms = [{"name": "app_latency_nanoseconds", "type": "histogram", "tags": PID,
           "stats": {"count": count, "sum": count * value, "min": 5_000_000, "max": value, "mean": value, "p50": value,
                     "p95": value, "p99": value, "bins": bins, "counts": counts}},
          {"name": "app_tokens_total", "type": "counter", "tags": PID, "stats": {"total": 30 * i}},
          {"name": "host_cpu_usage_percent", "type": "gauge", "tags": {}, "stats": {"value": 50.0}},
          {"name": "unselected_series", "type": "gauge", "tags": {}, "stats": {"value": i}}]
    if i % 2 == 0 or i == 1:
        ms.append({"name": "app_queue_depth", "type": "gauge", "tags": PID, "stats": {"value": float(i % 7)}})
    for m in ms:
        m["updated_ns"] = t
    return ms


@pytest.fixture
def app(tmp_path):
    db = fdb.DB(str(tmp_path / "f.db"), clock=lambda: T0)
    recent = Recent()
    c = Client(make_app(db, ["key-a"], recent))
    yield c, recent
    db.close()


def post(c, doc):
    body = orjson.dumps(doc)
    r = c.post("/api/v1/ingest", data=body, headers={"X-API-Key": "key-a", "Content-Type": "application/json",
                                                      "Content-Length": str(len(body))})
    assert r.status_code == 200, r.data
    return r


def history(c, seconds, iid="inst"):
    r = c.get("/api/v1/history?instance_id=%s&seconds=%d" % (iid, seconds), headers={"X-API-Key": "key-a"})
    assert r.status_code == 200, r.data
    return orjson.loads(r.data)["history"]


def test_the_last_15_minutes_come_a_point_a_second_with_the_workloads_own_probes(app):
    c, recent = app
    prev = {}
    for i in range(1, 1200):
        t = T0 + i * S
        ms = probes_at(t, i)
        # only what changed goes up, as the sidecar's uploads do
        changed = [m for m in ms if prev.get(m["name"]) != m["stats"]]
        prev.update({m["name"]: m["stats"] for m in ms})
        post(c, upload_doc("inst", t, changed, seq=i))
    h = history(c, 900)
    assert h["interval_seconds"] == 1 and len(h["times_ns"]) == 901
    assert h["times_ns"][-1] == T0 + 1199 * S and h["times_ns"][0] == T0 + 299 * S
    by = {s["name"]: s for s in h["series"]}
    assert "unselected_series" not in by
    assert set(by["app_tokens_total"]["values"][1:]) == {30.0}
    # a gauge that did not change in an upload keeps its value
    assert by["app_queue_depth"]["values"][-3:] == [float(1196 % 7), float(1198 % 7), float(1198 % 7)]
    lat = by["app_latency_nanoseconds"]
    assert set(lat["rates"][1:]) == {10.0}
    p50 = lat["quantiles"]["p50"]
    # each interval's own values: 5 ms before the 600th second, 50 ms after
    assert p50[1] == pytest.approx(5e6, rel=0.07) and p50[-1] == pytest.approx(50e6, rel=0.07)
    # an hour: the stored per-minute rows
    assert history(c, 3600)["interval_seconds"] == 60
    # a body sent again (a lost acknowledgement) adds no point
    post(c, upload_doc("inst", T0 + 1199 * S, [], seq=1199))
    assert len(history(c, 900)["times_ns"]) == 901


def test_the_tier_is_bounded_dropping_the_instances_silent_longest(tmp_path):
    db = fdb.DB(str(tmp_path / "f.db"), clock=lambda: T0)
    recent = Recent(max_bytes=30_000)
    c = Client(make_app(db, ["key-a"], recent))
    for i in range(1, 120):
        for iid in ("old", "new"):
            if iid == "old" and i > 60:
                continue
            post(c, upload_doc(iid, T0 + i * S, probes_at(T0 + i * S, i), seq=i))
    assert recent.bytes <= 30_000
    owners = {k[1] for k in recent.instances}
    assert owners == {"new"}
    # the dropped instance falls back to the stored per-minute history
    assert history(c, 900, "old")["interval_seconds"] == 60
    assert history(c, 900, "new")["interval_seconds"] == 1
    db.close()
