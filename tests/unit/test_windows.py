"""Windows over the per-second history: known records written into a real
ring at known (injected) times, drained by the real poller, read back as
GET /signals?window=N."""
import os
import struct

import orjson
import pytest
from werkzeug.test import Client

from graphsignal.sidecar.poller import Poller
from graphsignal.rings import layout as L
from graphsignal.rings.reader import Writer
from graphsignal.sidecar.server import make_app
from graphsignal.sidecar.store import MetricStore
from graphsignal.sidecar.windows import pick, window_stats

S = 1_000_000_000
T0 = 1_700_000_000 * S

FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


class Rig:
    """A store with an injected clock, a poller that never snapshots on its
    own (the test decides when), and one probe-kind ring of this process."""

    def __init__(self):
        self.clock = Clock(T0)
        self.store = MetricStore(clock=self.clock)
        run_id = "wt%d%s" % (os.getpid(), os.urandom(3).hex())
        self.poller = Poller(self.store, run_id)
        self.w = Writer("gs-%s-%d-probe" % (run_id, os.getpid()), kind=L.KIND_PROBE)
        self.names = {}

    def name(self, text, kind=L.NAME_PLAIN):
        if text not in self.names:
            self.names[text] = self.w.name(text, kind)
        return self.names[text]

    def kernel(self, symbol, ns, n=1):
        nid = self.name(symbol)
        for _ in range(n):
            assert self.w.write(L.REC_KERNEL, name_id=nid, value=ns)

    def hist(self, name, values):
        nid = self.name("histogram\x1f" + name, L.NAME_INSTRUMENT)
        for v in values:
            assert self.w.write(L.REC_HISTOGRAM, name_id=nid, value=v)

    def counter(self, name, delta):
        nid = self.name("counter\x1f" + name, L.NAME_INSTRUMENT)
        assert self.w.write(L.REC_COUNTER, name_id=nid, value=delta)

    def gauge(self, name, value):
        nid = self.name("gauge\x1f" + name, L.NAME_INSTRUMENT)
        bits = struct.unpack("<Q", struct.pack("<d", value))[0]
        assert self.w.write(L.REC_GAUGE, name_id=nid, value=bits)

    def tick(self, at_s):
        """Drain at time T0 + at_s and take the per-second snapshot."""
        self.clock.t = T0 + int(at_s * S)
        before = len(self.store.history)
        self.poller.poll_once()
        if len(self.store.history) == before:  # the poller snapshots on its first cycle itself
            self.store.take_history(self.clock.t)

    def close(self):
        self.poller.cleanup_all()
        self.w.unmap()


@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.close()


def metric(doc, name, type_=None):
    found = [m for m in doc["metrics"] if m["name"] == name and (type_ is None or m["type"] == type_)]
    assert len(found) == 1, (name, [m["name"] for m in doc["metrics"]])
    return found[0]


def frames(m):
    return {f["name"]: f for f in m["stats"]["frames"]}


def test_kernel_profile_window_is_the_difference_of_two_snapshots(rig):
    # second 0: 10 fills; then every second 3 fills of 1000 ns and 1 gemm of 6000 ns
    rig.kernel(FILL, 500, 10)
    rig.tick(0)
    for sec in range(1, 11):
        rig.kernel(FILL, 1000, 3)
        rig.kernel(GEMM, 6000, 1)
        rig.tick(sec)
    doc = window_stats(rig.store, 5)
    assert doc["start_ns"] == T0 + 5 * S and doc["end_ns"] == T0 + 10 * S
    assert doc["covered_seconds"] == 5.0 and doc["partial"] is False and doc["snapshots"] == 6
    m = metric(doc, "cuda_kernels_nanoseconds")
    st = m["stats"]
    assert st["value"] == 5 * (3 * 1000 + 6000) and st["samples"] == 5 * 4
    assert st["rate"] == 9000.0
    fr = frames(m)
    assert fr[GEMM] == {"name": GEMM, "value": 30000, "samples": 5, "share": 30000 / 45000, "rate": 6000.0,
                        "mean": 6000.0, "display_name": GEMM, "category": "gemm"}
    assert fr[FILL]["value"] == 15000 and fr[FILL]["samples"] == 15 and fr[FILL]["mean"] == 1000.0
    assert [f["name"] for f in st["frames"]] == [GEMM, FILL]  # largest first
    assert abs(sum(f["share"] for f in st["frames"]) - 1.0) < 1e-12
    assert m["new_in_window"] is False


def test_frames_idle_in_the_window_are_counted_not_listed(rig):
    rig.kernel(FILL, 100, 1)
    rig.tick(0)
    rig.kernel(GEMM, 200, 1)
    rig.tick(1)
    for sec in range(2, 5):
        rig.tick(sec)
    doc = window_stats(rig.store, 2)
    st = metric(doc, "cuda_kernels_nanoseconds")["stats"]
    assert st["frames"] == [] and st["value"] == 0 and st["samples"] == 0 and st["rate"] == 0.0
    assert st["frames_idle"] == 2
    doc = window_stats(rig.store, 4)
    st = metric(doc, "cuda_kernels_nanoseconds")["stats"]
    assert [f["name"] for f in st["frames"]] == [GEMM] and st["frames_idle"] == 1


def test_probe_histogram_counter_and_gauge_over_the_window(rig):
    rig.hist("step_nanoseconds", [1_000_000] * 50)  # before the window: 1 ms steps
    rig.counter("tokens", 7)
    rig.gauge("batch_size", 1.0)
    rig.tick(0)
    for sec in range(1, 4):
        rig.hist("step_nanoseconds", [20] * 10)  # 20 is below 32: an exact bin
        rig.counter("tokens", 100)
        rig.gauge("batch_size", float(sec * 2))
        rig.tick(sec)
    doc = window_stats(rig.store, 3)
    h = metric(doc, "step_nanoseconds", "histogram")["stats"]
    assert h["count"] == 30 and h["sum"] == 600 and h["mean"] == 20.0 and h["rate"] == 10.0
    assert h["p50"] == 20.0 and h["p95"] == 20.0 and h["p99"] == 20.0  # the 1 ms steps are outside
    c = metric(doc, "tokens", "counter")["stats"]
    assert c == {"delta": 300, "rate": 100.0, "total": 307, "reset": False}
    g = metric(doc, "batch_size", "gauge")["stats"]
    assert g == {"value": 6.0, "min": 1.0, "max": 6.0, "mean": (1 + 2 + 4 + 6) / 4, "samples": 4}
    # the plain payload still has the cumulative view
    assert rig.store.lookup("step_nanoseconds")[0].count == 80


def test_shorter_history_than_asked_uses_what_exists_and_says_so(rig):
    rig.kernel(FILL, 1000, 1)
    rig.tick(0)
    rig.kernel(FILL, 1000, 4)
    rig.tick(1)
    rig.kernel(FILL, 1000, 2)
    rig.tick(2.5)
    doc = window_stats(rig.store, 60)
    assert doc["partial"] is True and doc["seconds"] == 60
    assert doc["start_ns"] == T0 and doc["end_ns"] == T0 + int(2.5 * S) and doc["covered_seconds"] == 2.5
    assert "2.500 of the 60 seconds" in doc["note"]
    st = metric(doc, "cuda_kernels_nanoseconds")["stats"]
    assert st["samples"] == 6 and st["value"] == 6000 and st["rate"] == 6000 / 2.5


def test_one_snapshot_gives_zero_deltas_and_null_rates(rig):
    rig.counter("tokens", 5)
    rig.tick(0)
    doc = window_stats(rig.store, 5)
    assert doc["covered_seconds"] == 0.0 and doc["partial"] is True and "one snapshot" in doc["note"]
    c = metric(doc, "tokens")["stats"]
    assert c["delta"] == 0 and c["rate"] is None and c["total"] == 5


def test_no_snapshot_yet():
    doc = window_stats(MetricStore(clock=Clock(T0)), 5)
    assert doc["metrics"] == [] and doc["start_ns"] is None and doc["partial"] is True


def test_series_born_inside_the_window_count_from_zero(rig):
    rig.tick(0)
    rig.tick(1)
    rig.kernel(GEMM, 7, 3)
    rig.counter("late", 11)
    rig.tick(2)
    doc = window_stats(rig.store, 1)
    m = metric(doc, "cuda_kernels_nanoseconds")
    assert m["new_in_window"] is True and m["stats"]["value"] == 21
    assert metric(doc, "late")["stats"]["delta"] == 11


def test_nearest_snapshot_to_the_window_start_is_picked():
    hist = [(T0 + int(t * S), {}) for t in (0, 1.04, 2.08, 3.12, 4.16, 5.2, 6.24)]
    assert pick(hist, 5) == (1, 6)  # 6.24 - 5 = 1.24: nearest is 1.04
    assert pick(hist, 1) == (5, 6)
    assert pick(hist, 600) == (0, 6)
    assert pick([(T0, {})], 5) == (0, 0)
    assert pick([], 5) is None
    # a tie goes to the older snapshot (the window covers at least N)
    assert pick([(T0, {}), (T0 + S, {}), (T0 + 2 * S, {})], 1.5) == (0, 2)


def test_counter_reset_counts_from_zero():
    clock = Clock(T0)
    store = MetricStore(clock=clock)
    store.set_counter("engine_requests_total", {"engine": "x"}, 100)
    store.take_history(T0)
    store.set_counter("engine_requests_total", {"engine": "x"}, 4)  # the engine restarted
    store.take_history(T0 + S)
    c = metric(window_stats(store, 1), "engine_requests_total")["stats"]
    assert c == {"delta": 4, "rate": 4.0, "total": 4, "reset": True}


def test_bucket_histogram_window_from_le_differences():
    store = MetricStore(clock=Clock(T0))
    le = [0.1, 1.0, float("inf")]
    store.set_histogram_buckets("ttft_seconds", {}, 10, 2.0, le, [10, 10, 10])
    store.take_history(T0)
    # 4 more observations, all between 0.1 and 1.0
    store.set_histogram_buckets("ttft_seconds", {}, 14, 4.0, le, [10, 14, 14])
    store.take_history(T0 + 2 * S)
    h = metric(window_stats(store, 2), "ttft_seconds")["stats"]
    assert h["count"] == 4 and h["sum"] == 2.0 and h["mean"] == 0.5 and h["rate"] == 2.0
    assert 0.1 < h["p50"] <= 1.0 and 0.1 < h["p99"] <= 1.0 and h["reset"] is False


def test_gauges_skip_unmeasured_samples():
    store = MetricStore(clock=Clock(T0))
    store.set_gauge("gpu_temperature_celsius", {}, None)
    store.take_history(T0)
    store.set_gauge("gpu_temperature_celsius", {}, 40)
    store.take_history(T0 + S)
    store.set_gauge("gpu_temperature_celsius", {}, 44)
    store.take_history(T0 + 2 * S)
    g = metric(window_stats(store, 2), "gpu_temperature_celsius")["stats"]
    assert g == {"value": 44, "min": 40, "max": 44, "mean": 42.0, "samples": 2}


# -- over HTTP ----------------------------------------------------------------------
def get(client, query=""):
    resp = client.get("/signals" + query)
    return resp.status_code, orjson.loads(resp.data)


def test_http_window_adds_the_window_and_keeps_the_plain_payload(rig):
    rig.kernel(FILL, 1000, 2)
    rig.tick(0)
    rig.kernel(FILL, 1000, 3)
    rig.tick(1)
    client = Client(make_app(rig.store, window_stats))
    code, plain = get(client)
    assert code == 200 and "window" not in plain
    code, doc = get(client, "?window=1")
    assert code == 200
    assert {k for k in plain} | {"window"} == set(doc)
    assert doc["metrics"] == plain["metrics"]  # cumulative metrics unchanged
    w = doc["window"]
    assert w["seconds"] == 1 and w["covered_seconds"] == 1.0
    st = metric(w, "cuda_kernels_nanoseconds")["stats"]
    assert st["samples"] == 3 and st["value"] == 3000
    cum = metric(doc, "cuda_kernels_nanoseconds")["stats"]
    assert cum["frames"][0]["samples"] == 5


@pytest.mark.parametrize("query", ["?window=0", "?window=601", "?window=abc", "?window=", "?window=2.5",
                                   "?window=-3", "?windw=5", "?window=5&x=1"])
def test_http_bad_window_is_a_400_with_a_json_error(rig, query):
    rig.tick(0)
    code, doc = get(Client(make_app(rig.store, window_stats)), query)
    assert code == 400 and isinstance(doc["error"], str) and doc["error"]


def test_http_largest_window_is_accepted(rig):
    rig.tick(0)
    code, doc = get(Client(make_app(rig.store, window_stats)), "?window=600")
    assert code == 200 and doc["window"]["seconds"] == 600


def test_window_quantiles_stay_within_the_exact_min_and_max(rig):
    rig.tick(0)
    rig.hist("op_nanoseconds", [5_000_000] * 4 + [4_000_000])
    rig.tick(1)
    h = metric(window_stats(rig.store, 1), "op_nanoseconds")["stats"]
    # 5 ms lies in a bin whose midpoint is above 5 ms: the exact max caps it
    assert h["p95"] == 5_000_000 and h["p99"] == 5_000_000
    assert 4_000_000 <= h["p50"] <= 5_000_000


def test_a_wall_clock_stepping_back_a_day_does_not_stretch_the_window():
    """Windows come from the monotonic clock (issue 36): after the wall
    clock steps back a day, ?window=1 still spans about a second of
    snapshots taken after the step, not everything since before it."""
    import time

    day = 86400 * 10**9
    wall = {"step": 0}
    store = MetricStore(clock=lambda: time.time_ns() - wall["step"])
    for i in range(37):
        if i == 30:  # a run's history before the step, then a second and more after it
            wall["step"] = day
            stepped_at = store.clock()
        store.add_counter("steps_total", {}, 1)
        store.take_history()
        time.sleep(0.01 if i < 30 else 0.2)
    w = window_stats(store, 1)
    assert stepped_at <= w["start_ns"] <= w["end_ns"]  # a snapshot from after the step, never one from before it
    assert 0.5 <= w["covered_seconds"] <= 2.5  # about the second asked for (sleeps may run long)
    assert not w["partial"]
    (m,) = [m for m in w["metrics"] if m["name"] == "steps_total"]
    assert 2 <= m["stats"]["delta"] <= 7  # the snapshots of about a second, not all 37
    assert m["stats"]["rate"] == pytest.approx(m["stats"]["delta"] / w["covered_seconds"])
