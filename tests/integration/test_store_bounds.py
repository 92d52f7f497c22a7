"""Memory is bounded over time: the per-second history keeps what changed
(an idle series costs nothing per second), windows read the same numbers
from it, and series of processes that exited are folded so they never
crowd out live ones, with the cap visible in /signals."""
import numpy as np
import orjson
import pytest

from support.cbuild import compile_c
from graphsignal.sidecar import refused as refused_mod
from graphsignal.sidecar import store as store_mod
from graphsignal.sidecar.payload import build_signals
from graphsignal.sidecar.store import DROPPED_SERIES_METRIC, EXITED, FOLDED_METRIC, MetricStore, SparseBins
from graphsignal.sidecar.windows import window_stats
from support.gsrun import metrics, quiet_env, run_wrapped

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def entries(store):
    return store.history.entries()


def metric(doc, name, **tags):
    found = [m for m in doc["metrics"] if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]
    assert len(found) == 1, (name, tags, found)
    return found[0]


def test_idle_histograms_cost_nothing_per_snapshot():
    clock = Clock(T0)
    store = MetricStore(clock=clock)
    rng = np.random.default_rng(1)
    for i in range(4900):  # recorded once, then idle (before: 601 copies of every histogram's bins)
        store.add_histogram_values("probe_op_nanoseconds", {"op": str(i)}, rng.integers(1, 1 << 30, 3))
    for i in range(100):
        store.set_gauge("live_level", {"i": str(i)}, 0.0)
    store.take_history(T0)
    first = entries(store)
    assert first == 5000
    for t in range(1, 601):
        clock.t = T0 + t * S
        for i in range(100):
            store.set_gauge("live_level", {"i": str(i)}, float(t))
        store.take_history(clock.t)
    # per second: the 100 gauges that changed, nothing for the 4,900 idle histograms;
    # changes older than the 601 snapshots kept are forgotten
    assert entries(store) <= first + 100 * 600
    hist_entries = [store.history.entries(k) for k in store.history.keys() if k[0] == "probe_op_nanoseconds"]
    assert hist_entries == [1] * 4900
    state = store.history[-1][1][("probe_op_nanoseconds", "histogram", (("op", "7"),))]
    assert isinstance(state[2], SparseBins) and state[2].idx.size <= 3  # only the bins that are not empty


def test_old_changes_are_forgotten_with_their_snapshots():
    clock = Clock(T0)
    store = MetricStore(clock=clock, history_seconds=10)
    for t in range(200):
        clock.t = T0 + t * S
        store.set_counter("ticks_total", {}, t)
        store.take_history(clock.t)
    assert len(store.history) == 11
    assert entries(store) <= 11 + 16  # trimmed every 16 snapshots
    w = window_stats(store, 10)
    assert metric(w, "ticks_total")["stats"] == {"delta": 10, "rate": 1.0, "total": 199, "reset": False}


def test_gauge_window_weighs_each_value_by_the_snapshots_it_held():
    clock = Clock(T0)
    store = MetricStore(clock=clock)
    store.set_gauge("level", {}, 1)
    store.take_history(T0)
    for t in (1, 2, 3):  # unchanged: nothing stored for these snapshots
        store.take_history(T0 + t * S)
    store.set_gauge("level", {}, 5)
    store.take_history(T0 + 4 * S)
    g = metric(window_stats(store, 4), "level")["stats"]
    assert g == {"value": 5, "min": 1, "max": 5, "mean": 1.8, "samples": 5}


def test_idle_histogram_window_is_zero_and_a_busy_one_has_its_quantiles():
    clock = Clock(T0)
    store = MetricStore(clock=clock)
    store.add_histogram_values("idle_nanoseconds", {}, np.array([100, 200]))
    store.add_histogram_values("busy_nanoseconds", {}, np.array([100, 200]))
    store.take_history(T0)
    store.add_histogram_values("busy_nanoseconds", {}, np.array([5000] * 10))
    store.take_history(T0 + S)
    w = window_stats(store, 1)
    idle = metric(w, "idle_nanoseconds")["stats"]
    assert idle["count"] == 0 and idle["p50"] is None
    busy = metric(w, "busy_nanoseconds")["stats"]
    assert busy["count"] == 10 and busy["sum"] == 50000 and busy["p50"] == 5000


def test_a_removed_series_leaves_the_snapshots_after_it():
    store = MetricStore(clock=Clock(T0))
    store.set_gauge("g", {"a": "1"}, 1)
    store.take_history(T0)
    store.remove("g", "gauge", {"a": "1"})
    store.take_history(T0 + S)
    (t0, s0), (t1, s1) = list(store.history)
    key = ("g", "gauge", (("a", "1"),))
    assert key in s0 and key not in s1 and list(s1) == []


# -- processes that exited ------------------------------------------------------------
def test_series_of_exited_processes_never_crowd_out_live_ones():
    store = MetricStore(max_series=300)
    for pid in range(1000, 1400):  # 400 short-lived processes, 3 series each
        tags = {"process.pid": str(pid), "rank": "0"}
        store.add_counter("child_events_total", tags, 2)
        store.set_gauge("child_level", tags, 1.0)
        store.add_histogram_values("child_step_nanoseconds", tags, np.array([pid]))
        store.process_exited(pid)
    assert len(store.series) <= 300
    # a live process registered afterwards always gets its series
    store.add_counter("late_probe_total", {"process.pid": "9"}, 42)
    assert store.lookup("late_probe_total")[0].total == 42
    # totals survive the folding: kept exited processes + the folded "exited" series
    events = store.lookup("child_events_total")
    assert sum(s.total for s in events) == 800
    folded = [s for s in events if s.tags["process.pid"] == EXITED]
    assert len(folded) == 1 and folded[0].tags == {"process.pid": EXITED}  # per-process tags go too
    steps = store.lookup("child_step_nanoseconds")
    assert sum(s.count for s in steps) == 400 and max(s.max for s in steps) == 1399
    assert not [s for s in store.lookup("child_level") if s.tags["process.pid"] == EXITED]  # gauges are dropped
    kept = {s.tags["process.pid"] for s in events} - {EXITED}
    assert len(kept) <= store_mod.MAX_EXITED_KEPT
    assert store.lookup(FOLDED_METRIC)[0].total == 400 - len(kept)
    assert store.series_dropped == 0


def test_the_cap_folds_exited_processes_first_then_counts_and_reports():
    store = MetricStore(max_series=50)
    for pid in range(10):
        store.add_counter("c_total", {"process.pid": str(100 + pid)}, 1)
        store.process_exited(100 + pid)  # all kept apart (fewer than MAX_EXITED_KEPT)
    for i in range(60):
        store.add_counter("live_total", {"i": str(i)}, 1)
    live = store.lookup("live_total")
    assert len(live) >= 48  # the exited processes' 10 series were folded into one to make room
    doc = orjson.loads(build_signals(store))
    dropped = metric(doc, DROPPED_SERIES_METRIC)["stats"]["total"]
    assert dropped == 60 - len(live) > 0
    assert sum("series cap of 50" in e["message"] for e in doc["errors"]) == 1
    assert metric(doc, "c_total", **{"process.pid": EXITED})["stats"]["total"] == 10


def test_three_thousand_short_lived_processes_under_graphsignal_run():
    exe = compile_c("fork_many.c")
    # small rings: 3,000 processes each reserve their ring's memory while they live
    proc, signals = run_wrapped([exe, "3000"], env=quiet_env(GRAPHSIGNAL_RING_CAPACITY=1024), timeout=300)
    assert proc.returncode == 0 and proc.stdout == b"done 3000\n"
    # before: their dead series filled the 5000-series cap and this probe never appeared
    assert [m["stats"]["total"] for m in metrics(signals, "late_probe_total")] == [42]
    events = metrics(signals, "child_events_total")
    assert sum(m["stats"]["total"] for m in events) == 3000
    assert len(events) <= store_mod.MAX_EXITED_KEPT + 1
    assert len(signals["metrics"]) < 200
    assert not metrics(signals, DROPPED_SERIES_METRIC)


@pytest.mark.parametrize("value", [(1 << 64) + 1, -(1 << 70), 10 ** 400])
def test_numbers_beyond_64_bits_serialize_as_floats(value):
    store = MetricStore()
    store.set_counter("big_total", {}, value)
    store.set_gauge("big_gauge", {}, value)
    doc = orjson.loads(build_signals(store))
    got = metric(doc, "big_total")["stats"]["total"]
    assert got == (None if value == 10 ** 400 else float(value))
    assert doc["errors"] == []


def test_a_window_with_numbers_beyond_64_bits_still_serializes():
    from werkzeug.test import Client

    from graphsignal.sidecar.server import make_app

    clock = Clock(T0)
    store = MetricStore(clock=clock)
    store.set_counter("big_total", {}, 0)
    store.take_history(T0)
    store.set_counter("big_total", {}, 1 << 70)
    clock.t = T0 + S
    store.take_history(T0 + S)
    r = Client(make_app(store, window_stats)).get("/signals?window=1")
    assert r.status_code == 200
    w = orjson.loads(r.data)["window"]
    assert metric(w, "big_total")["stats"]["delta"] == float(1 << 70)


def test_busy_histogram_windows_read_the_same_bins_through_deltas_and_checkpoints():
    # a busy histogram keeps only the bins hit each second (and a full copy every 16 snapshots):
    # every window must still see exactly the bins recorded inside it
    from graphsignal import histo

    clock = Clock(T0)
    store = MetricStore(clock=clock)
    rng = np.random.default_rng(7)
    dense = [np.zeros(histo.NBINS, dtype=np.int64)]
    for t in range(150):  # more than two checkpoints
        values = rng.integers(1, 1 << 40, 25)
        store.add_histogram_values("busy_nanoseconds", {}, values)
        dense.append(dense[-1] + np.bincount(histo.bin_index(values), minlength=histo.NBINS))
        clock.t = T0 + t * S
        store.take_history(clock.t)
    states = [s for s in store.history.states(("busy_nanoseconds", "histogram", ()))]
    every = store_mod.CHECKPOINT_EVERY
    assert sum(type(b[2]).__name__ == "SparseBins" for b in states) == (len(states) + every - 1) // every
    for seconds in (1, 5, 17, 64, 65, 100, 149):
        h = metric(window_stats(store, seconds), "busy_nanoseconds")["stats"]
        diff = dense[150] - dense[150 - seconds]
        nz = np.flatnonzero(diff)
        expect = histo.quantiles_loglinear(nz, diff[nz], (0.5, 0.95, 0.99))
        assert h["count"] == 25 * seconds and [h["p50"], h["p95"], h["p99"]] == pytest.approx(expect)


def test_dropped_series_counts_each_refused_series_once():
    """graphsignal_dropped_series counts distinct series refused at the
    cap, not the record batches that keep coming for them (issue 36: it
    read 75,000-1.4 M while 15,012 series were refused)."""
    store = MetricStore(max_series=100)
    for batch in range(20):  # every batch of a ring adds to every series again
        for i in range(300):
            store.add_counter("events_total", {"shard": str(i)}, 1)
            store.set_counter("other_total", {"shard": str(i)}, batch)
    doc = orjson.loads(build_signals(store))
    kept = len([m for m in doc["metrics"] if m["name"] in ("events_total", "other_total")])
    assert kept == 100
    assert store.series_dropped == 600 - kept
    assert metric(doc, DROPPED_SERIES_METRIC)["stats"]["total"] == 600 - kept
    assert sum("series cap of 100" in e["message"] for e in doc["errors"]) == 1


def test_dropped_series_past_the_kept_keys_is_an_estimate_in_bounded_memory(monkeypatch):
    monkeypatch.setattr(refused_mod, "MAX_REFUSED_KEPT", 1000)
    refused = refused_mod.RefusedSeries()
    for rep in range(2):  # the same series again count nothing
        for i in range(100_000):
            refused.add(("x_total", "counter", (("i", str(i)),)))
    assert len(refused._kept) == 1000
    assert len(refused._bits) == refused_mod.REFUSED_BITS // 8
    assert abs(len(refused) - 100_000) <= 1000  # linear counting: well within 1 %
