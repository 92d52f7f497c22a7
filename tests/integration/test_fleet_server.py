"""graphsignal-server, the self-hosted Signals API: the uploader's bodies
in, /signals-shaped snapshots and windows out, per-key isolation, body
checks, restarts, bounded history (in-process with werkzeug.test.Client,
the sidecar's real Uploader posting into it); and the real processes:
graphsignal-run uploading to a graphsignal-server, and a kill -9 of the
server in the middle of uploads."""
import errno
import gzip
import io
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import orjson
import pytest
from werkzeug.test import Client, EnvironBuilder, run_wsgi_app

from support.fleet import SERVER, ServerProc, upload_doc
from support.gsrun import GS_RUN, free_port, get_json, quiet_env, wait_for

from graphsignal.fleet import db as fdb
from graphsignal.fleet.app import make_app
from graphsignal.sidecar.upload import Uploader
from graphsignal.sidecar.store import MetricStore

NS = 1_000_000_000


class ClientHTTP:
    """What the Uploader needs of a requests session, over a werkzeug
    test Client: the sidecar's own uploader posts into the app in-process."""

    def __init__(self, app):
        self.client = Client(app)

    def post(self, url, data, headers, **kw):
        r = self.client.post("/api/v1/ingest", data=data, headers=headers)
        return _Resp(r.status_code, r.data, r.headers)


class _Resp:
    def __init__(self, status, body, headers=None):
        self.status_code = status
        self.raw = _Raw(body)
        self.headers = headers or {}

    def close(self):
        pass


class _Raw:
    def __init__(self, body):
        self.f = io.BytesIO(body)

    def read(self, n, decode_content=True):
        return self.f.read(n)


class Fleet:
    """The app over a backend's storage (the `backend` fixture: SQLite, then PostgreSQL)."""

    def __init__(self, backend, keys=("key-a", "key-b"), **kw):
        self.db = backend.open(**kw)
        self.app = make_app(self.db, keys)
        self.client = Client(self.app)

    def uploader(self, store, key="key-a"):
        return Uploader(store, key, "http://fleet", clock=lambda: 0.0, http=ClientHTTP(self.app))

    def get(self, path, key="key-a"):
        return self.client.get(path, headers={"X-API-Key": key} if key else {})

    def post(self, data, key="key-a", encoding="gzip", **headers):
        h = {"X-API-Key": key, "Content-Type": "application/json"}
        if encoding:
            h["Content-Encoding"] = encoding
        h.update(headers)
        return self.client.post("/api/v1/ingest", data=data, headers=h)

    def instances(self, key="key-a"):
        r = self.get("/api/v1/instances", key)
        assert r.status_code == 200, r.data
        return r.json["instances"]

    def signals(self, iid, key="key-a", window=None):
        return self.get("/api/v1/signals?instance_id=%s%s" % (iid, "&window=%d" % window if window else ""), key)


def workload_store(clock=None):
    s = MetricStore(clock=clock) if clock else MetricStore()
    s.context.update({"instance.id": "inst-1", "host.name": "gpu-box"})
    s.add_counter("myapp_requests_total", {"process.pid": "7"}, 5)
    s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 40)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm", 1000, 2), ("add", 10, 1)])
    s.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([1000, 2000, 3000], dtype=np.uint64))
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {"model_name": "m"}, 4, 2.0,
                            [0.1, 1.0, float("inf")], [1, 3, 4])
    s.set_resource("host", {}, {"cpu.count": 8})
    s.add_error("error", "CUDA error: an illegal memory access", tags={"process.pid": "7"})
    return s


def local_signals(store):
    from graphsignal.sidecar.snapshot import signals_snapshot

    return signals_snapshot(store)


def test_an_upload_reads_back_as_the_instance_snapshot_in_the_signals_shape(backend):
    f = Fleet(backend)
    s = workload_store()
    assert f.uploader(s).step()
    (inst,) = f.instances()
    assert inst["instance_id"] == "inst-1" and inst["context"] == {"instance.id": "inst-1", "host.name": "gpu-box"}
    assert set(inst) == {"instance_id", "context", "first_seen_ns", "last_seen_ns", "ended_ns", "exit_status", "gpus",
                         "service", "start_ns"}
    assert isinstance(inst["start_ns"], int)  # the run's start: two runs of one service told apart
    assert inst["gpus"] == 0 and inst["ended_ns"] is None and inst["exit_status"] is None
    r = f.signals("inst-1")
    assert r.status_code == 200 and r.mimetype == "application/json"
    snap, local = r.json, local_signals(s)
    assert set(local) <= set(snap)
    for k in ("context", "start_ns", "errors", "resources", "profiler"):
        assert snap[k] == local[k], k
    mine = [m for m in local["metrics"] if not m["name"].startswith("graphsignal_upload")]
    assert [m for m in snap["metrics"] if not m["name"].startswith("graphsignal_upload")] == mine


def test_the_snapshot_follows_later_uploads(backend):
    f = Fleet(backend)
    s = workload_store()
    up = f.uploader(s)
    assert up.step()
    s.add_counter("myapp_requests_total", {"process.pid": "7"}, 10)
    s.add_error("error", "CUDA error: an illegal memory access", tags={"process.pid": "7"})
    s.add_error("warning", "NCCL WARN timeout")
    assert up.step()
    snap = f.signals("inst-1").json
    by = {m["name"]: m for m in snap["metrics"]}
    assert by["myapp_requests_total"]["stats"] == {"total": 15}
    assert [(e["message"], e["count"]) for e in snap["errors"]] == [("CUDA error: an illegal memory access", 2),
                                                                    ("NCCL WARN timeout", 1)]
    assert snap["instance"]["uploads"] == 2


def test_each_key_sees_only_its_own_instances_and_unknown_keys_get_401(backend):
    f = Fleet(backend)
    assert f.uploader(workload_store(), "key-a").step()
    assert f.instances("key-b") == []
    r = f.signals("inst-1", "key-b")
    assert r.status_code == 404 and "inst-1" in r.json["error"]
    for key in ("nope", None):
        r = f.get("/api/v1/instances", key)
        assert r.status_code == 401 and "key" in r.json["error"]
        r = f.post(gzip.compress(b"{}"), key=key or "")
        assert r.status_code == 401
    r = f.client.get("/api/v1/instances", headers={"Authorization": "Bearer key-a"})
    assert r.status_code == 200 and len(r.json["instances"]) == 1
    # the same instance id under another key is another instance
    assert f.uploader(workload_store(), "key-b").step()
    assert len(f.instances("key-a")) == 1 and len(f.instances("key-b")) == 1


def test_instances_say_their_service_and_can_be_listed_by_it(backend):
    f = Fleet(backend)
    for iid, service in (("inst-1", "trainer"), ("inst-2", None), ("inst-3", "trainer"), ("inst-4", "server")):
        s = workload_store()
        s.context["instance.id"] = iid
        if service:
            s.context.update({"service.name": service, "tags": {"pod": iid}})
        assert f.uploader(s).step()
    got = {i["instance_id"]: (i["service"], i["context"].get("tags")) for i in f.instances()}
    # a run that named no service is listed by what it ran (its engine or program)
    assert got.pop("inst-2")[1] is None
    assert got == {"inst-1": ("trainer", {"pod": "inst-1"}), "inst-3": ("trainer", {"pod": "inst-3"}),
                   "inst-4": ("server", {"pod": "inst-4"})}
    r = f.get("/api/v1/instances?service=trainer")
    assert r.status_code == 200 and sorted(i["instance_id"] for i in r.json["instances"]) == ["inst-1", "inst-3"]
    assert f.get("/api/v1/instances?service=nobody").json == {"instances": []}
    r = f.get("/api/v1/instances?services=trainer")
    assert r.status_code == 400 and "known: service" in r.json["error"]
    # a service or tags that are not strings are refused with the rest of the body
    for context, word in (({"instance.id": "i", "service.name": 7}, "service.name"),
                          ({"instance.id": "i", "tags": {"pod": 1}}, "tags"),
                          ({"instance.id": "i", "tags": "pod=1"}, "tags")):
        r = f.post(gzip.compress(orjson.dumps(dict(_good_body(), context=context))))
        assert r.status_code == 400 and word in r.json["error"], r.json


def _good_body():
    return {"schema": 1, "instance_id": "i", "context": {"instance.id": "i"}, "payload_ns": 1, "metrics": [],
            "errors": []}


BAD = [
    ("not gzip", b"{}", "gzip", 400, "gzip"),
    ("truncated gzip", gzip.compress(orjson.dumps(_good_body()))[:-12], "gzip", 400, "gzip"),
    ("not JSON", gzip.compress(b"{nope"), "gzip", 400, "JSON"),
    ("an array", gzip.compress(b"[]"), "gzip", 400, "object"),
    ("other schema", gzip.compress(orjson.dumps(dict(_good_body(), schema=3))), "gzip", 400, "schema"),
    ("no instance", gzip.compress(orjson.dumps({k: v for k, v in _good_body().items() if k != "instance_id"})),
     "gzip", 400, "instance_id"),
    ("bad type", gzip.compress(orjson.dumps(dict(_good_body(), metrics=[
        {"name": "x", "type": "meter", "tags": {}, "stats": {}}]))), "gzip", 400, "metrics[0].type"),
    ("bad tags", gzip.compress(orjson.dumps(dict(_good_body(), metrics=[
        {"name": "x", "type": "gauge", "tags": {"a": 1}, "stats": {"value": 1}}]))), "gzip", 400, "tags"),
    ("bins vs counts", gzip.compress(orjson.dumps(dict(_good_body(), metrics=[
        {"name": "x", "type": "histogram", "tags": {}, "stats": {"count": 1, "bins": [1, 2], "counts": [1]}}]))),
     "gzip", 400, "bins"),
    ("string gauge", gzip.compress(orjson.dumps(dict(_good_body(), metrics=[
        {"name": "x", "type": "gauge", "tags": {}, "stats": {"value": "high"}}]))), "gzip", 400, "value"),
    ("frames", gzip.compress(orjson.dumps(dict(_good_body(), metrics=[
        {"name": "x", "type": "profile", "tags": {}, "stats": {"frames": [{"name": "k"}]}}]))), "gzip", 400, "frames"),
    ("mismatched id", gzip.compress(orjson.dumps(dict(_good_body(), context={"instance.id": "j"}))), "gzip", 400,
     "differ"),
    ("encoding", orjson.dumps(_good_body()), "br", 400, "Content-Encoding"),
    ("gzip bomb", gzip.compress(b" " * (65 << 20), 9), "gzip", 413, "uncompressed"),
]


@pytest.mark.parametrize("what,data,encoding,status,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_bodies_are_refused_with_a_json_error_and_nothing_is_stored(backend, what, data, encoding, status,
                                                                        needle):
    f = Fleet(backend)
    r = f.post(data, encoding=encoding)
    assert r.status_code == status and r.mimetype == "application/json", r.data
    assert needle in r.json["error"], r.json
    assert f.instances() == []
    # the same server takes a good body right after
    assert f.post(gzip.compress(orjson.dumps(_good_body()))).status_code == 200


def test_oversized_and_lengthless_bodies_are_refused_unread(backend):
    f = Fleet(backend)
    r = f.post(b"x" * (9 << 20))
    assert r.status_code == 413 and "cap" in r.json["error"]
    env = EnvironBuilder(path="/api/v1/ingest", method="POST", headers={"X-API-Key": "key-a"},
                         data=b"{}").get_environ()
    del env["CONTENT_LENGTH"]  # chunked, or a client that does not say
    body, status, _ = run_wsgi_app(f.app, env, buffered=True)
    assert status.startswith("411") and b"Content-Length" in b"".join(body)
    assert f.instances() == []


def test_bad_queries_and_methods_are_json_errors(backend):
    f = Fleet(backend)
    assert f.get("/api/v1/signals").status_code == 400
    assert f.get("/api/v1/signals?instance_id=x&foo=1").status_code == 400
    assert f.get("/api/v1/signals?instance_id=x&window=10").status_code == 400  # under a minute
    assert f.get("/api/v1/signals?instance_id=x").status_code == 404
    assert f.get("/api/v1/instances?all=1").status_code == 400
    assert f.client.delete("/api/v1/instances", headers={"X-API-Key": "key-a"}).status_code == 405
    assert f.client.get("/api/v1/ingest", headers={"X-API-Key": "key-a"}).status_code == 405
    assert f.get("/nope").status_code == 404
    assert f.client.get("/api/v1/version").json == {"latest": __import__("graphsignal").__version__}


def test_resending_an_accepted_body_changes_nothing(backend):
    f = Fleet(backend)
    s = workload_store()
    up = f.uploader(s)
    raw, _ = up.body(s.snapshot(encode=True))
    data = gzip.compress(raw)
    body = orjson.loads(raw)
    assert f.post(data).status_code == 200
    first = f.signals("inst-1").json
    assert f.post(data).status_code == 200
    again = f.signals("inst-1").json
    first.pop("instance"), again.pop("instance")
    assert again == first
    # an older update of a series never replaces a newer one
    newer = dict(body, metrics=[dict(m, updated_ns=m["updated_ns"] + 10, stats={"total": 99}, state=99)
                                for m in body["metrics"] if m["name"] == "myapp_requests_total"])
    assert f.post(gzip.compress(orjson.dumps(newer))).status_code == 200
    assert f.post(data).status_code == 200
    by = {m["name"]: m["stats"] for m in f.signals("inst-1").json["metrics"]}
    assert by["myapp_requests_total"] == {"total": 99}


def test_the_server_keeps_what_it_accepted_across_restarts(backend):
    f = Fleet(backend)
    s = workload_store()
    assert f.uploader(s).step()
    before = f.signals("inst-1").json
    f.db.close()
    g = Fleet(backend)
    assert g.signals("inst-1").json == before
    assert [i["instance_id"] for i in g.instances()] == ["inst-1"]


class SimClock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_window_from_the_stored_history(backend):
    clock = SimClock(1_800_000_000 * NS)
    s = workload_store(clock)
    f = Fleet(backend, clock=clock)
    up = f.uploader(s)
    for sec in range(900):  # 15 simulated minutes, one upload a second
        clock.t += NS
        s.add_counter("myapp_requests_total", {"process.pid": "7"}, 5)
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm", 1000, 1)])
        s.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([5000], dtype=np.uint64))
        s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, sec % 100)
        assert up.step()
    r = f.signals("inst-1", window=300)
    assert r.status_code == 200, r.data
    w = r.json["window"]
    assert w["seconds"] == 300 and not w["partial"] and w["resolution_seconds"] == 60
    assert abs(w["covered_seconds"] - 300) <= 60
    by = {m["name"]: m["stats"] for m in w["metrics"]}
    covered = w["covered_seconds"]
    assert by["myapp_requests_total"]["delta"] == pytest.approx(5 * covered)
    assert by["myapp_requests_total"]["rate"] == pytest.approx(5.0)
    gemm = by["cuda_kernels_nanoseconds"]["frames"][0]
    assert gemm["name"] == "gemm" and gemm["samples"] == pytest.approx(covered) and gemm["share"] == 1.0
    assert by["myapp_latency_nanoseconds"]["count"] == pytest.approx(covered)
    assert 4900 <= by["myapp_latency_nanoseconds"]["p50"] <= 5100
    assert by["gpu_utilization_percent"]["max"] <= 99
    # a window longer than the run says so
    w = f.signals("inst-1", window=3600).json["window"]
    assert w["partial"] and w["covered_seconds"] < 900


class TwoSchemas(ClientHTTP):
    """Posts the sidecar's body (schema 2) as it is, and as an older
    sidecar would have sent it (schema 1: no states) for instance "old"."""

    def post(self, url, data, headers, **kw):
        doc = orjson.loads(gzip.decompress(data))
        old = dict(doc, schema=1, instance_id="old", context=dict(doc["context"], **{"instance.id": "old"}),
                   metrics=[{k: v for k, v in m.items() if k != "state"} for m in doc["metrics"]])
        assert self.client.post("/api/v1/ingest", data=gzip.compress(orjson.dumps(old)),
                                headers=headers).status_code == 200
        return ClientHTTP.post(self, url, data, headers, **kw)


def test_both_upload_schemas_are_taken_and_read_alike_where_the_stats_hold_the_whole_state(backend):
    clock = SimClock(1_800_000_000 * NS)
    s = workload_store(clock)
    f = Fleet(backend, clock=clock)
    up = Uploader(s, "key-a", "http://fleet", clock=lambda: 0.0, http=TwoSchemas(f.app))
    many = [("kernel_%03d" % i, 1000 + i, 1) for i in range(300)]  # more frames than a payload lists
    for sec in range(0, 600, 10):
        clock.t += 10 * NS
        s.add_counter("myapp_requests_total", {"process.pid": "7"}, 5)
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm", 1000, 1)])
        s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "8"}, many)
        s.add_histogram_values("myapp_latency_nanoseconds", {}, np.array([5000 + sec], dtype=np.uint64))
        s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, sec % 100)
        assert up.step()
    new, old = (f.signals(iid, window=300).json for iid in ("inst-1", "old"))
    for doc in (new, old):
        doc.pop("instance"), doc.pop("context")
    wide = [(d["window"]["metrics"].pop(i), d["metrics"]) for d in (new, old)
            for i, m in enumerate(d["window"]["metrics"]) if m["tags"] == {"process.pid": "8"}]
    assert new == old  # the snapshot and every window the stats could give exactly
    # the profile past its listed frames: schema 2's window is of every frame, schema 1's of the 249
    # listed and the "(other)" that folded the rest
    (w2, _), (w1, _) = wide
    assert "(other)" not in {fr["name"] for fr in w2["stats"]["frames"]} and w2["stats"]["frames_omitted"] == 50
    assert "(other)" in {fr["name"] for fr in w1["stats"]["frames"]}
    assert w2["stats"]["value"] == w1["stats"]["value"]  # the same time, better told apart


def test_history_is_per_minute_for_a_day_hourly_for_the_retention_then_gone(backend):
    clock = SimClock(1_800_000_000 * NS)
    s = workload_store(clock)
    f = Fleet(backend, clock=clock, retention_days=2)
    up = f.uploader(s)
    minute = 0
    while minute < 3 * 24 * 60:  # three simulated days: an upload every 10 minutes, every minute for the last 25 h
        step = 10 if minute < 47 * 60 else 1
        clock.t += step * 60 * NS
        minute += step
        s.add_counter("myapp_requests_total", {"process.pid": "7"}, 1)
        assert up.step()
    rows = f.db.fetchall("SELECT ts_ns FROM history")
    ts = sorted(fdb.dec(t) for (t,) in rows)
    end = ts[-1]  # the newest row: thinning runs as each minute's row is written
    recent = [t for t in ts if t >= end - fdb.MINUTE_ROWS_NS]
    older = [t for t in ts if t < end - fdb.MINUTE_ROWS_NS]
    assert 24 * 60 - 2 <= len(recent) <= 24 * 60 + 1
    assert 23 <= len(older) <= 26  # hourly for the second day
    assert min(ts) >= end - 2 * 86400 * NS - 60 * NS
    assert len({t // fdb.HOUR_NS for t in older}) == len(older)  # one an hour
    # a week-long window is answered from what is kept
    w = f.signals("inst-1", window=86400 + 7200).json["window"]
    assert w["resolution_seconds"] == 3600 and w["metrics"]


def test_instances_silent_for_the_retention_are_deleted(backend):
    clock = SimClock(1_800_000_000 * NS)
    f = Fleet(backend, clock=clock, retention_days=1)
    assert f.uploader(workload_store(clock)).step()
    other = workload_store(clock)
    other.context["instance.id"] = "inst-2"
    clock.t += 2 * 86400 * NS
    assert f.uploader(other).step()
    assert [i["instance_id"] for i in f.instances()] == ["inst-2"]


def test_a_wall_clock_jump_is_no_elapsed_time_and_silence_of_up_time_still_expires(backend):
    wall, mono = SimClock(1_800_000_000 * NS), SimClock(0)
    f = Fleet(backend, clock=wall, elapsed=mono, retention_days=7)
    owner = fdb.owner_of("key-a")
    for iid in ("a", "b"):
        f.db.ingest(owner, upload_doc(iid, wall.t))
    wall.t += 8 * 86400 * NS  # the server's clock steps past the retention
    mono.t += NS
    f.db.ingest(owner, upload_doc("c", wall.t))
    assert sorted(i["instance_id"] for i in f.instances()) == ["a", "b", "c"]
    # a restart: the time it was down is no elapsed time either, the up time goes on from the newest upload
    f.db.close()
    mono.t = 0
    f = Fleet(backend, clock=wall, elapsed=mono, retention_days=7)
    f.db.ingest(owner, upload_doc("c", wall.t + NS))
    assert sorted(i["instance_id"] for i in f.instances()) == ["a", "b", "c"]
    # 7 days and a minute of up time in which only c uploads: a and b are gone, with their history
    for _ in range(7 * 24 + 1):
        mono.t += 3600 * NS
        wall.t += 3600 * NS
        f.db.ingest(owner, upload_doc("c", wall.t))
    assert [i["instance_id"] for i in f.instances()] == ["c"]
    assert f.db.fetchall("SELECT COUNT(*) FROM history WHERE instance_id != 'c'")[0][0] == 0
    f.db.close()


def test_deletions_for_silence_are_bounded_per_pass(backend):
    clock = SimClock(1_800_000_000 * NS)
    f = Fleet(backend, clock=clock, retention_days=1)
    owner = fdb.owner_of("key-a")
    for i in range(250):
        f.db.ingest(owner, upload_doc("old-%d" % i, clock.t))
    clock.t += 2 * 86400 * NS
    left = []
    for _ in range(4):  # one upload a minute
        f.db.ingest(owner, upload_doc("live", clock.t))
        left.append(len(f.instances()) - 1)
        clock.t += 60 * NS
    assert left == [150, 50, 0, 0]
    f.db.close()


def test_a_sidecar_clock_jump_keeps_its_history(backend):
    clock = SimClock(1_800_000_000 * NS)
    f = Fleet(backend, clock=clock, retention_days=7)
    owner = fdb.owner_of("key-a")
    ts = clock.t
    for _ in range(30):  # half an hour, a minute apart: 29 history rows
        clock.t += 60 * NS
        ts += 60 * NS
        f.db.ingest(owner, upload_doc("inst", ts, seq=1))
    before = len(f.db.history(owner, "inst", 0))
    ts += 8 * 86400 * NS  # the sidecar's clock steps past the retention; the server's does not
    for _ in range(5):
        clock.t += 60 * NS
        ts += 60 * NS
        f.db.ingest(owner, upload_doc("inst", ts, seq=1))
    assert before == 29 and len(f.db.history(owner, "inst", 0)) == before + 5
    f.db.close()


# a graphsignal-server whose wall clock (time.time_ns, the database's clock) steps 8 days ahead on SIGUSR1
STEPPING_SERVER = r"""
import signal, sys, time
real, step = time.time_ns, [0]
time.time_ns = lambda: real() + step[0]
def jump(signum, frame):
    step[0] += 8 * 86400 * 10**9
signal.signal(signal.SIGUSR1, jump)
from graphsignal.cli.server import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_upload_while_the_servers_clock_is_8_days_ahead_deletes_no_instance(backend):
    srv = ServerProc(backend, command=[sys.executable, "-c", STEPPING_SERVER]).start()
    try:
        t = time.time_ns()
        for key, iids in (("key-a", ("a-1", "a-2", "a-3")), ("key-b", ("b-1",))):
            for iid in iids:
                for k in range(3):
                    assert srv.post(upload_doc(iid, t + k * 61 * NS, seq=k + 1), key=key)[0] == 200
        srv.proc.send_signal(signal.SIGUSR1)

        def stepped():  # the upload after the step is seen 8 days ahead
            assert srv.post(upload_doc("a-4", time.time_ns()))[0] == 200
            seen = {i["instance_id"]: i["last_seen_ns"] for i in srv.get("/api/v1/instances")[1]["instances"]}
            return seen["a-4"] > time.time_ns() + 7 * 86400 * NS

        assert wait_for(stepped, 10)
        for _ in range(3):
            assert srv.post(upload_doc("a-4", time.time_ns()))[0] == 200
        status, doc = srv.get("/api/v1/instances")
        assert sorted(i["instance_id"] for i in doc["instances"]) == ["a-1", "a-2", "a-3", "a-4"]
        assert [i["instance_id"] for i in srv.get("/api/v1/instances", key="key-b")[1]["instances"]] == ["b-1"]
        status, doc = srv.get("/api/v1/signals?instance_id=a-2&window=120")
        assert status == 200 and doc["window"]["snapshots"] >= 2
    finally:
        srv.cleanup()


# -- the real processes ---------------------------------------------------------------------------------------------
CHILD = """
import os, sys, time
from graphsignal import probes
c = probes.counter("myapp_requests_total", {"route": "/v1"})
n = int(os.environ["GS_N"])
for i in range(n):
    c.add(1)
    time.sleep(float(os.environ.get("GS_SLEEP", "0.01")))
"""


def test_graphsignal_run_uploads_to_a_graphsignal_server(backend):
    srv = ServerProc(backend, env_keys="key-c,key-d").start()
    try:
        env = quiet_env(GRAPHSIGNAL_API_KEY="key-a", GRAPHSIGNAL_API_BASE=srv.base, GS_N=200,
                        GRAPHSIGNAL_SERVICE="trainer", GRAPHSIGNAL_TAGS="pod=p-1")
        proc = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", CHILD], env=env,
                              capture_output=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
        status, doc = srv.get("/api/v1/instances")
        assert status == 200 and len(doc["instances"]) == 1
        inst = doc["instances"][0]
        assert inst["service"] == "trainer" and inst["context"]["tags"] == {"pod": "p-1"}
        assert inst["context"]["host.name"] == socket.gethostname() or inst["context"]["host.name"] == os.uname()[1]
        status, snap = srv.get("/api/v1/signals?instance_id=" + inst["instance_id"])
        assert status == 200
        (req,) = [m for m in snap["metrics"] if m["name"] == "myapp_requests_total"]
        assert req["type"] == "counter" and req["stats"]["total"] == 200 and req["tags"]["route"] == "/v1"
        assert {"host", "process"} <= {r["kind"] for r in snap["resources"]}
        assert any(m["name"] == "process_cpu_usage_percent" for m in snap["metrics"])
        for key in ("key-b", "key-c"):  # other keys (from the flag and from the environment) see nothing
            assert srv.get("/api/v1/instances", key) == (200, {"instances": []})
            assert srv.get("/api/v1/signals?instance_id=" + inst["instance_id"], key)[0] == 404
        assert srv.get("/api/v1/instances", "key-z")[0] == 401
    finally:
        srv.cleanup()


def test_a_kill_9_mid_upload_loses_nothing_acknowledged_and_the_uploader_recovers(tmp_path):
    srv = ServerProc(tmp_path / "fleet.db").start()
    sidecar_port = free_port()
    env = quiet_env(GRAPHSIGNAL_API_KEY="key-a", GRAPHSIGNAL_API_BASE=srv.base, GS_N=100000, GS_SLEEP=0.01)
    run = subprocess.Popen(GS_RUN + ["--listen-port", str(sidecar_port), sys.executable, "-c", CHILD], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def server_total():
        status, doc = srv.get("/api/v1/instances")
        if status != 200 or not doc["instances"]:
            return None
        iid = doc["instances"][0]["instance_id"]
        status, snap = srv.get("/api/v1/signals?instance_id=" + iid)
        totals = [m["stats"]["total"] for m in snap["metrics"] if m["name"] == "myapp_requests_total"]
        return (iid, totals[0], snap["instance"]["uploads"]) if totals else None

    try:
        assert wait_for(lambda: (server_total() or (0, 0, 0))[2] >= 3, 60)
        for round_ in range(2):
            iid, acked, uploads = server_total()  # what the server has acknowledged
            os.kill(srv.proc.pid, signal.SIGSTOP)  # frozen: the next upload hangs in flight
            time.sleep(1.5)
            os.kill(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait(10)
            srv.start()  # same port, same database
            after = server_total()
            assert after is not None and after[0] == iid
            assert after[1] >= acked and after[2] >= uploads  # nothing acknowledged was lost
            # the uploader backs off (1, 2, 4 s ...) and comes back on its own
            assert wait_for(lambda: (server_total() or (0, 0, 0))[1] > after[1], 60)
        status, sig = get_json("http://127.0.0.1:%d/signals" % sidecar_port)
        failed = [m["stats"]["total"] for m in sig["metrics"] if m["name"] == "graphsignal_uploads_total"
                  and m["tags"].get("result") == "failed"]
        assert failed and failed[0] >= 2
        assert run.poll() is None  # the workload never noticed
    finally:
        run.terminate()
        try:
            run.wait(20)
        except subprocess.TimeoutExpired:
            run.kill()
        srv.cleanup()


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs of its own (root only: else the test skips)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs for a full disk (needs root): %s" % r.stderr.decode().strip()[:120])
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path):
    """Writes path until the file system under it is full."""
    block = b"\0" * 4096
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(block)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                return


def test_a_full_disk_answers_503_with_retry_after_and_says_so_once(small_fs):
    from support.fleet import request, series_doc

    srv = ServerProc(small_fs / "fleet.db", keys=("key-a",)).start()
    try:
        assert srv.post(upload_doc("before"))[0] == 200
        _fill(small_fs / "filler")
        for i in range(20):  # 500 series: more pages than the disk has left
            body = gzip.compress(orjson.dumps(series_doc(500, "during-%d" % i)))
            status, doc, headers = request(srv.port, "POST", "/api/v1/ingest", body=body, key="key-a",
                                           headers={"Content-Encoding": "gzip"})
            assert (status, headers.get("Retry-After")) == (503, "60"), doc
            assert "disk is full" in doc["error"]
        # reads go on
        status, doc = srv.get("/api/v1/instances")
        assert status == 200 and [i["instance_id"] for i in doc["instances"]] == ["before"]
        os.unlink(small_fs / "filler")
        assert srv.post(series_doc(500, "after"))[0] == 200
        assert sorted(i["instance_id"] for i in srv.get("/api/v1/instances")[1]["instances"]) == ["after", "before"]
    finally:
        srv.stop()
    err = srv.stderr()
    srv.cleanup()
    assert "Traceback" not in err, err
    full = [line for line in err.splitlines() if "is full" in line]
    assert len(full) == 1 and "503" in full[0], err  # 20 refused uploads within a minute: one line
    assert len([line for line in err.splitlines() if "stored again" in line]) == 1, err


def test_the_command_line_is_parsed_once_and_refuses_what_it_cannot_use():
    from graphsignal.cli import server as cli

    cfg = cli.parse_args(["--host", "0.0.0.0", "--port=9", "--db", "/tmp/x.db", "--api-key", "a", "b",
                          "--api-key=c", "--retention-days", "3"], {"GRAPHSIGNAL_SERVER_API_KEYS": "d, a,"})
    assert (cfg.host, cfg.port, cfg.db, cfg.retention_days) == ("0.0.0.0", 9, "/tmp/x.db", 3.0)
    assert cfg.api_keys == ("a", "b", "c", "d")
    for bad in (["--port", "http"], ["--port", "70000"], ["--sync", "sometimes"], ["--retention-days", "0"],
                ["--bogus"], ["--db"], ["--api-key", "k\x01"]):
        with pytest.raises(cli.UsageError):
            cli.parse_args(bad, {})
    assert cli.main(["--version"], {}) == 0
    assert cli.main([], {}) == 2  # no key: refuses to start


def test_a_busy_port_is_one_line_and_exit_1(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        proc = subprocess.run(SERVER + ["--port", str(s.getsockname()[1]), "--db", str(tmp_path / "s.db")],
                              capture_output=True, timeout=60, env=quiet_env(GRAPHSIGNAL_SERVER_API_KEYS="k"))
    finally:
        s.close()
    assert proc.returncode == 1
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "cannot listen" in lines[0] and "--port" in lines[0]
