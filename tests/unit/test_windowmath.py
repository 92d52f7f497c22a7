"""graphsignal.windowmath on its own: pick, each type's window, the
log-linear bin states, and the JSON form graphsignal-server keeps. The
last tests hold the two ways to a window to one answer: the sidecar's
history states, and the states graphsignal-server rebuilds from the
payload's stats."""
import math

import numpy as np
import orjson
import pytest

from graphsignal import histo, windowmath as wm
from graphsignal.sidecar.store import MetricStore

NS = 1_000_000_000


# -- pick ---------------------------------------------------------------------
def test_pick_takes_the_snapshot_nearest_to_n_seconds_back_and_the_older_on_a_tie():
    t = [0, 10 * NS, 20 * NS, 30 * NS]
    assert wm.pick([], 5) is None
    assert wm.pick(t, 10) == (2, 3)
    assert wm.pick(t, 14) == (2, 3)
    assert wm.pick(t, 16) == (1, 3)
    assert wm.pick(t, 15) == (1, 3)  # a tie: the older
    assert wm.pick(t, 1000) == (0, 3)  # shorter history: the oldest
    assert wm.pick(t, 0) == (3, 3)
    assert wm.pick([5 * NS], 60) == (0, 0)


# -- counters and gauges --------------------------------------------------------
def test_counter_delta_rate_and_a_reset_counted_from_zero():
    assert wm.counter(10, 25, 5.0) == {"delta": 15, "rate": 3.0, "total": 25, "reset": False}
    assert wm.counter(None, 25, 5.0) == {"delta": 25, "rate": 5.0, "total": 25, "reset": False}
    assert wm.counter(100, 7, 2.0) == {"delta": 7, "rate": 3.5, "total": 7, "reset": True}
    assert wm.counter(3, None, 2.0) == {"delta": None, "rate": None, "total": None, "reset": False}
    assert wm.counter(3, 3, 0.0)["rate"] is None  # no time covered: no rate
    big = 1 << 70  # Python ints stay exact
    assert wm.counter(big, big + 1, 1.0)["delta"] == 1


def test_gauge_weights_each_value_by_the_snapshots_it_held_for():
    st = wm.gauge(4, [(2, 3), (None, 5), (10, 1), (7, 0)])
    assert st == {"value": 4, "min": 2, "max": 10, "mean": (2 * 3 + 10) / 4, "samples": 4}
    assert wm.gauge(None, [(None, 3)]) == {"value": None, "min": None, "max": None, "mean": None, "samples": 0}


# -- histograms ------------------------------------------------------------------
def _sparse(values):
    dense = np.bincount(histo.bin_index(np.asarray(values, dtype=np.uint64)), minlength=histo.NBINS)
    return wm.SparseBins.of(dense.astype(np.int64))


def test_loglinear_window_quantiles_come_from_the_bins_added_in_the_window():
    before = [1000] * 50
    added = [1_000_000] * 10
    prev = (50, sum(before), _sparse(before))
    cur = (60, sum(before + added), _sparse(before + added))
    st = wm.histogram(prev, cur, 10.0)
    assert st["count"] == 10 and st["sum"] == 10_000_000 and st["mean"] == 1_000_000 and st["rate"] == 1.0
    assert st["reset"] is False
    assert st["p50"] == pytest.approx(1_000_000, rel=1 / 64)  # the bin's midpoint, within 1/64
    # clamped to the exact bounds since start
    assert wm.histogram(prev, cur, 10.0, vmin=0, vmax=999_999)["p99"] == 999_999


def test_loglinear_window_over_a_delta_chain_equals_the_dense_difference():
    rng = np.random.default_rng(1)
    dense = np.zeros(histo.NBINS, dtype=np.int64)
    chain = [wm.SparseBins.of(dense)]
    for _ in range(10):
        add = np.bincount(histo.bin_index(rng.integers(1, 1 << 30, 50).astype(np.uint64)), minlength=histo.NBINS)
        dense = dense + add
        idx = np.flatnonzero(add)
        chain.append(wm.DeltaBins(chain[-1], idx.astype(np.uint16), add[idx].astype(np.int64)))
    assert chain[-1].depth == 10
    assert np.array_equal(chain[-1].dense(), dense)
    for a, b in ((3, 9), (0, 10), (9, 9)):
        want = chain[b].dense() - chain[a].dense()
        assert np.array_equal(wm.bins_diff(chain[b], chain[a]), want)
        # unrelated states (the server's, rebuilt apart) give the same difference
        assert np.array_equal(wm.bins_diff(wm.SparseBins.of(chain[b].dense()), wm.SparseBins.of(chain[a].dense())),
                              want)
    assert np.array_equal(wm.bins_diff(chain[4], None), chain[4].dense())


def test_loglinear_window_with_nothing_new_and_a_reset():
    b = _sparse([5, 6, 7])
    st = wm.histogram((3, 18, b), (3, 18, b), 1.0)
    assert (st["count"], st["sum"], st["mean"], st["p50"], st["reset"]) == (0, 0, None, None, False)
    # the count went down: the source restarted, and the window counts from zero
    st = wm.histogram((10, 100, _sparse([10] * 10)), (3, 18, b), 1.0)
    assert (st["count"], st["sum"], st["reset"]) == (3, 18, True) and st["p50"] == 6
    # a sum that is not known stays unknown
    st = wm.histogram((1, None, None), (3, 18, None), 1.0)
    assert st["sum"] is None and st["mean"] is None and st["count"] == 2


def test_bucket_window_per_bucket_differences_a_bucket_that_went_down_and_a_new_layout():
    le = (0.1, 1.0, math.inf)
    prev = (4, 2.0, (le, (1, 3, 0)))
    st = wm.histogram(prev, (10, 8.0, (le, (1, 9, 0))), 2.0)
    assert (st["count"], st["sum"], st["rate"], st["reset"]) == (6, 6.0, 3.0, False)
    assert 0.1 < st["p50"] <= 1.0
    # a bucket went down while the count did not: a restart, counted from zero
    st = wm.histogram(prev, (6, 3.0, (le, (6, 0, 0))), 2.0)
    assert (st["count"], st["sum"], st["reset"]) == (6, 3.0, True) and st["p99"] <= 0.1
    # another layout: the buckets as they are
    st = wm.histogram(prev, (10, 8.0, ((0.5, math.inf), (10, 0))), 2.0)
    assert st["count"] == 6 and st["p50"] <= 0.5


# -- profiles ----------------------------------------------------------------------
def test_profile_window_lists_what_moved_largest_first_and_counts_the_rest():
    prev = {"a": (100, 1), "b": (10, 1), "idle": (5, 5)}
    cur = {"a": (400, 4), "b": (10, 2), "idle": (5, 5), "new": (300, 1)}
    st = wm.profile(prev, cur, 2.0)
    assert (st["value"], st["samples"], st["rate"], st["frames_idle"], st["frames_omitted"]) == (600, 5, 300.0, 1, 0)
    assert [(f["name"], f["value"], f["samples"]) for f in st["frames"]] == [("a", 300, 3), ("new", 300, 1),
                                                                             ("b", 0, 1)]
    a = st["frames"][0]
    assert (a["share"], a["rate"], a["mean"]) == (0.5, 150.0, 100.0)
    many = {"f%04d" % i: (i + 1, 1) for i in range(wm.MAX_FRAMES + 7)}
    st = wm.profile(None, many, 1.0)
    assert len(st["frames"]) == wm.MAX_FRAMES and st["frames_omitted"] == 7
    assert st["frames"][0]["name"] == "f%04d" % (wm.MAX_FRAMES + 6)


def test_window_dispatches_by_type():
    assert wm.window("counter", 1, 3, 1.0) == wm.counter(1, 3, 1.0)
    assert wm.window("gauge", 1, 3, 1.0, runs=[(3, 2)]) == wm.gauge(3, [(3, 2)])
    assert wm.window("profile", None, {"x": (1, 1)}, 1.0) == wm.profile(None, {"x": (1, 1)}, 1.0)


# -- the JSON form -------------------------------------------------------------------
def test_stored_states_are_json_and_load_back_as_states():
    s = MetricStore()
    s.add_histogram_values("lat_ns", {}, np.array([3, 700, 70_000, 70_001], dtype=np.uint64))
    s.set_histogram_buckets("e2e_seconds", {}, 4, 2.5, [0.1, 1.0, math.inf], [1, 3, 4])
    s.add_profile("cuda_kernels_nanoseconds", {}, [("k1", 10, 1), ("k2", 30, 2)])
    s.set_counter("c_total", {}, 7)
    s.set_gauge("g", {}, 1.5)
    for v in s.snapshot().series:
        stored = wm.stored_state(v.type, v.stats())
        assert orjson.loads(orjson.dumps(stored)) == stored
        state = wm.load_state(v.type, stored)
        if v.name == "lat_ns":
            count, total, bins = state
            assert (count, total) == (4, 3 + 700 + 70_000 + 70_001)
            assert np.array_equal(bins.dense(), s.lookup("lat_ns")[0].bin_counts)
        elif v.name == "e2e_seconds":
            assert stored == [4, 2.5, {"le": [0.1, 1.0, None], "counts": [1, 2, 1]}]
            assert state == (4, 2.5, ((0.1, 1.0, math.inf), (1, 2, 1)))
        elif v.name == "cuda_kernels_nanoseconds":
            assert state == {"k1": [10, 1], "k2": [30, 2]}
        else:
            assert state == v.state


def test_bins_that_are_not_exactly_ours_are_buckets_and_never_an_error():
    # upper bounds of our bins, but one is off by one: an engine's buckets
    ub = histo.BIN_UPPER[[1000, 1001]].tolist()
    assert "idx" in wm.stored_state("histogram", {"count": 2, "sum": 1, "bins": ub, "counts": [1, 1]})[2]
    for bins in ([ub[0], ub[1] + 1], [-1, 5], [1 << 64, 5], [1.0, 2.0], [0.5, None]):
        stored = wm.stored_state("histogram", {"count": 2, "sum": 1, "bins": bins, "counts": [1, 1]})
        assert "le" in stored[2], bins
    assert wm.stored_state("histogram", {"count": None, "sum": None, "bins": [], "counts": []}) == [0, None, None]


# -- one answer from both sides --------------------------------------------------------
def test_the_servers_states_give_the_sidecars_window():
    """A window over a series' history states (the sidecar) equals the
    window over the states rebuilt from the two payloads' stats (the
    server), for every type."""
    t = [1_700_000_000 * NS]
    s = MetricStore(clock=lambda: t[0])
    rng = np.random.default_rng(7)
    le = [0.1, 1.0, math.inf]

    def write(step):
        s.add_histogram_values("lat_ns", {}, rng.integers(1, 1 << 24, 40).astype(np.uint64))
        s.set_histogram_buckets("e2e_seconds", {}, 4 * step, 0.5 * step, le, [step, 3 * step, 4 * step])
        s.add_profile("probe_ops_nanoseconds", {}, [("op%d" % (step % 3), 10 * step, 1)])
        s.add_counter("c_total", {}, step)
        s.set_gauge("g", {}, step)

    payloads = []
    for step in range(1, 6):
        write(step)
        t[0] += NS
        s.take_history()
        payloads.append({v.key: (v.type, v.stats(), v.bounds) for v in s.snapshot().series})
    hist = s.snapshot().history
    (_, first), (_, last) = hist[1], hist[4]
    for key, (type_, stats, (vmin, vmax)) in payloads[4].items():
        sidecar = wm.window(type_, first.get(key), last[key], 3.0, vmin=vmin, vmax=vmax)
        p_stats = payloads[1][key][1]
        server = wm.window(type_, wm.load_state(type_, wm.stored_state(type_, p_stats)),
                           wm.load_state(type_, wm.stored_state(type_, stats)), 3.0, vmin=vmin, vmax=vmax)
        assert server == sidecar, key


def test_histogram_counts_no_int64_holds_are_refused_at_ingest_and_never_break_a_window():
    import copy

    import pytest

    from graphsignal.fleet import ingest

    doc = {"schema": 1, "instance_id": "i", "seq": 1, "payload_ns": 1, "start_ns": 1, "context": {},
           "profiler": {"version": "x"},
           "metrics": [{"name": "h", "type": "histogram", "tags": {}, "updated_ns": 1,
                        "stats": {"count": 1, "sum": 1.0, "min": 1, "max": 1, "mean": 1.0, "p50": 1, "p95": 1,
                                  "p99": 1, "bins": [1], "counts": [1]}}]}
    ingest.validate(copy.deepcopy(doc))
    for bad in (1 << 63, 1e300, -1):
        d = copy.deepcopy(doc)
        d["metrics"][0]["stats"]["counts"] = [bad]
        with pytest.raises(ingest.BadBody, match="counts"):
            ingest.validate(d)
    # a row stored before the check: its bins are unknown, nothing raises
    from graphsignal import windowmath

    state = windowmath.load_state("histogram", [3, 1.0, {"idx": [5], "counts": [1 << 63]}])
    assert state == (3, 1.0, None)
