"""GET /metrics: the Prometheus exposition of every signal (names, units,
labels, profiles, histograms, engine metrics), in-process with
werkzeug.test.Client and read back with prometheus_client's parsers."""
import logging
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text
from werkzeug.test import Client

from graphsignal import config
from graphsignal.sidecar.server import make_app
from graphsignal.sidecar import exposition
from graphsignal.sidecar.exposition import Exposition
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINES = os.path.join(ROOT, "tests", "data", "engines")
OPENMETRICS = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75," \
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"  # what Prometheus 2.x sends


def scrape(store, accept=None, query="", exp=None):
    r = Client(make_app(store, exposition=exp)).get("/metrics" + query, headers={"Accept": accept} if accept else {})
    assert r.status_code == 200, r.data
    return r


def families(store, **kw):
    text = scrape(store, **kw).get_data(as_text=True)
    return {f.name: f for f in parse_text(text)}


def samples(fams, name):
    return [(s.name, s.labels, s.value) for f in fams.values() for s in f.samples if s.name == name]


def test_names_units_and_labels_follow_prometheus_conventions():
    s = MetricStore()
    s.set_gauge("gpu_utilization_percent", {"device.uuid": "GPU-1", "device.index": "0"}, 87)
    s.set_counter("cuda_memcpy_bytes", {"kind": "host_to_device"}, 4096)
    s.set_counter("prometheus_scrape_failures_total", {"url": "http://x/metrics"}, 2)
    s.set_gauge("prometheus_scrape_timestamp_ns", {}, 1_700_000_000_500_000_000)
    s.add_counter("graphsignal_dropped_records", {"writer": "cupti"}, 3)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "42"}, [("gemm", 3_000_000_000, 10), ("add", 5, 1)])
    s.set_gauge("gpu_fan_speed_percent", {}, None)
    fams = families(s)
    assert fams["graphsignal_gpu_utilization_percent"].type == "gauge"
    assert samples(fams, "graphsignal_gpu_utilization_percent") == [
        ("graphsignal_gpu_utilization_percent", {"device_index": "0", "device_uuid": "GPU-1"}, 87.0)]
    assert fams["graphsignal_cuda_memcpy_bytes"].type == "counter"
    assert samples(fams, "graphsignal_cuda_memcpy_bytes_total")[0][2] == 4096
    # a name's own _total and graphsignal_ prefix are not doubled
    assert samples(fams, "graphsignal_prometheus_scrape_failures_total")[0][2] == 2
    assert samples(fams, "graphsignal_dropped_records_total")[0][1] == {"writer": "cupti"}
    # epoch nanoseconds become seconds
    assert samples(fams, "graphsignal_prometheus_scrape_timestamp_seconds")[0][2] == 1_700_000_000.5
    kern = samples(fams, "graphsignal_cuda_kernels_seconds_total")
    assert kern == [("graphsignal_cuda_kernels_seconds_total", {"frame": "gemm", "process_pid": "42"}, 3.0),
                    ("graphsignal_cuda_kernels_seconds_total", {"frame": "add", "process_pid": "42"}, 5e-9)]
    assert [x[2] for x in samples(fams, "graphsignal_cuda_kernels_seconds_count_total")] == [10, 1]
    # null is "not measured": no sample, not a zero
    assert samples(fams, "graphsignal_gpu_fan_speed_percent") == []


def test_probe_histograms_become_exact_power_of_two_buckets():
    s = MetricStore()
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.integers(0, 40, 200), rng.integers(1000, 1 << 34, 5000), [1 << 20, (1 << 20) - 1]])
    s.add_histogram_values("myengine_step_duration_nanoseconds", {"stage": "decode"}, values.astype(np.uint64))
    s.add_histogram_values("myengine_batch_tokens", {}, np.array([1, 2, 64, 64, 65, 1000], dtype=np.uint64))
    fams = families(s)
    fam = fams["graphsignal_myengine_step_duration_seconds"]
    assert fam.type == "histogram"
    buckets = [(x.labels["le"], x.value) for x in fam.samples if x.name.endswith("_bucket")]
    assert buckets[-1] == ("+Inf", values.size)
    finite = buckets[:-1]
    assert 2 <= len(finite) <= 65
    les = [float(le) for le, _ in finite]
    for le, count in zip(les, [c for _, c in finite]):
        k = round(math.log2(le * 1e9 + 1))
        assert abs(le - ((1 << k) - 1) / 1e9) < 1e-15  # le = 2**k - 1 ns, in seconds
        assert count == int(np.count_nonzero(values <= (1 << k) - 1))  # exact, not interpolated
    assert les == sorted(les) and [c for _, c in finite] == sorted(c for _, c in finite)
    total = [x.value for x in fam.samples if x.name.endswith("_sum")][0]
    assert total == pytest.approx(int(values.sum()) / 1e9)
    # a unitless histogram keeps its unit; 64 is <= 2**7 - 1, 65 too, 1000 needs 2**10 - 1
    tok = {x.labels["le"]: x.value for x in fams["graphsignal_myengine_batch_tokens"].samples
           if x.name.endswith("_bucket")}
    assert tok["1.0"] == 1 and tok["3.0"] == 2 and tok["127.0"] == 5 and tok["1023.0"] == 6


def test_profiles_export_the_top_frames_by_value(monkeypatch, caplog):
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"},
                  [("k%03d" % i, 1000 + i, 1) for i in range(300)])
    top = samples(families(s), "graphsignal_cuda_kernels_seconds_total")
    assert len(top) == exposition.DEFAULT_TOP_FRAMES == 50
    assert [x[1]["frame"] for x in top] == ["k%03d" % i for i in range(299, 249, -1)]
    exp = Exposition.from_settings(s, config.from_environ({"GRAPHSIGNAL_METRICS_TOP_FRAMES": "5"}))
    assert len(samples(families(s, exp=exp), "graphsignal_cuda_kernels_seconds_count_total")) == 5
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        exp = Exposition.from_settings(s, config.from_environ({"GRAPHSIGNAL_METRICS_TOP_FRAMES": "lots"}))
    assert exp.top_frames == 50 and "GRAPHSIGNAL_METRICS_TOP_FRAMES" in caplog.text


def fixture_text(name):
    with open(os.path.join(ENGINES, name), encoding="utf-8") as f:
        text = f.read()
    # the vLLM docs elide parts with "..." lines (the fixture's SOURCE line says to strip them)
    return "\n".join(line for line in text.splitlines() if line.strip() != "...")


def _engine_store(fixture):
    s = MetricStore()
    try:
        parsed = prometheus.parse_exposition(fixture_text(fixture))
    except ValueError:
        pytest.skip("%s is not an exposition (an engine's error page)" % fixture)
    keys = prometheus.apply(s, parsed)
    s.set_gauge("prometheus_scrape_up", {"url": "http://127.0.0.1:8001/metrics"}, 1)
    s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 50)
    return s, keys


@pytest.mark.parametrize("fixture", sorted(f for f in os.listdir(ENGINES) if f.endswith(".txt")))
def test_engine_metrics_are_re_exported_only_when_asked(fixture):
    s, keys = _engine_store(fixture)
    exp = Exposition(s, engine_keys=lambda: keys)
    plain = families(s, exp=exp)
    assert set(plain) == {"graphsignal_prometheus_scrape_up", "graphsignal_gpu_utilization_percent"}
    for query, e in (("?engine=1", exp), ("", Exposition.from_settings(
            s, config.from_environ({"GRAPHSIGNAL_METRICS_ENGINE": "1"}), lambda: keys))):
        for accept, parse in ((None, parse_text), (OPENMETRICS, parse_om)):
            text = scrape(s, accept, query, e).get_data(as_text=True)
            fams = {f.name: f for f in parse(text)}  # prometheus_client's own parsers accept it
            engine = {n for n in fams if n not in plain}
            assert engine == {exposition.family_name(n, t)[0] for n, t, _ in keys}
            for n, t, _ in keys:
                want = {"gauge": ("gauge", "unknown"), "counter": ("counter",), "histogram": ("histogram", "summary")}
                assert fams[exposition.family_name(n, t)[0]].type in want[t]


def test_engine_histogram_keeps_the_engines_buckets():
    s, keys = _engine_store("vllm_1.txt")
    fams = families(s, query="?engine=1", exp=Exposition(s, engine_keys=lambda: keys))
    ttft = fams["graphsignal_vllm_time_to_first_token_seconds"]
    les = [x.labels["le"] for x in ttft.samples if x.name.endswith("_bucket")]
    raw = [f for f in parse_text(fixture_text("vllm_1.txt")) if f.name == "vllm:time_to_first_token_seconds"][0]
    want = [x.labels["le"] for x in raw.samples if x.name.endswith("_bucket")]
    finite = [float(x) for x in want if x != "+Inf"]
    assert [float(x) for x in les] == finite + [math.inf]


def test_labels_are_sanitized_and_clashing_names_are_counted():
    s = MetricStore()
    s.add_profile("myengine_ops_nanoseconds", {"frame": "mine", "__secret": "1", "9lives": "x", "a-b": "1"},
                  [("attention", 7, 1)])
    s.set_gauge("x_count", {}, 1)
    s.add_histogram_values("x", {}, np.array([3], dtype=np.uint64))
    s.set_gauge("dup", {}, 1)
    s.set_counter("dup", {}, 2)
    s.set_gauge("same", {"a.b": "1"}, 1)
    s.set_gauge("same", {"a_b": "1"}, 2)
    for accept, parse in ((None, parse_text), (OPENMETRICS, parse_om)):
        text = scrape(s, accept).get_data(as_text=True)
        fams = {f.name: f for f in parse(text)}
        ops = fams["graphsignal_myengine_ops_seconds"].samples[0]
        assert ops.labels == {"frame": "attention", "tag_frame": "mine", "tag___secret": "1", "_9lives": "x",
                              "a_b": "1"}
        assert "graphsignal_x" in fams and "graphsignal_x_count" not in fams
        conflicts = fams["graphsignal_metrics_conflicting_series"].samples[0].value
        assert conflicts == 3  # x_count (its name is x's _count), the second dup, the second "same"
        assert [x.value for x in fams["graphsignal_same"].samples] == [1.0]


def test_odd_frame_names_survive_escaping():
    s = MetricStore()
    odd = 'void k<"a\\b">(\n)'
    s.add_profile("cuda_kernels_nanoseconds", {}, [(odd, 10, 1), ("ünïcödé", 5, 1)])
    for accept, parse in ((None, parse_text), (OPENMETRICS, parse_om)):
        fams = {f.name: f for f in parse(scrape(s, accept).get_data(as_text=True))}
        got = [x.labels["frame"] for x in fams["graphsignal_cuda_kernels_seconds"].samples]
        assert got == [odd, "ünïcödé"]


def test_openmetrics_when_the_scraper_asks_for_it():
    s = MetricStore()
    s.set_counter("cuda_memcpy_bytes", {"kind": "device_to_host"}, 8)
    r = scrape(s, OPENMETRICS)
    assert r.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert r.data.endswith(b"# EOF\n")
    assert [f.name for f in parse_om(r.get_data(as_text=True))] == ["graphsignal_cuda_memcpy_bytes"]
    r = scrape(s)
    assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# EOF" not in r.data


def test_bad_engine_parameter_is_a_json_400():
    r = Client(make_app(MetricStore())).get("/metrics?engine=yes")
    assert r.status_code == 400 and "engine" in r.json["error"]


# -- the render cache against one plain prometheus_client call ---------------------------------------------------
OPS = st.lists(st.tuples(st.sampled_from(["gauge", "counter", "hist", "profile", "remove", "touch"]),
                         st.integers(0, 5), st.integers(0, 1 << 40)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_cached_render_is_byte_identical_to_one_prometheus_client_call(ops):
    s = MetricStore()
    exp = Exposition(s)
    for i, (op, idx, val) in enumerate(ops):
        tags = {"device.index": str(idx)}
        if op == "gauge":
            s.set_gauge("gpu_power_usage_watts", tags, float(val % 1000))
        elif op == "counter":
            s.add_counter("cuda_memcpy_bytes", tags, val)
        elif op == "hist":
            s.add_histogram_values("lat_nanoseconds", tags, np.array([val, val // 3], dtype=np.uint64))
        elif op == "profile":
            s.add_profile("cuda_kernels_nanoseconds", tags, [("k%d" % (val % 70), val, 1)])
        elif op == "remove":
            s.remove("gpu_power_usage_watts", "gauge", tags)
        else:
            with s.batch():
                for ser in s.series.values():
                    ser.touch(s.clock())  # touched, nothing changed
        for accept in (None, OPENMETRICS):
            encoder, _ = choose_encoder(accept or "")
            body, _ = exp.render(accept)
            assert body == encoder(exp.collector())


def test_a_family_named_as_another_familys_sample_is_left_out_and_counted():
    # a probe histogram x writes x_count; a probe counter x_count would be a
    # family of that name: OpenMetrics parsers refuse the page. The page lays
    # series out by name, so the histogram stays and the counter is left out,
    # whichever was written first.
    for first_counter in (False, True):
        s = MetricStore()
        if first_counter:
            s.add_counter("x_count", {}, 1)
        s.add_histogram_values("x", {}, np.array([3], dtype=np.int64))
        if not first_counter:
            s.add_counter("x_count", {}, 1)
        text = scrape(s, OPENMETRICS).get_data(as_text=True)
        fams = {f.name: f for f in parse_om(text)}  # raises on a clash
        assert samples(fams, "graphsignal_metrics_conflicting_series")[0][2] == 1
        assert "graphsignal_x" in fams and "graphsignal_x_count" not in fams
