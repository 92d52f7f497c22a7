"""The JSON Schema of /signals (graphsignal/schema/signals.schema.json):
generated from the payload's TypedDicts, committed as generated, and held
against real documents: the recorded H200 payloads and payloads the
sidecar's renderer writes from stores holding every kind of series. It
must be strict enough to see a real change."""
import copy
import glob
import json
import os

import numpy as np
import pytest

from graphsignal import signals_schema
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.history_block import history_stats
from graphsignal.sidecar.windows import window_stats
from graphsignal.sources import prometheus
from support.schema import assert_valid, errors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORDED = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "**", "*.signals.json"), recursive=True))
ENGINES = os.path.join(ROOT, "tests", "data", "engines")
# payloads recorded before ended_ns and exit_status existed (2026-12-02) lack those, and every
# recording so far was made before findings existed (graphsignal.findings computes them from the file)
BEFORE_ENDED = {"gemm_bf16", "gemm_fp32", "llamacpp_graph_c4", "llamacpp_node_c1"}


def test_the_committed_schema_is_what_the_model_generates():
    with open(signals_schema.PATH, encoding="utf-8") as f:
        committed = f.read()
    assert committed == signals_schema.dumps(signals_schema.generate()), \
        "the payload's model changed: python3 -m graphsignal.signals_schema --write"


def test_the_schema_follows_the_model():
    schema = signals_schema.load()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(schema["properties"]) - {"window", "history"}
    # every object of the document is closed
    objects = [d for d in schema["$defs"].values() if d.get("type") == "object" and "properties" in d]
    assert objects and all(d["additionalProperties"] is False for d in objects)
    assert schema["$defs"]["GaugeMetric"]["properties"]["type"] == {"const": "gauge"}
    frame = schema["$defs"]["Frame"]
    assert frame["required"] == ["name", "value", "samples"]
    assert set(frame["properties"]) == {"name", "value", "samples", "display_name", "category"}


@pytest.mark.parametrize("path", RECORDED, ids=os.path.basename)
def test_recorded_payloads_follow_the_schema(path):
    with open(path) as f:
        doc = json.load(f)
    name = os.path.basename(path)[:-len(".signals.json")]
    missing = [] if "findings" in doc else ["(top): 'findings' is a required property"]
    if name in BEFORE_ENDED:
        assert errors(doc) == ["(top): 'ended_ns' is a required property",
                               "(top): 'exit_status' is a required property"] + missing
        doc = dict(doc, ended_ns=None, exit_status=None)  # as a running payload has them
    else:
        assert errors(doc) == missing
    from graphsignal import findings
    doc = dict(doc, findings=findings.compute(doc))  # as the sidecar would have served it
    assert_valid(doc)


def full_store():
    """A store with every kind of series, errors, resources and an engine."""
    s = MetricStore()
    with open(os.path.join(ENGINES, "vllm_1.txt"), encoding="utf-8") as f:
        text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
    t0 = s.clock()
    prometheus.apply(s, prometheus.parse_exposition(text), ts=t0)
    s.set_gauge("gpu_utilization_percent", {"device.index": "0"}, 87.5)
    s.set_gauge("gpu_fan_speed_percent", {"device.index": "0"}, None)
    s.set_gauge("nan_watts", {}, float("nan"))
    s.set_counter("cuda_memcpy_bytes", {"kind": "host_to_device"}, 1 << 70)  # a float in JSON
    s.add_counter("graphsignal_dropped_records", {"writer": "cupti"}, 3)
    s.add_histogram_values("probe_op_nanoseconds", {"op": "x"}, np.arange(1, 1000, dtype=np.uint64))
    s.add_histogram_agg("probe_empty_nanoseconds", {}, 0, 0, None, None, None)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"},
                  [("_Z4gemmPfS_S_i", 1000, 2), ("ampere_sgemm_128x64_nn", 50, 1), ("k", 5, 1)])
    s.add_profile("cuda_memcpy_nanoseconds", {"process.pid": "1"}, [("host_to_device", 10, 1)])
    s.ensure_profile("cuda_graphs_nanoseconds", {"process.pid": "1"})
    s.add_error("error", "workload exited with code 1", exception="Traceback ...", tags={"source": "console"})
    s.add_error("warning", "nvml: no fan", tags={"source": "nvml"})
    s.resolve_errors({"source": "nvml"})
    s.set_resource("host", {"host.name": "h"}, {"cpu_count": 8, "nested": {"a": [1, 2]}})
    s.set_resource("process", {"process.pid": "1"}, {"command": ["python3", "x.py"]})
    s.set_context(**{"host.name": "h", "instance.id": "abc"})
    s.take_history(t0)
    s.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"}, [("_Z4gemmPfS_S_i", 10, 1)])
    s.take_history(t0 + 2_000_000_000)
    return s


def test_the_renderers_payloads_follow_the_schema():
    s = full_store()
    doc = json.loads(build_signals(s))
    assert {m["type"] for m in doc["metrics"]} == {"gauge", "counter", "histogram", "profile"}
    assert doc["engine"] is not None and doc["errors"] and doc["resources"]
    assert any(f.get("category") for m in doc["metrics"] if m["type"] == "profile" for f in m["stats"]["frames"])
    assert_valid(doc)
    windowed = json.loads(build_signals(s, {"window": window_stats(s, 5)}))
    assert windowed["window"]["metrics"]
    assert_valid(windowed)
    with_history = json.loads(build_signals(s, {"history": history_stats(s, 5)}))
    kinds = {h["type"] for h in with_history["history"]["series"]}
    assert kinds == {"gauge", "counter", "profile"} and len(with_history["history"]["times_ns"]) == 2
    assert_valid(with_history)
    bad = copy.deepcopy(with_history)
    bad["history"]["series"][0]["values"] = "x"
    assert errors(bad)
    s.set_ended(s.clock(), -9)
    assert_valid(json.loads(build_signals(s)))
    assert_valid(json.loads(build_signals(MetricStore())))  # nothing measured yet


def _metric(doc, type_):
    return next(m for m in doc["metrics"] if m["type"] == type_ and m["stats"].get("frames", True))


MUTATIONS = {
    "a missing top-level key": lambda d: d.pop("errors"),
    "an unknown top-level key": lambda d: d.update(extra=1),
    "a wrong type": lambda d: d.update(payload_ns="now"),
    "null where a number must be": lambda d: d.update(start_ns=None),
    "a metric type that is none": lambda d: _metric(d, "gauge").update(type="summary"),
    "a gauge with a counter's stats": lambda d: _metric(d, "gauge").update(stats={"total": 1}),
    "a metric without updated_ns": lambda d: _metric(d, "counter").pop("updated_ns"),
    "a tag that is no string": lambda d: _metric(d, "gauge")["tags"].update(n=1),
    "a histogram without p99": lambda d: _metric(d, "histogram")["stats"].pop("p99"),
    "a frame without samples": lambda d: _metric(d, "profile")["stats"]["frames"][0].pop("samples"),
    "a frame with an unknown key": lambda d: _metric(d, "profile")["stats"]["frames"][0].update(share=0.5),
    "an error entry without its count": lambda d: d["errors"][0].pop("count"),
    "a resource seen at a string time": lambda d: d["resources"][0].update(last_seen_ts="1"),
    "a profiler without its version": lambda d: d["profiler"].pop("version"),
    "an engine that is a list": lambda d: d.update(engine=[]),
}


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_a_changed_payload_is_rejected(what):
    doc = json.loads(build_signals(full_store()))
    assert_valid(doc)
    bad = copy.deepcopy(doc)
    MUTATIONS[what](bad)
    assert bad != doc and errors(bad), what
