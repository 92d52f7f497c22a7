"""The metric store and the /signals document: shape, caps, null vs 0,
histogram statistics; the Werkzeug app in-process."""
import logging

import orjson
from werkzeug.test import Client

from graphsignal.sidecar.server import make_app
from graphsignal.sidecar.store import MetricStore

REFERENCE_KEYS = {"profiler", "payload_ns", "start_ns", "context", "metrics", "errors", "resources"}


def doc(store):
    r = Client(make_app(store)).get("/signals")
    assert r.status_code == 200 and r.mimetype == "application/json"
    return orjson.loads(r.data)


def test_payload_has_the_reference_shape():
    s = MetricStore()
    s.context["instance.id"] = "abc"
    s.set_gauge("gpu_temperature_celsius", {"device.uuid": "GPU-1"}, 39)
    s.set_counter("cuda_memcpy_bytes", {"kind": "host_to_device"}, 16)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"}, [("k", 5, 1)])
    s.add_histogram_values("lat_ns", {}, [5, 6, 7])
    s.set_resource("host", {}, {"platform.name": "Linux"})
    d = doc(s)
    # the reference keys, plus the engine summary, the workload's end (null while it runs) and the findings
    assert REFERENCE_KEYS <= set(d) <= REFERENCE_KEYS | {"engine", "ended_ns", "exit_status", "findings"}
    assert d["findings"] == []  # nothing here is a cause
    assert d["ended_ns"] is None and d["exit_status"] is None
    assert d["context"] == {"instance.id": "abc"}
    for m in d["metrics"]:
        assert set(m) == {"name", "type", "tags", "stats", "updated_ns"}
    by = {m["name"]: m for m in d["metrics"]}
    assert by["gpu_temperature_celsius"]["stats"] == {"value": 39}
    assert by["cuda_memcpy_bytes"]["stats"] == {"total": 16}
    # kernel frames also carry a display name and a category (graphsignal.kernel_names)
    assert by["cuda_kernels_nanoseconds"]["stats"] == {"frames": [{"name": "k", "value": 5, "samples": 1,
                                                                   "display_name": "k", "category": "other"}]}
    assert set(by["lat_ns"]["stats"]) >= {"count", "sum", "min", "max", "mean", "p50", "p95", "bins", "counts"}
    r = d["resources"][0]
    assert set(r) == {"kind", "tags", "attributes", "first_seen_ts", "last_seen_ts"}
    assert [m["name"] for m in d["metrics"]] == sorted(m["name"] for m in d["metrics"])


def test_null_means_not_measured_and_zero_means_measured_zero():
    s = MetricStore()
    s.set_gauge("gpu_fan_speed_percent", {}, None)
    s.set_gauge("gpu_utilization_percent", {}, 0)
    s.ensure_profile("cuda_graphs_nanoseconds", {})
    s.set_histogram_buckets("ttft_seconds", {}, 0, 0.0, [0.1, float("inf")], [0, 0])
    by = {m["name"]: m["stats"] for m in doc(s)["metrics"]}
    assert by["gpu_fan_speed_percent"] == {"value": None}
    assert by["gpu_utilization_percent"] == {"value": 0}
    assert by["cuda_graphs_nanoseconds"] == {"frames": []}
    assert by["ttft_seconds"]["count"] == 0 and by["ttft_seconds"]["p50"] is None
    assert by["ttft_seconds"]["min"] is None and by["ttft_seconds"]["mean"] is None


def test_series_cap_drops_new_series_and_logs_once(caplog):
    s = MetricStore(max_series=5000)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        for i in range(5010):
            s.set_gauge("g", {"i": str(i)}, i)
    d = doc(s)
    assert len([m for m in d["metrics"] if m["name"] == "g"]) == 5000
    assert s.series_dropped == 10
    assert sum("series cap" in r.message for r in caplog.records) == 1
    # the cap is visible in the payload: a counter beyond the cap, and one error entry
    assert [m["stats"]["total"] for m in d["metrics"] if m["name"] == "graphsignal_dropped_series"] == [10]
    assert sum("series cap of 5000" in e["message"] for e in d["errors"]) == 1
    s.set_gauge("g", {"i": "0"}, -1)  # existing series still update
    assert s.lookup("g", tags={"i": "0"})[0].value == -1


def test_profile_renders_the_249_largest_frames_and_the_rest_in_other_sorted():
    s = MetricStore()
    s.add_profile("p", {}, [("f%03d" % i, i, 1) for i in range(300)])
    st = doc(s)["metrics"][0]["stats"]
    frames = st["frames"]
    assert len(frames) == 250 and st["frames_folded"] == 51
    # "(other)" holds f000..f050 (1275 in all, the largest value), in its place by value
    assert [(f["name"], f["value"], f["samples"]) for f in frames[:1]] == [("(other)", 1275, 51)]
    assert [f["value"] for f in frames[1:]] == list(range(299, 50, -1))


def test_prometheus_buckets_give_interpolated_quantiles():
    s = MetricStore()
    # 10 in (0, 0.1], 80 in (0.1, 0.5], 10 in (0.5, 1]
    s.set_histogram_buckets("e2e_seconds", {}, 100, 30.0, [0.1, 0.5, 1.0, float("inf")], [10, 90, 100, 100])
    st = doc(s)["metrics"][0]["stats"]
    assert st["count"] == 100 and st["mean"] == 0.3
    assert abs(st["p50"] - 0.3) < 1e-9  # rank 50: 40/80 into (0.1, 0.5]
    assert abs(st["p95"] - 0.75) < 1e-9
    assert st["bins"] == [0.1, 0.5, 1.0, None] and st["counts"] == [10, 80, 10, 0]


def test_errors_keep_the_latest_and_count_repeats():
    s = MetricStore()
    for i in range(150):
        s.add_error("error", "boom %d" % i)
    for _ in range(5):
        s.add_error("error", "same")
    errs = doc(s)["errors"]
    assert len(errs) == 100
    assert errs[-1]["message"] == "same" and errs[-1]["count"] == 5
    assert errs[0]["message"] == "boom 51"  # 151 distinct entries, the latest 100 kept


def test_health_404_405_and_bad_query():
    c = Client(make_app(MetricStore()))
    assert c.get("/health").json["status"] == "ok"
    r = c.get("/nope")
    assert r.status_code == 404 and "not found" in r.json["error"]
    assert c.post("/signals").status_code == 405
    r = c.get("/signals?foo=1")
    assert r.status_code == 400 and "foo" in r.json["error"]


def test_window_query_values_are_strict():
    from graphsignal.sidecar.windows import window_stats

    s = MetricStore()
    s.take_history()
    c = Client(make_app(s, window_stats))
    assert c.get("/signals?window=5").status_code == 200
    for bad in ("+5", "%205", "5.0", "abc", "0", "601", "\u00b2", ""):
        r = c.get("/signals?window=" + bad)
        assert r.status_code == 400 and "window" in r.json["error"], bad
    assert c.get("/signals?window=5&window=6").status_code == 400


FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
SGEMM = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"


def test_kernel_frames_carry_display_name_and_category_and_keep_the_raw_symbol():
    from graphsignal.sidecar.windows import window_stats

    s = MetricStore()
    tags = {"process.pid": "1", "device.cuda_index": "0"}
    s.add_profile("cuda_kernels_nanoseconds", tags, [(SGEMM, 900, 3), (FILL, 100, 1)])
    s.add_profile("cuda_sync_nanoseconds", tags, [("stream", 50, 1)])
    s.take_history(ts=s.start_ns + 1)
    s.add_profile("cuda_kernels_nanoseconds", tags, [(SGEMM, 90, 1)])
    s.take_history(ts=s.start_ns + 1_000_000_001)
    r = Client(make_app(s, window_stats)).get("/signals?window=5")
    d = orjson.loads(r.data)
    by = {m["name"]: m for m in d["metrics"]}
    assert by["cuda_kernels_nanoseconds"]["stats"]["frames"] == [
        {"name": SGEMM, "value": 990, "samples": 4, "display_name": "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>",
         "category": "gemm"},
        {"name": FILL, "value": 100, "samples": 1, "display_name": "vectorized_elementwise_kernel<FillFunctor>",
         "category": "memory"}]
    assert by["cuda_sync_nanoseconds"]["stats"]["frames"] == [{"name": "stream", "value": 50, "samples": 1}]
    w = {m["name"]: m for m in d["window"]["metrics"]}
    (wf,) = w["cuda_kernels_nanoseconds"]["stats"]["frames"]
    assert (wf["name"], wf["value"], wf["display_name"], wf["category"]) == (
        SGEMM, 90, "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>", "gemm")
    assert "display_name" not in w["cuda_sync_nanoseconds"]["stats"]["frames"][0] if \
        w["cuda_sync_nanoseconds"]["stats"]["frames"] else True


def test_text_that_was_not_utf8_reaches_the_payload_as_replacement_characters():
    # a command line or a tag with bytes that were not UTF-8 (Python carries
    # them as lone surrogates) must not cost the whole document
    from graphsignal.sidecar.payload import build_signals

    s = MetricStore()
    s.set_resource("process", {"process.pid": "7"}, {"process.command_line": "python3 a.py \udcff\udcfe"})
    s.add_error("error", "bad \udcff line", tags={"source": "console"})
    s.add_counter("c_total", {"path": "/tmp/\udcff"}, 1)
    doc = orjson.loads(build_signals(s))
    assert doc["resources"][0]["attributes"]["process.command_line"] == "python3 a.py \ufffd\ufffd"
    assert doc["errors"][0]["message"] == "bad \ufffd line"
    assert [m["tags"] for m in doc["metrics"] if m["name"] == "c_total"] == [{"path": "/tmp/\ufffd"}]
