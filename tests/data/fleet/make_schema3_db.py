"""Writes schema3.db and schema3_answers.json next to this file: a
graphsignal-server database as the server of schema version 3 wrote it
(commit 045de87, before the history held graphsignal.windowmath's state
format), and what that server answered from it. Kept to show how the
files were made; tests/unit/test_fleet_migration.py opens the database
with today's server and expects the same answers.

    PYTHONPATH=<a checkout of 045de87> python3 make_schema3_db.py
"""
import io
import os
import sqlite3

import numpy as np
import orjson
from werkzeug.test import Client

from graphsignal.fleet.app import make_app
from graphsignal.fleet.db import DB
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.upload import Uploader

HERE = os.path.dirname(os.path.abspath(__file__))
NS = 1_000_000_000
T0 = 1_800_000_000 * NS
SGEMM = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
WINDOWS = (60, 120, 300, 600, 900, 1800, 3600)


class _Resp:
    def __init__(self, status, body):
        self.status_code = status
        self.headers = {}
        self.raw = io.BytesIO(body)
        self.raw.read = lambda n, decode_content=True, _r=self.raw.read: _r(n)

    def close(self):
        pass


class _HTTP:
    def __init__(self, app):
        self.client = Client(app)

    def post(self, url, data, headers, **kw):
        r = self.client.post("/api/v1/ingest", data=data, headers=headers)
        return _Resp(r.status_code, r.data)


def main():
    path = os.path.join(HERE, "schema3.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    t = [T0]
    clock = lambda: t[0]  # noqa: E731
    db = DB(path, clock=clock)
    app = make_app(db, ["key-a"])
    stores = []
    for iid in ("inst-1", "inst-2"):
        s = MetricStore(clock=clock)
        s.context.update({"instance.id": iid, "host.name": "gpu-box"})
        stores.append((s, Uploader(s, "key-a", "http://fleet", clock=lambda: 0.0, http=_HTTP(app))))
    rng = np.random.default_rng(3)
    le = [0.1, 0.5, 1.0, float("inf")]
    cum = [0, 0, 0, 0]
    for step in range(150):  # 25 simulated minutes, one upload every 10 s
        t[0] += 10 * NS
        minute = step // 6
        for k, (s, up) in enumerate(stores):
            tags = {"process.pid": str(7 + k)}
            if minute == 22 and step % 6 == 0:
                s.set_counter("myapp_requests_total", tags, 3)  # the source restarted
            else:
                s.add_counter("myapp_requests_total", tags, 5 + k)
            s.set_gauge("gpu_utilization_percent", {"device.index": str(k)}, (step * 7) % 100)
            if not 8 <= minute < 10:  # two quiet minutes
                s.add_histogram_values("myapp_latency_nanoseconds", {}, rng.integers(1000, 1 << 24, 20).astype(np.uint64))
            frames = [(SGEMM, 900 + step, 3), (FILL, 100, 1)]
            if minute >= 5:
                frames.append(("_Z6kernelAv", 50 * step, 2))
            s.add_profile("cuda_kernels_nanoseconds", tags, frames)
            s.add_profile("probe_ops_nanoseconds", tags, [("op%d" % (step % 3), 10, 1)])
            if minute == 15 and step % 6 == 0:
                cum = [0, 0, 0, 0]  # the engine restarted
            add = rng.integers(0, 4, 4)
            cum = [c + int(a) for c, a in zip(np.cumsum(add), cum)]
            cum = list(np.maximum.accumulate(cum))
            s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {"model_name": "m"}, int(cum[-1]),
                                    float(sum(cum)) / 3, le, [int(c) for c in cum])
            assert up.step()
    c = Client(app)
    answers = {}
    for iid in ("inst-1", "inst-2"):
        for w in (None,) + WINDOWS:
            url = "/api/v1/signals?instance_id=%s%s" % (iid, "&window=%d" % w if w else "")
            r = c.get(url, headers={"X-API-Key": "key-a"})
            assert r.status_code == 200, r.data
            answers[url] = orjson.loads(r.data)
    answers["/api/v1/instances"] = orjson.loads(c.get("/api/v1/instances", headers={"X-API-Key": "key-a"}).data)
    db.checkpoint()
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    with open(os.path.join(HERE, "schema3_answers.json"), "wb") as f:
        f.write(orjson.dumps(answers, option=orjson.OPT_SORT_KEYS) + b"\n")


if __name__ == "__main__":
    main()
