"""OTLP/HTTP metric export (GRAPHSIGNAL_OTLP=1), against a real HTTP
receiver that decodes every request with opentelemetry-proto's own
ExportMetricsServiceRequest: names, units, attributes, resource, values,
temporality, headers; exact histogram buckets; the shared retry policy;
nothing sent without the opt-in; and graphsignal-run end to end."""
import gzip
import logging
import random
import sys

import numpy as np
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from support.gsrun import Release, free_port, quiet_env, run_wrapped
from support.recorder import Recorder

from graphsignal import __version__, config, histo
from graphsignal.sidecar import otlp, retry
from graphsignal.sidecar.otlp import Exporter
from graphsignal.sidecar.store import MetricStore

CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
SECRET = "s3cret-token-value"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def decode(r):
    body = r["body"]
    if r["headers"].get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return ExportMetricsServiceRequest.FromString(body)


def attrs(kvs):
    return {kv.key: kv.value.string_value for kv in kvs}


def by_name(req):
    (rm,) = req.resource_metrics
    (sm,) = rm.scope_metrics
    out = {}
    for m in sm.metrics:
        assert m.name not in out, "one Metric per name: %s" % m.name
        out[m.name] = m
    return out


def settings_for(base, **env):
    environ = {"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": base}
    environ.update(env)
    return config.from_environ(environ, ["python3", "serve.py"])


def workload_store():
    s = MetricStore()
    s.set_context(**{"instance.id": "run-1", "host.name": "gpu-box"})
    s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 50)
    s.set_gauge("gpu_temperature_celsius", {"device.index": "0"}, 61.5)
    s.set_gauge("gpu_power_usage_watts", {"device.index": "1"}, None)  # not measured: no point
    s.add_counter("myapp_requests_total", {"process.pid": "7"}, 3)
    s.add_counter("cuda_memcpy_bytes", {"process.pid": "7", "kind": "HtoD"}, 4096)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "7"}, [("gemm_kernel", 900, 3), ("relu", 100, 2)])
    s.add_histogram_values("myapp_latency_nanoseconds", {"route": "/v1"},
                           np.array([1000, 1100, 2500, 9000], dtype=np.uint64))
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {"model_name": "m"}, 10, 5.0,
                            [0.1, 1.0, float("inf")], [2, 9, 10])
    return s


ENGINE_KEY = ("vllm:e2e_request_latency_seconds", "histogram", (("model_name", "m"),))


def test_one_export_carries_names_units_attributes_values_temporality_and_headers(caplog):
    with Recorder() as rec:
        st = settings_for(rec.base, OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%%20%s,X-Scope-OrgID=team-a" % SECRET,
                          OTEL_RESOURCE_ATTRIBUTES="deployment.environment=prod,pod=from-otel",
                          GRAPHSIGNAL_TAGS="pod=p-1,k8s.namespace.name=ml", GRAPHSIGNAL_SERVICE="trainer",
                          OTEL_SERVICE_NAME="the-workloads-own")
        s = workload_store()
        clock = Clock()
        with caplog.at_level(logging.DEBUG, logger="graphsignal"):
            ex = Exporter(s, st, engine_keys=lambda: {ENGINE_KEY}, clock=clock)
            assert not ex.step()  # not due before one interval
            clock.t += st.otlp_interval
            assert ex.step()
        (r,) = rec.requests
        assert (r["method"], r["path"]) == ("POST", "/v1/metrics")
        assert r["headers"]["Content-Type"] == "application/x-protobuf"
        assert r["headers"]["Authorization"] == "Bearer " + SECRET  # percent-decoded, as OpenTelemetry's SDKs do
        assert r["headers"]["X-Scope-Orgid"] == "team-a"
        req = decode(r)
    assert SECRET not in caplog.text
    (rm,) = req.resource_metrics
    res = attrs(rm.resource.attributes)
    assert res == {"host.name": "gpu-box", "service.instance.id": "run-1", "deployment.environment": "prod",
                   "pod": "p-1", "k8s.namespace.name": "ml", "service.name": "trainer"}  # a tag wins over OTEL's
    (sm,) = rm.scope_metrics
    assert (sm.scope.name, sm.scope.version) == ("graphsignal", __version__)
    m = by_name(req)
    assert set(m) == {"graphsignal.gpu_utilization", "graphsignal.gpu_temperature", "graphsignal.myapp_requests", "graphsignal.cuda_memcpy_size", "graphsignal.cuda_kernels",
                      "graphsignal.cuda_kernels.samples", "graphsignal.myapp_latency"}  # the engine's: left out
    assert otlp.unit_of("gpu_power_usage_watts", "gauge") == ("graphsignal.gpu_power_usage", "W")
    units = {n: x.unit for n, x in m.items()}
    # OpenTelemetry's units: seconds, fractions in `1`, counts as {annotations}
    assert units == {"graphsignal.gpu_utilization": "1", "graphsignal.gpu_temperature": "Cel",
                     "graphsignal.myapp_requests": "{count}",
                     "graphsignal.cuda_memcpy_size": "By", "graphsignal.cuda_kernels": "s",
                     "graphsignal.cuda_kernels.samples": "{sample}", "graphsignal.myapp_latency": "s"}
    assert m["graphsignal.gpu_utilization"].description == "gpu_utilization_percent"
    # gauges: /signals' 50 % as the fraction the unit says
    (p,) = m["graphsignal.gpu_utilization"].gauge.data_points
    assert p.WhichOneof("value") == "as_double" and p.as_double == 0.5 and attrs(p.attributes) == {"device.index": "0"}
    assert p.time_unix_nano >= s.start_ns
    (p,) = m["graphsignal.gpu_temperature"].gauge.data_points
    assert p.as_double == 61.5
    assert "graphsignal.gpu_power_usage" not in m  # null: not measured, no point
    # counters: monotonic cumulative sums since the workload's start
    req_sum = m["graphsignal.myapp_requests"].sum
    assert req_sum.is_monotonic and req_sum.aggregation_temporality == CUMULATIVE
    (p,) = req_sum.data_points
    assert p.as_int == 3 and p.start_time_unix_nano == s.start_ns and p.time_unix_nano >= p.start_time_unix_nano
    assert attrs(p.attributes) == {"process.pid": "7"}
    (p,) = m["graphsignal.cuda_memcpy_size"].sum.data_points
    assert p.as_int == 4096 and attrs(p.attributes) == {"process.pid": "7", "kind": "HtoD"}
    # profiles: a sum per frame, value and samples
    prof = m["graphsignal.cuda_kernels"].sum
    assert prof.is_monotonic and prof.aggregation_temporality == CUMULATIVE
    assert {attrs(p.attributes)["frame"]: p.as_double for p in prof.data_points} == {
        "gemm_kernel": pytest.approx(900e-9), "relu": pytest.approx(100e-9)}
    assert {attrs(p.attributes)["frame"]: p.as_int
            for p in m["graphsignal.cuda_kernels.samples"].sum.data_points} == {"gemm_kernel": 3, "relu": 2}
    assert all(attrs(p.attributes)["process.pid"] == "7" for p in prof.data_points)
    # a probe histogram: exact count, sum, min, max; every value in its bucket
    h = m["graphsignal.myapp_latency"].histogram
    assert h.aggregation_temporality == CUMULATIVE
    (p,) = h.data_points
    assert p.count == 4  # nanoseconds sent as seconds:
    assert (p.sum, p.min, p.max) == (pytest.approx(13600e-9), pytest.approx(1000e-9), pytest.approx(9000e-9))
    assert attrs(p.attributes) == {"route": "/v1"} and p.start_time_unix_nano == s.start_ns
    assert len(p.bucket_counts) == len(p.explicit_bounds) + 1 and sum(p.bucket_counts) == 4
    assert list(p.explicit_bounds) == sorted(p.explicit_bounds)
    for v in (1000, 1100, 2500, 9000):
        i = next(i for i, b in enumerate(p.explicit_bounds) if v * 1e-9 <= b)
        assert p.bucket_counts[i] >= 1
    # 8 buckets per octave from 512 (the octave of 1000) to 16383 (that of 9000), plus the one below
    assert p.explicit_bounds[0] == 511 * 1e-9 and p.explicit_bounds[-1] == 16383 * 1e-9
    assert len(p.explicit_bounds) == 1 + 8 * 5


def test_the_engines_series_with_graphsignal_metrics_engine_keep_its_bounds():
    with Recorder() as rec:
        st = settings_for(rec.base, GRAPHSIGNAL_METRICS_ENGINE="1")
        clock = Clock()
        ex = Exporter(workload_store(), st, engine_keys=lambda: {ENGINE_KEY}, clock=clock)
        assert ex.step(force=True)
        m = by_name(decode(rec.requests[0]))
    e = m["graphsignal.vllm.e2e_request_latency"]
    assert e.unit == "s" and e.description == "vllm:e2e_request_latency_seconds"
    (p,) = e.histogram.data_points
    assert list(p.explicit_bounds) == [0.1, 1.0] and list(p.bucket_counts) == [2, 7, 1]
    assert (p.count, p.sum) == (10, 5.0) and not p.HasField("min")  # the engine says no min or max
    assert attrs(p.attributes) == {"model_name": "m"}


def test_histogram_bucket_counts_are_exact_and_interpolated_quantiles_agree():
    rng = np.random.default_rng(27)
    values = np.exp(rng.uniform(np.log(1e6), np.log(1e7), 20000)).astype(np.uint64)  # 1-10 ms in ns
    s = MetricStore()
    s.add_histogram_values("probe_duration_nanoseconds", {}, values)
    with Recorder() as rec:
        ex = Exporter(s, settings_for(rec.base), clock=Clock())
        assert ex.step(force=True)
        (p,) = by_name(decode(rec.requests[0]))["graphsignal.probe_duration"].histogram.data_points
    bounds, counts = list(p.explicit_bounds), list(p.bucket_counts)  # seconds
    ns_bounds = [round(b * 1e9) for b in bounds]
    assert all(b == n * 1e-9 for b, n in zip(bounds, ns_bounds))
    uppers = set(histo.BIN_UPPER.tolist())
    assert all(n in uppers for n in ns_bounds)  # every bound is an edge of the sidecar's bins
    edges = [-1] + ns_bounds + [float("inf")]
    exact = [int(((values > lo) & (values <= hi)).sum()) for lo, hi in zip(edges, edges[1:])]
    assert counts == exact and p.count == len(values) and p.sum == pytest.approx(float(int(values.sum())) * 1e-9)
    assert len(bounds) <= 8 * 5 + 1  # 2^19..2^24: bounded by the octaves spanned
    got = histo.quantiles_buckets(bounds + [float("inf")], counts, (0.5, 0.95, 0.99))  # histogram_quantile's way
    want = np.quantile(values, (0.5, 0.95, 0.99)) * 1e-9
    for g, w in zip(got, want):
        # within 5% (the bar /metrics is held to): 8 buckets per octave, so at the data's
        # edge a bucket is partly empty and linear interpolation strays by a few percent
        assert abs(g - w) / w < 0.05, (got, want)


def test_the_metrics_endpoint_is_used_as_given_and_the_body_gzipped_when_asked():
    with Recorder() as rec:
        st = config.from_environ({"GRAPHSIGNAL_OTLP": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                                  "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": rec.base + "/otlp/v1/metrics",
                                  "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "gzip",
                                  "OTEL_METRIC_EXPORT_INTERVAL": "5000"})
        assert st.otlp_interval == 5.0
        clock = Clock()
        ex = Exporter(workload_store(), st, clock=clock)
        clock.t += 5.0
        assert ex.step()
        (r,) = rec.requests
        assert r["path"] == "/otlp/v1/metrics" and r["headers"]["Content-Encoding"] == "gzip"
        assert "graphsignal.myapp_requests" in by_name(decode(r))
        assert not ex.step()  # the next one an interval later
        clock.t += 5.0
        assert ex.step() and len(rec.requests) == 2
    s = MetricStore()
    ex.store = s  # the counters of the exporter itself
    assert ex.exported == 2


def test_refused_credentials_are_one_line_then_a_try_every_few_minutes(caplog):
    state = {"status": 401}
    with Recorder(lambda req: (state["status"], b"")) as rec:
        st = settings_for(rec.base, OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer " + SECRET,
                          OTEL_METRIC_EXPORT_INTERVAL="10000")
        s = workload_store()
        clock = Clock()
        ex = Exporter(s, st, clock=clock, rand=random.Random(4).random)
        tries = []
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for i in range(1800):  # half an hour of one-second ticks
                if i == 1000:
                    state["status"] = 200
                n = len(rec.requests)
                ok = ex.step()
                if len(rec.requests) > n:
                    tries.append((clock.t, ok))
                clock.t += 1.0
        refused = [t for t, ok in tries if not ok]
        assert len(refused) >= 3 and all(240 <= b - a <= 301 for a, b in zip(refused, refused[1:])), refused
        oks = [t for t, ok in tries if ok]
        assert oks and oks[0] <= 1000 + 1000 + 301
        assert all(9 <= b - a <= 11 for a, b in zip(oks, oks[1:]))  # then the normal pace again
    lines = [r.getMessage() for r in caplog.records if r.module == "retry"]
    assert len(lines) == 2 and "HTTP 401" in lines[0] and "OTEL_EXPORTER_OTLP_[METRICS_]HEADERS" in lines[0], lines
    assert "recovered" in lines[1]
    assert SECRET not in caplog.text
    assert s.lookup(otlp.EXPORTS_METRIC, "counter", {"result": "failed"})[0].total == len(refused)


def test_a_failed_export_is_tried_again_sooner_but_never_later_than_the_interval():
    with Recorder(lambda req: (503, b"busy")) as rec:
        st = settings_for(rec.base, OTEL_METRIC_EXPORT_INTERVAL="10000")
        clock = Clock()
        ex = Exporter(MetricStore(), st, clock=clock, rand=lambda: 1.0)
        clock.t += 10
        waits = []
        for _ in range(7):
            assert not ex.step(force=True)
            waits.append(ex.next_export - clock.t)
        assert waits == [1, 2, 4, 8, 10, 10, 10]
        assert len(rec.requests) == 7


def test_without_graphsignal_otlp_nothing_is_sent_even_with_otel_variables_set(caplog):
    with Recorder() as rec:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": rec.base, "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=x", "OTEL_SERVICE_NAME": "svc",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            for off in ({}, {"GRAPHSIGNAL_OTLP": "0"}, {"GRAPHSIGNAL_OTLP": "no"}):
                st = config.from_environ(dict(otel, **off))
                assert not st.otlp and st.otlp_endpoint is None and st.otlp_headers == ()
                assert otlp.start(MetricStore(), st) is None
        said = [r.getMessage() for r in caplog.records if r.module != "server"]
        assert said == []  # the workload's OTEL_* are its own business: not even a line about grpc
        env = quiet_env(GRAPHSIGNAL_DISABLE_VERSION_CHECK="1", **otel)
        env.pop("GRAPHSIGNAL_OTLP", None)
        proc, signals = run_wrapped([sys.executable, "-c", "import time; time.sleep(2.5)"], env=env)
        assert proc.returncode == 0, proc.stderr
        assert signals["context"]["service.name"] == "svc"  # the identity is used locally all the same
        assert rec.requests == []


def test_a_bad_endpoint_or_a_missing_opentelemetry_proto_is_one_line_and_no_export(caplog, monkeypatch):
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        st = config.from_environ({"GRAPHSIGNAL_OTLP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector:4318"})
        s = MetricStore()
        assert st.otlp and st.otlp_endpoint is None
        assert otlp.start(s, st) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "OTEL_EXPORTER_OTLP_ENDPOINT is not an http(s) URL" in lines[0], lines
    assert [e["message"] for e in s.errors] == [lines[1].split("graphsignal: ", 1)[1]]
    caplog.clear()
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.metrics.v1", None)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        s = MetricStore()
        assert otlp.start(s, settings_for("http://127.0.0.1:9")) is None
    assert len(caplog.records) == 1 and "pip install 'graphsignal[otlp]'" in caplog.records[0].getMessage()
    assert len(s.errors) == 1


STEPS = """
import sys, time
from graphsignal import probes
c = probes.counter("myapp_requests_total", {"route": "/v1"})
h = probes.histogram("myapp_latency_nanoseconds")
for i in range(300):
    c.add(1)
    h.record(1000 + 37 * i)
    time.sleep(0.01)
"""
CHILD = STEPS + "sys.exit(3)\n"


def test_graphsignal_run_exports_otlp_end_to_end():
    with Recorder() as rec:
        env = quiet_env(GRAPHSIGNAL_OTLP="1", OTEL_EXPORTER_OTLP_ENDPOINT=rec.base + "/",
                        OTEL_METRIC_EXPORT_INTERVAL="1000", OTEL_EXPORTER_OTLP_HEADERS="X-Token=abc",
                        GRAPHSIGNAL_SERVICE="trainer", OTEL_SERVICE_NAME="ignored",
                        GRAPHSIGNAL_TAGS="pod=p-1,bad key=x,namespace=ml",
                        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=prod",
                        GRAPHSIGNAL_DISABLE_VERSION_CHECK="1", GRAPHSIGNAL_LOG_LEVEL="warning")
        # after its steps, the workload waits (at most 30 s) for a periodic export: the sidecar starts after it
        with Release(lambda: rec.matching("/v1/metrics")) as periodic:
            proc, signals = run_wrapped([sys.executable, "-c", STEPS + periodic.code + "sys.exit(3)\n"], env=env,
                                        listen_port=free_port())
        assert proc.returncode == 3, proc.stderr  # the workload's exit passes through
        assert proc.stderr.count(b"GRAPHSIGNAL_TAGS entry 'bad key=x'") == 1, proc.stderr
        reqs = rec.matching("/v1/metrics")
        assert len(reqs) >= 2, (rec.paths(), proc.stderr)  # periodic ones and the final one
        assert all(r["headers"]["X-Token"] == "abc" for r in reqs)
        decoded = [decode(r) for r in reqs]
    assert signals["context"]["service.name"] == "trainer"
    assert signals["context"]["tags"] == {"pod": "p-1", "namespace": "ml"}
    for req in decoded:
        res = attrs(req.resource_metrics[0].resource.attributes)
        assert res["service.name"] == "trainer" and res["pod"] == "p-1" and res["namespace"] == "ml"
        assert res["deployment.environment"] == "prod"
        assert res["service.instance.id"] == signals["context"]["instance.id"]
    totals = []
    for req in decoded:
        m = by_name(req)
        if "graphsignal.myapp_requests" in m:
            (p,) = m["graphsignal.myapp_requests"].sum.data_points
            assert attrs(p.attributes)["route"] == "/v1"
            totals.append((p.time_unix_nano, p.as_int))
    assert totals == sorted(totals) and totals[-1][1] == 300  # cumulative; the final export has the final count
    (p,) = by_name(decoded[-1])["graphsignal.myapp_latency"].histogram.data_points
    assert p.count == 300 and p.min == pytest.approx(1000e-9) and p.max == pytest.approx((1000 + 37 * 299) * 1e-9)
    (sig,) = [x for x in signals["metrics"] if x["name"] == "myapp_latency_nanoseconds"]
    assert p.sum == pytest.approx(sig["stats"]["sum"] * 1e-9)
    accepted = [x for x in signals["metrics"] if x["name"] == otlp.EXPORTS_METRIC]
    assert accepted and accepted[0]["tags"] == {"result": "accepted"}


def test_the_retry_policy_is_the_uploaders():
    # one policy, one module: the exporter's refused-credential wait is the uploader's
    assert retry.AUTH_MIN >= 60 and retry.AUTH_MAX >= retry.AUTH_MIN
    ex = Exporter(MetricStore(), settings_for("http://127.0.0.1:9"), clock=Clock(), rand=lambda: 0.0)
    assert isinstance(ex.retry, retry.Retry)
    assert ex.retry.delay(403) == retry.AUTH_MIN


def test_skills_otlp_name_table_is_what_the_exporter_sends():
    import os
    import re

    # graphsignal-run --explain otlp
    section = open(os.path.join(os.path.dirname(__file__), "..", "..", "graphsignal", "reference", "otlp.md")).read()
    rows = re.findall(r"^\| `([a-z_]+)`(?: \((\w+)\))?[^|]*\| `([a-z_.]+)`[^|]*\| `([^`]*)`", section, re.M)
    assert len(rows) >= 7, rows
    for name, type_, otlp_name, unit in rows:
        assert otlp.unit_of(name, type_ or "gauge") == (otlp_name, unit), (name, type_)


def test_a_receivers_error_status_message_is_in_the_failing_line(caplog):
    from werkzeug.wrappers import Response

    status = b"\x08\x03\x12\x1fmetric name has a bad character"  # google.rpc.Status{code: 3, message: ...}

    class Picky(Recorder):
        def app(self, environ, start_response):
            Recorder.app(self, environ, lambda *a, **k: None)
            return Response(status, status=400, content_type="application/x-protobuf")(environ, start_response)

    with Picky() as rec:
        with caplog.at_level(logging.WARNING, logger="graphsignal"):
            ex = Exporter(MetricStore(), settings_for(rec.base), clock=Clock(), rand=lambda: 0.0)
            assert not ex.step(force=True)
    (line,) = [r.getMessage() for r in caplog.records if r.module == "retry"]
    assert "HTTP 400 (metric name has a bad character)" in line


def test_a_hung_otlp_endpoint_never_holds_the_workload_or_its_exit():
    import time

    with Recorder(lambda req: (time.sleep(60), (200, b""))[1]) as rec:
        env = quiet_env(GRAPHSIGNAL_OTLP="1", OTEL_EXPORTER_OTLP_ENDPOINT=rec.base,
                        OTEL_METRIC_EXPORT_INTERVAL="1000", GRAPHSIGNAL_DISABLE_VERSION_CHECK="1")
        t0 = time.monotonic()
        proc, signals = run_wrapped([sys.executable, "-c", CHILD], env=env)
        took = time.monotonic() - t0
        assert proc.returncode == 3 and proc.stdout == b"", proc.stderr
        assert rec.requests  # it did try
    assert took < 40, took  # the endpoint would have held each export for 60 s
    assert signals is not None and signals["exit_status"] == 3


# -- the export at exit, without --output or GRAPHSIGNAL_LINGER ------------------------------------------------
SHORT_CHILD = """
import sys
from graphsignal import probes
c = probes.counter("myapp_requests_total", {"route": "/v1"})
for i in range(300):
    c.add(1)
print("done")
sys.exit(3)
"""


def _bare_env(**extra):
    """graphsignal-run's environment with nothing that keeps the sidecar
    after the exit but OTLP (the default 60 s interval: the export at exit
    is the run's only one)."""
    env = quiet_env(GRAPHSIGNAL_OTLP="1", GRAPHSIGNAL_DISABLE_VERSION_CHECK="1", GRAPHSIGNAL_LOG_LEVEL="warning",
                    **extra)
    for name in ("GRAPHSIGNAL_SIGNALS_FILE", "GRAPHSIGNAL_LINGER", "GRAPHSIGNAL_API_KEY",
                 "OTEL_METRIC_EXPORT_INTERVAL"):
        env.pop(name, None)
    return env


def _run_bare(env):
    import subprocess

    from support.gsrun import GS_RUN

    return subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", SHORT_CHILD], env=env,
                          capture_output=True, timeout=120)


def test_a_run_shorter_than_the_interval_exports_at_exit_without_output_or_linger():
    # before: the supervisor killed the sidecar at the exit (no --output, no linger, no key):
    # the only export of a short run never left, and nothing said so
    with Recorder() as rec:
        proc = _run_bare(_bare_env(OTEL_EXPORTER_OTLP_ENDPOINT=rec.base))
        reqs = rec.matching("/v1/metrics")
    assert (proc.returncode, proc.stdout) == (3, b"done\n"), proc.stderr  # the workload's exit and output pass through
    assert len(reqs) == 1, (len(reqs), proc.stderr)  # the export at exit, and only it
    (p,) = by_name(decode(reqs[0]))["graphsignal.myapp_requests"].sum.data_points
    assert p.as_int == 300 and attrs(p.attributes)["route"] == "/v1"  # in full
    assert b"OTLP" not in proc.stderr, proc.stderr


def test_a_collector_down_at_exit_is_one_line():
    # before: 0 of 4 such runs said anything; the export was lost in silence
    proc = _run_bare(_bare_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:%d" % free_port()))
    assert (proc.returncode, proc.stdout) == (3, b"done\n"), proc.stderr
    lines = [x for x in proc.stderr.decode().splitlines() if "OTLP" in x]
    assert len(lines) == 1, proc.stderr
    assert "the final OTLP export to http://127.0.0.1:" in lines[0] and "nothing of this run reached it" in lines[0]
    assert "connection refused" in lines[0], lines
