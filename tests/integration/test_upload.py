"""The uploader (only with GRAPHSIGNAL_API_KEY): what a body holds, what
is resent after a failure, backoff and its two log lines, the bounded
error buffer, the final upload's deadline; and graphsignal-run with and
without a key against a real local HTTP server as GRAPHSIGNAL_API_BASE."""
import gzip
import logging
import random
import subprocess
import sys
import time

import numpy as np
import orjson

from support.gsrun import GS_RUN, free_port, quiet_env, wait_for
from support.recorder import Recorder

from graphsignal import __version__
from graphsignal.sidecar import upload
from graphsignal.sidecar.periodic import PeriodicDriver
from graphsignal.sidecar.upload import Uploader
from graphsignal.sidecar.store import MetricStore

INGEST = "/api/v1/ingest"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def bodies(rec):
    out = []
    for r in rec.matching(INGEST):
        assert r["method"] == "POST"
        assert r["headers"]["Content-Encoding"] == "gzip"
        assert r["headers"]["Content-Type"] == "application/json"
        out.append(orjson.loads(gzip.decompress(r["body"])))
    return out


def store_with_data():
    s = MetricStore()
    s.context.update({"instance.id": "abc123", "host.name": "gpu-box"})
    s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 50)
    s.add_counter("myapp_requests_total", {"process.pid": "7"}, 3)
    s.set_resource("host", {}, {"cpu.count": 8})
    return s


def names(body):
    return sorted(m["name"] for m in body["metrics"])


def test_a_body_is_gzip_json_with_the_key_and_only_what_changed():
    with Recorder() as rec:
        s = store_with_data()
        up = Uploader(s, "k-123", rec.base, clock=Clock())
        assert up.step()
        (first,) = bodies(rec)
        r = rec.matching(INGEST)[0]
        assert r["headers"]["X-Api-Key"] == "k-123"
        assert first["schema"] == 2 and first["seq"] == 1
        assert first["instance_id"] == "abc123" and first["context"] == {"instance.id": "abc123",
                                                                         "host.name": "gpu-box"}
        assert first["profiler"] == {"version": __version__}
        assert names(first) == ["gpu_utilization_percent", "myapp_requests_total"]
        assert [r["kind"] for r in first["resources"]] == ["host"]
        assert first["errors"] == [] and first["dropped_errors"] == 0
        # nothing changed: no metrics, no resources, but still a body (the instance is alive)
        assert up.step()
        second = bodies(rec)[1]
        assert second["seq"] == 2 and names(second) == ["graphsignal_upload_bytes_total",
                                                        "graphsignal_uploads_total"]
        assert "resources" not in second
        # one gauge moves, one error is logged, a resource changes
        s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 70)
        s.add_error("error", "CUDA error: out of memory", tags={"process.pid": "7"})
        s.set_resource("process", {"process.pid": "7"}, {"process.command_line": "python app.py"})
        assert up.step()
        third = bodies(rec)[2]
        assert "gpu_utilization_percent" in names(third) and "myapp_requests_total" not in names(third)
        assert [e["message"] for e in third["errors"]] == ["CUDA error: out of memory"]
        assert sorted(r["kind"] for r in third["resources"]) == ["host", "process"]
        # set again to the same value: not resent
        s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 70)
        assert up.step()
        assert "gpu_utilization_percent" not in names(bodies(rec)[-1])
        # the same error again is a count of 2: resent once with its new count
        s.add_error("error", "CUDA error: out of memory", tags={"process.pid": "7"})
        assert up.step()
        assert [(e["message"], e["count"]) for e in bodies(rec)[-1]["errors"]] == [("CUDA error: out of memory", 2)]
        assert up.step()
        assert bodies(rec)[-1]["errors"] == []


def test_text_that_was_not_utf8_is_uploaded_as_replacement_characters():
    with Recorder() as rec:
        s = store_with_data()
        s.set_resource("process", {"process.pid": "7"}, {"process.command_line": "python a.py \udcff"})
        s.add_error("error", "bad \udcfe", tags={"process.pid": "7"})
        up = Uploader(s, "k", rec.base, clock=Clock())
        assert up.step()
        (body,) = bodies(rec)
        assert [r["attributes"]["process.command_line"] for r in body["resources"] if r["kind"] == "process"] == [
            "python a.py \ufffd"]
        assert [e["message"] for e in body["errors"]] == ["bad \ufffd"]


def test_failures_back_off_and_say_one_line_each_way(caplog):
    state = {"status": 503}
    with Recorder(lambda req: (state["status"], b'{"error": "overloaded"}')) as rec:
        s = store_with_data()
        clock = Clock()
        # the largest draw of the jitter, so the waits are its ceilings (test_retry.py
        # holds the draws themselves)
        up = Uploader(s, "k", rec.base, clock=clock, rand=lambda: 1.0)
        tries = []
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for _ in range(300):  # 150 s of cycles, every half second
                n = len(rec.matching(INGEST))
                up.step()
                if len(rec.matching(INGEST)) > n:
                    tries.append(clock.t)
                clock.t += 0.5
            gaps = [b - a for a, b in zip(tries, tries[1:])]
            assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0] and set(gaps[6:]) == {30.0}
            failing = [r.getMessage() for r in caplog.records if r.module in ("upload", "retry")]
            assert len(failing) == 1 and "failing: HTTP 503 (overloaded)" in failing[0], failing
            # what changed during the outage arrives with the first accepted upload
            s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 99)
            state["status"] = 200
            clock.t = up.next_try
            assert up.step()
        lines = [r.getMessage() for r in caplog.records if r.module in ("upload", "retry")]
        assert len(lines) == 2 and "recovered after %d failed attempts" % len(tries) in lines[1], lines
        last = bodies(rec)[-1]
        got = {m["name"]: m["stats"] for m in last["metrics"]}
        assert got["gpu_utilization_percent"] == {"value": 99} and "myapp_requests_total" in got
        assert [e["message"] for e in last["errors"]] == [lines[0].split("graphsignal: ", 1)[1]]
        failed = s.lookup("graphsignal_uploads_total", "counter", {"result": "failed"})[0].total
        assert failed == len(tries)
        # and back to once per cycle
        clock.t += 0.5
        assert up.step()


def test_jittered_backoff_stays_under_its_ceilings_against_a_real_server():
    with Recorder(lambda req: (503, b"{}")) as rec:
        clock = Clock()
        up = Uploader(store_with_data(), "k", rec.base, clock=clock, rand=random.Random(11).random)
        tries = []
        for _ in range(400):  # 100 s of quarter-second cycles
            n = len(rec.matching(INGEST))
            up.step()
            if len(rec.matching(INGEST)) > n:
                tries.append(clock.t)
            clock.t += 0.25
        gaps = [b - a for a, b in zip(tries, tries[1:])]
        ceilings = [min(30.0, 2.0 ** i) for i in range(len(gaps))]
        # each wait is a draw between 0 and its ceiling, seen by a quarter-second cycle
        assert all(g <= c + 0.25 for g, c in zip(gaps, ceilings)), list(zip(gaps, ceilings))
        assert len(set(gaps)) > 3  # not the fixed doubling of old


def test_a_refused_key_is_one_line_then_a_try_every_few_minutes_until_a_rotated_key_is_accepted(caplog):
    state = {"status": 401}
    with Recorder(lambda req: (state["status"], b'{"error": "unknown API key"}')) as rec:
        s = store_with_data()
        clock = Clock()
        up = Uploader(s, "old-key", rec.base, clock=clock, rand=random.Random(2).random)
        tries = []
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for i in range(3600):  # an hour of one-second cycles (the thread's pace)
                if i == 2000:
                    state["status"] = 200  # the key was added on the server
                n = len(rec.matching(INGEST))
                accepted = up.step()
                if len(rec.matching(INGEST)) > n:
                    tries.append((clock.t, accepted))
                clock.t += 1.0
        refused = [t for t, ok in tries if not ok]
        gaps = [b - a for a, b in zip(refused, refused[1:])]
        assert len(refused) >= 6 and all(240 <= g <= 301 for g in gaps), gaps  # minutes apart, not a hammer
        first_ok = next(t for t, ok in tries if ok)
        assert 1000 + 2000 <= first_ok <= 1000 + 2000 + 301  # healed within one slow retry of the fix
        assert all(ok for t, ok in tries if t > first_ok)  # and back to once a cycle
        assert len([t for t, _ in tries if t > first_ok]) > 500
        lines = [r.getMessage() for r in caplog.records if r.module in ("upload", "retry")]
        assert len(lines) == 2, lines
        assert "HTTP 401: the API key was not accepted (check GRAPHSIGNAL_API_KEY)" in lines[0]
        assert "every 4 to 5 minutes" in lines[0]
        assert "recovered after %d failed attempts" % len(refused) in lines[1]
        assert sum("API key was not accepted" in e["message"] for e in s.errors) == 1


def test_a_forbidden_key_waits_as_long_and_a_busy_server_is_given_its_retry_after():
    with Recorder(lambda req: (403, b"{}")) as rec:
        clock = Clock()
        up = Uploader(store_with_data(), "k", rec.base, clock=clock, rand=lambda: 0.0)
        assert not up.step()
        assert up.next_try - clock.t >= 240
    from werkzeug.wrappers import Response

    class Busy(Recorder):
        def app(self, environ, start_response):
            Recorder.app(self, environ, lambda *a, **k: None)
            return Response(b'{"error": "busy"}', status=503, headers={"Retry-After": "90"})(environ, start_response)

    with Busy() as rec:
        clock = Clock()
        up = Uploader(store_with_data(), "k", rec.base, clock=clock, rand=lambda: 0.0)
        assert not up.step()
        assert up.next_try - clock.t == 90.0


def test_the_error_buffer_is_bounded_drops_the_oldest_and_counts():
    state = {"status": 503}
    with Recorder(lambda req: (state["status"], b"{}")) as rec:
        s = store_with_data()
        clock = Clock()
        up = Uploader(s, "k", rec.base, clock=clock)
        for i in range(1500):
            s.add_error("error", "failure %d" % i)
            if i % 50 == 0:
                up.step()  # once a "second": the store keeps only its latest 100 errors
                clock.t += 0.1
        up.step()
        state["status"] = 200
        clock.t = up.next_try
        assert up.step()
        last = bodies(rec)[-1]
        messages = [e["message"] for e in last["errors"]]
        assert len(messages) == upload.MAX_PENDING_ERRORS
        assert messages[-1] == "failure 1499"
        assert last["dropped_errors"] == 1500 + 1 - upload.MAX_PENDING_ERRORS  # + the "failing" line
        assert s.lookup(upload.DROPPED_METRIC)[0].total == last["dropped_errors"]
        assert messages == sorted(messages, key=lambda m: int(m.split()[-1]) if m.startswith("failure ") else -1)


def test_the_final_upload_keeps_its_deadline_when_the_server_hangs():
    with Recorder(lambda req: (time.sleep(30), (200, b"{}"))[1]) as rec:
        t = PeriodicDriver(Uploader(store_with_data(), "k", rec.base, interval=3600))
        t.start()
        t0 = time.monotonic()
        t.stop(upload.FINAL_DEADLINE)
        took = time.monotonic() - t0
        assert wait_for(lambda: rec.matching(INGEST), 30)  # the final upload was sent
    assert took < 10, took  # far below the 30 s the server would have taken


def test_a_bad_key_or_base_is_one_line_and_no_uploads(caplog):
    s = MetricStore()
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        assert upload.start(s, "k", "ftp://example.com") is None
        assert upload.start(s, "k\r\nX-Evil: 1") is None
        assert upload.start(s, "  ") is None
        assert upload.start(s, None) is None
    assert len(caplog.records) == 2
    assert "GRAPHSIGNAL_API_BASE" in caplog.records[0].getMessage()
    assert "GRAPHSIGNAL_API_KEY" in caplog.records[1].getMessage()


# -- graphsignal-run --------------------------------------------------------------------------------------------------
CHILD = """
import sys, time
from graphsignal import probes
c = probes.counter("myapp_requests_total")
for i in range(%d):
    c.add(1)
    time.sleep(0.01)
sys.exit(%d)
"""


def run_under(env, n=150, code=0, timeout=120):
    return subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", CHILD % (n, code)],
                          env=env, capture_output=True, timeout=timeout)


def test_without_a_key_nothing_ever_connects_to_the_upload_endpoint():
    with Recorder() as rec:
        env = quiet_env(GRAPHSIGNAL_API_BASE=rec.base, GRAPHSIGNAL_DISABLE_VERSION_CHECK="")
        env.pop("GRAPHSIGNAL_API_KEY", None)
        proc = run_under(env)
        assert proc.returncode == 0, proc.stderr
        # the version check is the only thing that may ask, and it carries no key
        assert wait_for(lambda: rec.paths(), 30)
        assert set(rec.paths()) == {"/api/v1/version"}
        assert all("X-Api-Key" not in r["headers"] for r in rec.requests)


def test_graphsignal_run_uploads_and_the_final_upload_carries_the_exit(tmp_path):
    with Recorder() as rec:
        env = quiet_env(GRAPHSIGNAL_API_BASE=rec.base, GRAPHSIGNAL_API_KEY="secret-key")
        proc = run_under(env, n=250, code=3)
        assert proc.returncode == 3 and proc.stdout == b"", proc.stderr
        got = bodies(rec)
        assert len(got) >= 2
        assert len({b["instance_id"] for b in got}) == 1
        assert [b["seq"] for b in got] == list(range(1, len(got) + 1))
        totals = [m["stats"]["total"] for b in got for m in b["metrics"] if m["name"] == "myapp_requests_total"]
        assert totals == sorted(totals) and totals[-1] == 250  # the final upload has the final count
        # errors travel once, in the first upload after they happened: the
        # exit's entry is in the final upload, or in a periodic one that
        # caught it just before the final one was made
        with_exit = [i for i, b in enumerate(got) if any("exited with code 3" in e["message"] for e in b["errors"])]
        assert len(with_exit) == 1 and with_exit[0] >= len(got) - 2, (with_exit, len(got))
        assert all(r["headers"]["X-Api-Key"] == "secret-key" for r in rec.matching(INGEST))


def test_a_hung_upload_endpoint_never_holds_the_workload_or_the_exit():
    with Recorder(lambda req: (time.sleep(60), (200, b"{}"))[1]) as rec:
        env = quiet_env(GRAPHSIGNAL_API_BASE=rec.base, GRAPHSIGNAL_API_KEY="k")
        t0 = time.monotonic()
        proc = run_under(env, n=100, code=0)
        took = time.monotonic() - t0
        assert proc.returncode == 0 and proc.stdout == b"", proc.stderr
    assert took < 40, took  # the endpoint would have held each request for 60 s


def test_a_body_is_the_signals_document_of_its_snapshot_with_each_series_state():
    from graphsignal.sidecar.payload import render
    from graphsignal.sidecar.upload import series_json

    s = store_with_data()
    s.add_error("error", 'a "quoted", "metrics":[ message')
    s.context["odd"] = ',"metrics":['
    s.add_histogram_values("lat_nanoseconds", {}, np.array([1000, 2000, 3000], dtype=np.uint64))
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {}, 4, 2.0, [0.1, 1.0, float("inf")], [1, 3, 4])
    s.add_profile("cuda_kernels_nanoseconds", {}, [("gemm", 1000, 2), ("add", 10, 1)])
    snap = s.snapshot(encode=True)
    with Recorder() as rec:
        assert Uploader(s, "k", rec.base, clock=Clock()).export(snap)
        (doc,) = bodies(rec)
    full = orjson.loads(render(snap))
    states = {m["name"]: m.pop("state") for m in doc["metrics"]}
    assert doc.pop("metrics") == full.pop("metrics")
    for key in ("profiler", "payload_ns", "start_ns", "ended_ns", "exit_status", "context", "errors", "resources",
                "engine"):
        assert doc[key] == full[key], key
    # the states as the sidecar's history keeps them, in windowmath's JSON form
    assert states["gpu_utilization_percent"] == 50 and states["myapp_requests_total"] == 3
    assert states["cuda_kernels_nanoseconds"] == {}  # its stats list every frame it has
    count, total, bins = states["lat_nanoseconds"]
    assert (count, total) == (3, 6000) and sum(bins["counts"]) == 3 and len(bins["idx"]) == 3
    assert states["vllm:e2e_request_latency_seconds"] == [4, 2.0, {"le": [0.1, 1.0, None], "counts": [1, 2, 1]}]
    # a view's body entry is built once: the same series again is the same bytes
    v = next(v for v in snap.series if v.name == "cuda_kernels_nanoseconds")
    assert series_json(v, snap.max_frames) == series_json(v, snap.max_frames)


def test_the_server_joins_a_profiles_listed_frames_and_the_rest_into_its_exact_state():
    from graphsignal.fleet.rows import upload_state
    from graphsignal.sidecar.series import MAX_FRAMES_KEPT
    from graphsignal.sidecar.upload import series_json

    s = MetricStore()
    # past the frames a profile keeps: the store's own "(other)" holds the last 7 names
    s.add_profile("p_nanoseconds", {}, [("f%05d" % i, i % 977 + 1, 1) for i in range(MAX_FRAMES_KEPT + 7)])
    s.add_profile("q_nanoseconds", {}, [("a", 5, 1), ("(other)", 3, 1)])  # under the cut: stats say it all
    snap = s.snapshot(encode=True)
    for v in snap.series:
        m = orjson.loads(series_json(v, snap.max_frames))
        state = {k: list(x) for k, x in v.state.items()}
        assert len(m["state"]) == (len(state) - 249 if len(state) > snap.max_frames else 0)
        assert upload_state(m) == state, v.name
    assert "(other)" in next(v for v in snap.series if v.name == "p_nanoseconds").state


def test_a_series_set_again_to_its_value_is_not_resent_but_another_with_that_value_is():
    with Recorder() as rec:
        s = store_with_data()
        up = Uploader(s, "k", rec.base, clock=Clock())
        assert up.step()
        s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 50)  # again: a new view, the same value
        s.set_gauge("gpu_utilization_percent", {"device.index": "1"}, 50)  # another series, the same value
        assert up.step()
        got = [(m["name"], m["tags"]) for m in bodies(rec)[-1]["metrics"] if m["name"].startswith("gpu_")]
        assert got == [("gpu_utilization_percent", {"device.index": "1"})]


def test_a_profile_is_resent_when_a_frame_past_the_cut_grows_with_the_rest_that_makes_it_exact():
    from graphsignal.fleet.rows import upload_state

    with Recorder() as rec:
        s = MetricStore()
        s.add_profile("p_nanoseconds", {}, [("f%04d" % i, 1000 - i, 1) for i in range(400)])
        up = Uploader(s, "k", rec.base, clock=Clock())
        assert up.step()
        s.add_profile("p_nanoseconds", {}, [("f0399", 0, 0)])  # touched, its value as it was: not resent
        assert up.step()
        s.add_profile("p_nanoseconds", {}, [("f0399", 5, 1)])  # a frame the stats fold into "(other)"
        assert up.step()
        sent = [[m for m in b["metrics"] if m["name"] == "p_nanoseconds"] for b in bodies(rec)]
        assert [len(m) for m in sent] == [1, 0, 1]
        (m,) = sent[2]
        assert m["state"]["f0399"] == [606, 2] and upload_state(m)["f0399"] == [606, 2]


def test_credentials_in_the_api_base_never_reach_a_line_or_an_entry(caplog):
    from graphsignal.sidecar.payload import build_signals

    s = store_with_data()
    with caplog.at_level(logging.DEBUG, logger="graphsignal"):
        up = Uploader(s, "k", "http://user:SECRETPW@127.0.0.1:1", clock=Clock())
        up.step(timeout=(0.5, 0.5))
        assert upload.start(s, "k", "ftp://user:SECRETPW@h/?token=SECRETQ") is None
    said = caplog.text + build_signals(s).decode()
    assert "127.0.0.1:1" in said and "SECRET" not in said
