"""One contract for what a series is (graphsignal.signals_model.SeriesViewLike):
a store's view and the view of the same series read back from /signals
(graphsignal.sidecar.recorded) say the same type, state, stats, frames and
fingerprint; a view names a profile's shown frames once; the fingerprint
is the series' value without its updated_ns."""
import math

import numpy as np
import orjson
import pytest

from graphsignal import histo, naming, windowmath
from graphsignal.sidecar.exposition import Exposition, reference
from graphsignal.sidecar.recorded import RecordedView, views_of
from graphsignal.sidecar.store import MetricStore
from graphsignal.signals_model import OTHER_FRAME

SGEMM = "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x64_8x5_nn_align1EEvNT_6ParamsE"
KERNELS = "cuda_kernels_nanoseconds"


def store():
    s = MetricStore(max_frames=6)
    s.set_gauge("power_watts", {"device.index": "0"}, 71.5)
    s.set_gauge("idle_watts", {}, None)
    s.add_counter("events_total", {"k": "v"}, 3)
    s.add_histogram_values("lat_nanoseconds", {}, np.array([3, 700, 70_000, 70_001], dtype=np.uint64))
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {}, 4, 2.5, [0.1, 1.0, math.inf], [1, 3, 4])
    # 9 frames past a cut of 6: 5 named and the cut's (other); ties keep the order they were made in
    s.add_profile(KERNELS, {"process.pid": "7"},
                  [(SGEMM, 900, 3)] + [("k%d" % i, 100 - (i // 2), 1) for i in range(8)])
    s.add_profile("probe_stage_nanoseconds", {}, [("load", 10, 1), ("step", 30, 2)])
    return s


def both(s):
    """(store views, the views of the same series read back from /signals)."""
    snap = s.snapshot(encode=True)
    return snap.series, views_of([orjson.loads(j) for j in snap.encoded])


def plain_state(type_, state):
    """A state comparable with ==: log-linear bins as their dense counts."""
    if type_ == "histogram":
        count, total, bins = state
        if bins is not None and not isinstance(bins, tuple):
            bins = ("dense", bins.dense().tolist())
        return count, total, bins
    if type_ == "profile":
        return {k: tuple(v) for k, v in state.items()}
    return state


def test_a_store_view_and_its_recorded_view_read_alike():
    live, recorded = both(store())
    assert [v.key for v in live] == [v.key for v in recorded]
    for a, b in zip(live, recorded):
        assert (a.name, a.type, dict(a.tags), a.updated_ns) == (b.name, b.type, dict(b.tags), b.updated_ns)
        assert orjson.loads(orjson.dumps(a.stats(), option=orjson.OPT_SERIALIZE_NUMPY)) == b.stats()
        assert a.frames(4) == b.frames(4), a.name
        assert a.fingerprint == b.fingerprint, a.name
        assert a.bounds == b.bounds
        if a.type != "profile":  # a recorded profile has only the frames the payload listed
            assert plain_state(a.type, a.state) == plain_state(b.type, b.state), a.name
    by = {v.name: v for v in live}
    assert by["lat_nanoseconds"].bounds == (3, 70_001)  # exact min and max: they bound window quantiles
    assert by["events_total"].bounds == (None, None)


def test_states_are_windowmaths_forms():
    by = {v.name: v for v in store().snapshot().series}
    assert by["power_watts"].state == 71.5 and by["idle_watts"].state is None and by["events_total"].state == 3
    count, total, bins = by["lat_nanoseconds"].state
    assert (count, total) == (4, 3 + 700 + 70_000 + 70_001)
    idx, counts = bins.nonzero()
    assert np.array_equal(bins.dense()[idx], counts) and counts.sum() == 4
    assert histo.BIN_UPPER[idx].tolist() == by["lat_nanoseconds"].stats()["bins"]
    assert by["vllm:e2e_request_latency_seconds"].state == (4, 2.5, ((0.1, 1.0, math.inf), (1, 2, 1)))
    assert by["probe_stage_nanoseconds"].state == {"load": (10, 1), "step": (30, 2)}
    for v in by.values():  # the payload's stats give the state back (a cut profile: its listed frames)
        got = windowmath.state_of(v.type, orjson.loads(orjson.dumps(v.stats(), option=orjson.OPT_SERIALIZE_NUMPY)))
        if v.type != "profile" or len(v.state) <= 6:
            assert plain_state(v.type, got) == plain_state(v.type, v.state), v.name


def test_plain_stats_are_the_stats_without_anything_computed():
    by = {v.name: v for v in store().snapshot().series}
    plain = {n: windowmath.plain_stats(v.type, v.state) for n, v in by.items()}
    assert plain["power_watts"] == {"value": 71.5} and plain["events_total"] == {"total": 3}
    assert plain["lat_nanoseconds"] == {"count": 4, "sum": 140_704, "bins": [], "counts": []}
    assert plain["vllm:e2e_request_latency_seconds"] == {"count": 4, "sum": 2.5, "bins": [0.1, 1.0, None],
                                                         "counts": [1, 2, 1]}
    assert sorted(f["name"] for f in plain[KERNELS]["frames"]) == sorted([SGEMM] + ["k%d" % i for i in range(8)])


def test_frames_are_the_payloads_first_without_the_cuts_other_and_named():
    by = {v.name: v for v in store().snapshot().series}
    k = by[KERNELS]
    listed = k.stats()["frames"]
    assert k.stats()["frames_folded"] == 4 and OTHER_FRAME in [f["name"] for f in listed]
    shown = k.frames(50)
    assert shown == [f for f in listed if f["name"] != OTHER_FRAME]  # ties as the payload orders them
    assert [f["name"] for f in k.frames(3)] == [SGEMM, "k0", "k1"]
    assert shown[0]["display_name"] == "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>"
    assert shown[0]["category"] == "gemm"
    assert "display_name" not in by["probe_stage_nanoseconds"].frames(5)[0]  # not a kernel profile
    assert by["power_watts"].frames(5) == []


def test_a_view_names_its_shown_frames_once():
    calls = []

    def counting(metric, frames):
        calls.append((metric, len(frames)))
        return naming.annotate(metric, frames)

    s = MetricStore(annotate=counting)
    s.add_profile(KERNELS, {}, [(SGEMM, 10, 1), ("k", 5, 1)])
    v = s.snapshot().series[0]
    first = v.frames(1)
    assert v.frames(1) is first and calls == [(KERNELS, 1)]  # /metrics and OTLP ask alike: named once
    assert len(v.frames(2)) == 2 and calls[-1] == (KERNELS, 2)
    s.snapshot().series[0].frames(2)
    assert len(calls) == 2  # an unchanged series is the same view
    s.add_profile(KERNELS, {}, [("k", 1, 1)])
    s.snapshot().series[0].frames(2)
    assert len(calls) == 3


def test_the_fingerprint_is_the_value_without_updated_ns():
    s = store()
    before = {v.key: v for v in s.snapshot().series}
    with s.batch():
        for ser in s.series.values():
            ser.touch(s.clock() + 10**9)  # set again to what it held, a second later
    after = {v.key: v for v in s.snapshot().series}
    for key, v in after.items():
        old = before[key]
        assert v is not old and v.encoded() != old.encoded()
        assert v.fingerprint == old.fingerprint and hash(v.fingerprint) == hash(old.fingerprint)
        assert b"updated_ns" not in v.fingerprint and v.encoded().startswith(v.fingerprint)
        assert orjson.loads(v.fingerprint + b"}") == {k: x for k, x in orjson.loads(v.encoded()).items()
                                                      if k != "updated_ns"}
    s.add_counter("events_total", {"k": "v"}, 1)
    s.add_histogram_values("lat_nanoseconds", {}, np.array([5], dtype=np.uint64))
    changed = {v.key: v for v in s.snapshot().series}
    moved = {k[0] for k, v in changed.items() if v.fingerprint != after[k].fingerprint}
    assert moved == {"events_total", "lat_nanoseconds"}


def test_a_recorded_view_leaves_its_document_alone_and_refuses_an_unknown_type():
    doc = {"name": KERNELS, "type": "profile", "tags": {}, "updated_ns": 1,
           "stats": {"frames": [{"name": SGEMM, "value": 2, "samples": 1, "display_name": "stale"},
                                {"name": OTHER_FRAME, "value": 1, "samples": 1}], "frames_folded": 3}}
    v = RecordedView(doc)
    assert v.frames(5) == [{"name": SGEMM, "value": 2, "samples": 1,
                            "display_name": "Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>",
                            "category": "gemm"}]  # named as this process names, the cut's (other) left out
    assert doc["stats"]["frames"][0]["display_name"] == "stale" and "category" not in doc["stats"]["frames"][0]
    with pytest.raises(ValueError, match="'x'.*'summary'"):
        RecordedView({"name": "x", "type": "summary", "tags": {}, "stats": {}})


def test_an_engine_histogram_outside_the_engine_keys_is_written_with_its_buckets():
    # a scrape's series written before its keys are swapped in: /metrics failed whole on the +Inf bound
    s = MetricStore()
    s.set_histogram_buckets("vllm:e2e_request_latency_seconds", {}, 4, 2.5, [0.1, 1.0, math.inf], [1, 3, 4])
    exp = Exposition(s)
    body, _ = exp.render()
    assert b'graphsignal_vllm_e2e_request_latency_seconds_bucket{le="1.0"} 3.0' in body
    assert body == reference(exp.collector())


def test_a_store_without_names_exports_its_kernels_unnamed():
    # the view is the one namer: a store given none (annotate=None) has no display names to export
    s = MetricStore(annotate=None)
    s.add_profile(KERNELS, {}, [(SGEMM, 10, 1)])
    exp = Exposition(s)
    body, _ = exp.render()
    assert b'category="",frame="%s",kernel=""} 1e-08' % SGEMM.encode() in body
    assert body == reference(exp.collector())
