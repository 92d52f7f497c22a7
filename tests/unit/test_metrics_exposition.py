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
from graphsignal.naming.metrics import prometheus_name
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
    s.set_gauge("gpu_clock_sm_megahertz", {"device.index": "0"}, 1980)
    s.set_gauge("gpu_pcie_throughput_rx_kilobytes_per_second", {"device.index": "0"}, 2)
    s.set_counter("process_cpu_time_nanoseconds", {"process.pid": "42"}, 2_500_000_000)
    s.set_gauge("process_cpu_usage_percent", {"process.pid": "42"}, 250)
    s.set_gauge("process_memory_usage_bytes", {"process.pid": "42"}, 1 << 30)
    s.set_gauge("host_cpu_usage_percent", {}, 50)
    fams = families(s)
    assert fams["graphsignal_gpu_utilization_ratio"].type == "gauge"
    # fractions 0..1, DCGM exporter's labels
    assert samples(fams, "graphsignal_gpu_utilization_ratio") == [
        ("graphsignal_gpu_utilization_ratio", {"gpu": "0", "UUID": "GPU-1"}, 0.87)]
    assert samples(fams, "graphsignal_host_cpu_usage_ratio")[0][2] == 0.5
    assert samples(fams, "graphsignal_gpu_clock_sm_hertz")[0][2] == 1.98e9
    assert samples(fams, "graphsignal_gpu_pcie_rx_bytes_per_second")[0][2] == 2048
    assert fams["graphsignal_cuda_memcpy_bytes"].type == "counter"
    assert samples(fams, "graphsignal_cuda_memcpy_bytes_total")[0][2] == 4096
    # a name's own _total and graphsignal_ prefix are not doubled
    assert samples(fams, "graphsignal_prometheus_scrape_failures_total")[0][2] == 2
    assert samples(fams, "graphsignal_dropped_records_total")[0][1] == {"writer": "cupti"}
    # epoch nanoseconds become seconds
    assert samples(fams, "graphsignal_prometheus_scrape_timestamp_seconds")[0][2] == 1_700_000_000.5
    kern = samples(fams, "graphsignal_cuda_kernels_seconds_total")
    assert kern == [("graphsignal_cuda_kernels_seconds_total",
                     {"frame": "gemm", "kernel": "gemm", "category": "gemm", "pid": "42"}, 3.0),
                    ("graphsignal_cuda_kernels_seconds_total",
                     {"frame": "add", "kernel": "add", "category": "elementwise", "pid": "42"}, 5e-9)]
    # a count is named as a count, not as a time
    assert [x[2] for x in samples(fams, "graphsignal_cuda_kernel_launches_total")] == [10, 1]
    assert not any("seconds_count" in n for n in fams)
    # the workload's process metrics under client_python's names; CPU percent is rate() of the counter
    assert samples(fams, "graphsignal_process_cpu_seconds_total") == [
        ("graphsignal_process_cpu_seconds_total", {"pid": "42"}, 2.5)]
    assert samples(fams, "graphsignal_process_resident_memory_bytes")[0][2] == 1 << 30
    assert not any("percent" in n or n.startswith("graphsignal_process_cpu_usage") for n in fams)
    # null is "not measured": no sample, not a zero
    assert samples(fams, "graphsignal_gpu_fan_speed_ratio") == []
    # HELP says what a metric is, not its name
    text = scrape(s).get_data(as_text=True)
    helps = [line for line in text.splitlines() if line.startswith("# HELP")]
    assert helps and all(len(h.split(" ", 3)[3]) > 12 and h.split(" ", 3)[2] not in h.split(" ", 3)[3]
                         for h in helps)
    # OpenMetrics says the unit
    om = scrape(s, OPENMETRICS).get_data(as_text=True)
    assert "# UNIT graphsignal_cuda_kernels_seconds seconds" in om
    assert "# UNIT graphsignal_gpu_utilization_ratio ratio" in om


def test_gpu_info_and_identity_labels_join_with_dcgm():
    s = MetricStore()
    s.set_context(**{"host.name": "node-7"})
    s.set_resource("device", {"device.uuid": "GPU-1", "device.index": "0", "device.bus_id": "00000000:00:06.0"},
                   {"device.name": "NVIDIA H200", "driver_version": "580.1", "cuda_driver_version": "13.0"})
    s.set_gauge("gpu_power_usage_watts", {"device.uuid": "GPU-1", "device.index": "0",
                                          "device.bus_id": "00000000:00:06.0"}, 300)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "9", "device.uuid": "GPU-1", "device.cuda_index": "0"},
                  [("k", 5, 1)])
    s.set_gauge("host_cpu_usage_percent", {}, 5)
    exp = Exposition(s, identity={"service": "llama", "team": "infer"})
    for accept, parse in ((None, parse_text), (OPENMETRICS, parse_om)):
        fams = {f.name: f for f in parse(scrape(s, accept, exp=exp).get_data(as_text=True))}
        info = fams["graphsignal_gpu_info"].samples
        assert [(x.labels, x.value) for x in info] == [
            ({"gpu": "0", "UUID": "GPU-1", "pci_bus_id": "00000000:00:06.0", "model_name": "NVIDIA H200",
              "Hostname": "node-7", "driver_version": "580.1", "cuda_driver_version": "13.0",
              "service": "llama", "team": "infer"}, 1)]
        power = fams["graphsignal_gpu_power_usage_watts"].samples[0].labels
        assert power == {"gpu": "0", "UUID": "GPU-1", "pci_bus_id": "00000000:00:06.0", "model_name": "NVIDIA H200",
                         "Hostname": "node-7", "service": "llama", "team": "infer"}
        kern = fams["graphsignal_cuda_kernels_seconds"].samples[0].labels
        assert kern["UUID"] == "GPU-1" and kern["model_name"] == "NVIDIA H200" and kern["pid"] == "9"
        assert fams["graphsignal_host_cpu_usage_ratio"].samples[0].labels == {"service": "llama", "team": "infer"}
    # the run's identity from its settings; a tag named as a series' label leaves that label alone
    exp = Exposition.from_settings(s, config.from_environ({"GRAPHSIGNAL_SERVICE": "svc",
                                                           "GRAPHSIGNAL_TAGS": "pod=p-1,k8s.namespace=ml,gpu=x"}))
    fams = {f.name: f for f in parse_text(scrape(s, exp=exp).get_data(as_text=True))}
    assert fams["graphsignal_host_cpu_usage_ratio"].samples[0].labels == {
        "service": "svc", "pod": "p-1", "k8s_namespace": "ml", "gpu": "x"}
    assert fams["graphsignal_gpu_power_usage_watts"].samples[0].labels["gpu"] == "0"
    # a model that appears later lays the page out again
    s.set_resource("device", {"device.uuid": "GPU-2", "device.index": "1"}, {"device.name": "NVIDIA B200"})
    fams = {f.name: f for f in parse_text(scrape(s, exp=exp).get_data(as_text=True))}
    assert len(fams["graphsignal_gpu_info"].samples) == 2


def test_probe_histograms_become_exact_sub_octave_buckets():
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
    assert 2 <= len(finite) <= exposition.MAX_BUCKETS
    les = [float(le) for le, _ in finite]
    for le, count in zip(les, [c for _, c in finite]):
        edge = round(le * 1e9)
        assert abs(le - edge / 1e9) < 1e-15  # an integer number of ns, in seconds
        k = (edge + 1).bit_length() - 1  # an edge is 2**k + j * 2**k / 8 - 1
        step = max(1, (1 << k) // 8) if (edge + 1) != (1 << k) else 1
        assert (edge + 1) % step == 0 or (edge + 1) == 1 << k
        assert count == int(np.count_nonzero(values <= edge))  # exact, not interpolated
    assert les == sorted(les) and [c for _, c in finite] == sorted(c for _, c in finite)
    # values 35 octaves apart: 4 edges per octave (8 would be 280 buckets)
    octave = [le for le in les if (1 << 20) - 1 <= round(le * 1e9) <= (1 << 21) - 1]
    assert [round(le * 1e9) for le in octave] == [(1 << 20) - 1] + [(1 << 20) + j * (1 << 18) - 1
                                                                   for j in range(1, 5)]
    # a latency histogram of a few octaves: 8 edges per octave
    narrow = exposition.sub_octave_buckets([(1 << 20) + 5, (1 << 22) + 9], [3, 4])
    assert [le for le, _ in narrow][:9] == [(1 << 20) + j * (1 << 17) - 1 for j in range(1, 10)][:8] + [
        (1 << 21) + (1 << 18) - 1]
    assert narrow[0][1] == 3 and narrow[-1] == ((1 << 22) + (1 << 19) - 1, 7)
    total = [x.value for x in fam.samples if x.name.endswith("_sum")][0]
    assert total == pytest.approx(int(values.sum()) / 1e9)
    # a unitless histogram keeps its unit; small values get an edge each
    tok = {x.labels["le"]: x.value for x in fams["graphsignal_myengine_batch_tokens"].samples
           if x.name.endswith("_bucket")}
    assert tok["1.0"] == 1 and tok["2.0"] == 2 and tok["71.0"] == 5 and tok["1023.0"] == 6 and tok["+Inf"] == 6
    assert "64.0" not in tok and "63.0" in tok  # 64 and 65 share the bin [64, 71]


def test_a_wide_histogram_gets_fewer_buckets_per_octave():
    b = exposition.sub_octave_buckets([1, (1 << 50) - 1], [1, 1])
    assert len(b) <= exposition.MAX_BUCKETS + 1 and b[-1] == ((1 << 50) - 1, 2)
    assert b == exposition.sub_octave_buckets([1, (1 << 50) - 1], [1, 1], 8)
    assert exposition.sub_octave_buckets([3, 100], [1, 2], 1) == [(3, 1), (7, 1), (15, 1), (31, 1), (63, 1), (127, 3)]


def test_profiles_export_the_top_frames_by_value(monkeypatch, caplog):
    s = MetricStore()
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"},
                  [("k%03d" % i, 1000 + i, 1) for i in range(300)])
    top = samples(families(s), "graphsignal_cuda_kernels_seconds_total")
    assert len(top) == exposition.DEFAULT_TOP_FRAMES == 50
    assert [x[1]["frame"] for x in top] == ["k%03d" % i for i in range(299, 249, -1)]
    exp = Exposition.from_settings(s, config.from_environ({"GRAPHSIGNAL_METRICS_TOP_FRAMES": "5"}))
    assert len(samples(families(s, exp=exp), "graphsignal_cuda_kernel_launches_total")) == 5
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
    assert set(plain) == {"graphsignal_prometheus_scrape_up", "graphsignal_gpu_utilization_ratio"}
    for query, e in (("?engine=1", exp), ("", Exposition.from_settings(
            s, config.from_environ({"GRAPHSIGNAL_METRICS_ENGINE": "1"}), lambda: keys))):
        for accept, parse in ((None, parse_text), (OPENMETRICS, parse_om)):
            text = scrape(s, accept, query, e).get_data(as_text=True)
            fams = {f.name: f for f in parse(text)}  # prometheus_client's own parsers accept it
            engine = {n for n in fams if n not in plain}
            assert engine == {prometheus_name(n, t, True).name for n, t, _ in keys}
            for n, t, _ in keys:
                want = {"gauge": ("gauge", "unknown"), "counter": ("counter",), "histogram": ("histogram", "summary")}
                assert fams[prometheus_name(n, t, True).name].type in want[t]


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


def test_frame_line_heads_kept_across_renders_stay_right_when_the_frames_churn():
    # a profile whose shown frames keep changing: the heads the layout keeps
    # fill its cache past its bound (cleared then), and every render is
    # still what prometheus_client writes
    s = MetricStore()
    exp = Exposition(s, top_frames=50)
    tags = {"process.pid": "7"}
    for step in range(40):
        s.add_profile("cuda_kernels_nanoseconds", tags,
                      [("_Z6kernelILi%dEEvv" % (step * 50 + f), 10_000 + step * 100 + f, 1) for f in range(50)])
        s.add_profile("demo_stage_nanoseconds", tags, [('st"age\\%d' % (step % 7), 1000 + step, 1)])
        for accept in (None, OPENMETRICS):
            encoder, _ = choose_encoder(accept or "")
            body, _ = exp.render(accept)
            assert body == encoder(exp.collector()), step
    heads = [len(e[1].cache) for e in exp._states[False].entries if e[1] and e[1].type == "profile"]
    assert heads and max(heads) <= 4 * exposition.MAX_TOP_FRAMES + 1


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


def test_light_copies_export_under_the_cupti_collections_labels():
    """--cuda-trace light's copy counts per host memory are the same Prometheus samples as the CUPTI collection's
    copies (graphsignal_cuda_memcpy_calls_total{frame, host_memory}), so one query reads either."""
    def calls(metric):
        s = MetricStore()
        for mem, n in (("pinned", 7), ("pageable", 3)):
            value = n if metric == "cuda_memcpy_calls" else 1000 * n  # light's is a count profile
            s.add_profile(metric, {"process.pid": "42", "host_memory": mem}, [("host_to_device", value, n)])
            s.set_counter("cuda_memcpy_bytes", {"process.pid": "42", "host_memory": mem, "kind": "host_to_device"},
                          n << 20)
        fams = families(s)
        return [sorted((tuple(sorted(x[1].items())), x[2]) for x in samples(fams, name))
                for name in ("graphsignal_cuda_memcpy_calls_total", "graphsignal_cuda_memcpy_bytes_total")]

    light = calls("cuda_memcpy_calls")
    assert light == calls("cuda_memcpy_nanoseconds")
    assert light[0] == [((("frame", "host_to_device"), ("host_memory", "pageable"), ("pid", "42")), 3),
                        ((("frame", "host_to_device"), ("host_memory", "pinned"), ("pid", "42")), 7)]
