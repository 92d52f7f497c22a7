"""GET /metrics reads the store's series views, not their /signals JSON
decoded back; what it writes must stay byte for byte what one
prometheus_client call writes over the decoded JSON (its series read
through graphsignal.sidecar.recorded's views): odd numbers (NaN, infinities, integers beyond 64 bits,
numpy scalars), tied profile frames, engine buckets, recorded payloads."""
import glob
import json
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families as parse_text

from graphsignal.sidecar import snapshot
from graphsignal.sidecar.exposition import Collector, Exposition, context_of
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.recorded import views_of
from graphsignal.sidecar.store import MetricStore
from graphsignal.sources import prometheus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENGINES = os.path.join(ROOT, "tests", "data", "engines")
RECORDED = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "**", "*.signals.json"), recursive=True))
OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def from_json(store, exp, accept=None, engine=None, keys=()):
    """What /metrics wrote before: the decoded /signals metrics through one
    prometheus_client call."""
    encoder, _ = choose_encoder(accept or "")
    return encoder(Collector(views_of(snapshot.metrics_snapshot(store)), exp.top_frames, set(keys),
                             exp.engine if engine is None else engine, context_of(store.snapshot(), exp.identity)))


def assert_same(store, exp, keys=()):
    for accept in (None, OPENMETRICS):
        for engine in (False, True):
            body, _ = exp.render(accept, engine)
            assert body == from_json(store, exp, accept, engine, keys)


NUMBERS = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.integers(-(1 << 64), (1 << 64) + 5),
    st.floats(allow_nan=True, allow_infinity=True), st.just(10 ** 400), st.just(-(10 ** 400)),
    st.floats(width=32).map(np.float32), st.floats(allow_nan=True).map(np.float64),
    st.integers(-(1 << 63), (1 << 63) - 1).map(np.int64), st.integers(0, (1 << 64) - 1).map(np.uint64))
OPS = st.lists(st.tuples(st.sampled_from(["gauge", "counter", "add", "hist", "agg", "buckets", "profile", "touch",
                                          "remove"]),
                         st.integers(0, 3), NUMBERS, st.integers(0, 1 << 62)), min_size=1, max_size=40)


@settings(max_examples=120, deadline=None)
@given(OPS, st.integers(1, 12), st.integers(1, 20))
def test_odd_numbers_are_written_as_the_json_says_them(ops, top, max_frames):
    s = MetricStore(max_frames=max_frames)
    exp = Exposition(s, top_frames=top)
    keys = set()
    for op, idx, num, big in ops:
        tags = {"i": str(idx)}
        if op == "gauge":
            s.set_gauge("power_watts", tags, num)
        elif op == "counter":
            s.set_counter("bytes", tags, num)
        elif op == "add":
            s.add_counter("events_total", tags, big * big)  # beyond 64 bits after a few
        elif op == "hist":
            s.add_histogram_values("lat_nanoseconds", tags, np.array([big, big // 7, 1], dtype=np.uint64))
        elif op == "agg":
            s.add_histogram_agg("op_nanoseconds", tags, 2, big * big, 1, big, (np.array([5, 900]), np.array([1, 1])))
        elif op == "buckets":
            total = num if isinstance(num, float) else float(big)  # an engine's _sum may be NaN or inf
            s.set_histogram_buckets("engine:ttft_seconds", tags, 3, total, [0.1, 1.0, math.inf], [1, 2, 3])
            keys.add(("engine:ttft_seconds", "histogram", tuple(sorted(tags.items()))))
        elif op == "profile":
            # ties: frames of equal value keep the order they were made in
            s.add_profile("cuda_kernels_nanoseconds", tags,
                          [("k%d" % (j % 9), big % 3 if j % 2 else np.int64(big % 5), 1) for j in range(idx + 8)])
        elif op == "touch":
            with s.batch():
                for ser in s.series.values():
                    ser.touch(s.clock())
        else:
            s.remove("power_watts", "gauge", tags)
        exp.engine_keys = lambda: keys
        assert_same(s, exp, keys)


def test_numbers_are_written_as_the_json_says_them():
    s = MetricStore()
    for i, v in enumerate([math.nan, math.inf, -math.inf, np.float64("nan"), None]):
        s.set_gauge("null_watts", {"i": str(i)}, v)  # JSON null: not measured, no sample
    s.set_gauge("f32_watts", {}, np.float32(0.1))  # 0.1 as JSON writes it, not 0.10000000149011612
    s.set_counter("big_bytes", {}, 1 << 70)  # beyond 64 bits: a float
    s.set_counter("huge_bytes", {}, 10 ** 400)  # beyond a float: null
    s.set_counter("u64_bytes", {}, (1 << 64) - 1)  # still an integer
    exp = Exposition(s)
    got = {x.name: x.value for f in parse_text(exp.render()[0].decode()) for x in f.samples}
    assert "graphsignal_null_watts" not in got and "graphsignal_huge_bytes_total" not in got
    assert repr(got["graphsignal_f32_watts"]) == "0.1"
    assert got["graphsignal_big_bytes_total"] == float(1 << 70)
    assert got["graphsignal_u64_bytes_total"] == float((1 << 64) - 1)
    assert_same(s, exp)


def test_a_zero_that_turns_negative_is_written_again():
    # -0.0 == 0.0 == False: a cached line must still follow the sign (found by the test above)
    s = MetricStore()
    exp = Exposition(s)
    s.set_counter("bytes", {"i": "1"}, False)
    s.set_gauge("power_watts", {}, 0.0)
    assert_same(s, exp)
    s.set_counter("bytes", {"i": "1"}, np.float32(-0.0))
    s.set_gauge("power_watts", {}, -0.0)
    assert_same(s, exp)
    body = exp.render()[0]
    assert b'graphsignal_bytes_total{i="1"} -0.0' in body and b"graphsignal_power_watts -0.0" in body


def test_a_value_json_cannot_hold_leaves_the_series_out_of_both():
    s = MetricStore()
    s.set_gauge("ok_watts", {}, 1.5)
    s.set_gauge("odd", {}, np.complex64(0.5 + 1j))  # no orjson writes a complex (3.13 writes float16)
    s.set_gauge("object", {}, object())
    exp = Exposition(s)
    body, _ = exp.render()
    assert b"graphsignal_ok_watts 1.5" in body and b"odd" not in body and b"object" not in body
    assert [m["name"] for m in json.loads(build_signals(s))["metrics"]] == ["ok_watts"]
    assert_same(s, exp)
    s.set_gauge("odd", {}, 2.0)  # writable again: back in both
    assert_same(s, exp)
    assert b"graphsignal_odd 2.0" in exp.render()[0]


def test_a_scrape_is_no_read_of_signals():
    # /metrics needs no JSON: it does not keep the store serializing (prerender) for nothing
    s = MetricStore()
    s.set_gauge("x", {}, 1)
    Exposition(s).render()
    assert s.last_read_ns is None and not s.being_read() and s.prerender() == 0
    build_signals(s)
    assert s.being_read()


def test_top_frames_come_as_a_value_and_are_bounded():
    s = MetricStore()
    for bad in (0, 251):
        with pytest.raises(ValueError):
            Exposition(s, top_frames=bad)
    assert Exposition(s, top_frames=250).top_frames == 250


def store_of(doc):
    """A store holding what a recorded /signals document holds."""
    s = MetricStore()
    for r in doc.get("resources", ()):
        s.set_resource(r["kind"], r["tags"], r["attributes"])
    s.set_context(**doc.get("context", {}))
    for m in doc["metrics"]:
        st_, tags = m["stats"], m["tags"]
        if m["type"] == "gauge":
            s.set_gauge(m["name"], tags, st_["value"], ts=m["updated_ns"])
        elif m["type"] == "counter":
            s.set_counter(m["name"], tags, st_["total"], ts=m["updated_ns"])
        elif m["type"] == "profile":
            s.add_profile(m["name"], tags, [(f["name"], f["value"], f["samples"]) for f in st_["frames"]],
                          ts=m["updated_ns"])
        else:
            s.set_histogram_buckets(m["name"], tags, st_["count"], st_["sum"], st_["bins"], np.cumsum(st_["counts"]))
    return s


@pytest.mark.parametrize("path", RECORDED, ids=os.path.basename)
def test_recorded_payloads_are_written_as_before(path):
    with open(path) as f:
        doc = json.load(f)
    s = store_of(doc)
    exp = Exposition(s, identity={"service": "svc", "pod": 'p"1'})
    assert_same(s, exp)
    body, _ = exp.render()
    assert body.count(b"\n") > len(doc["metrics"])


@pytest.mark.parametrize("fixture", sorted(f for f in os.listdir(ENGINES) if f.endswith(".txt")))
def test_engine_expositions_are_written_as_before(fixture):
    with open(os.path.join(ENGINES, fixture), encoding="utf-8") as f:
        text = "\n".join(line for line in f.read().splitlines() if line.strip() != "...")
    try:
        parsed = prometheus.parse_exposition(text)
    except ValueError:
        pytest.skip("%s is not an exposition" % fixture)
    s = MetricStore()
    keys = prometheus.apply(s, parsed)
    s.add_histogram_values("probe_lat_nanoseconds", {}, np.arange(1, 5000, dtype=np.uint64))
    exp = Exposition(s, engine_keys=lambda: keys)
    assert_same(s, exp, keys)
    prometheus.apply(s, parsed)  # scraped again, nothing changed
    assert_same(s, exp, keys)
