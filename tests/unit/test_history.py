"""The per-second history (graphsignal.sidecar.history) on its own, against
a plain model: a list of every snapshot's full {key: state}. Views taken
along the way must keep reading what they saw while the history goes on
being written, forgets old snapshots and trims old changes."""
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsignal.sidecar import store as store_mod
from graphsignal.sidecar.history import History, HistorySnapshot, HistoryView, pick

S = 1_000_000_000
T0 = 1_700_000_000 * S
NAMES = ("a", "b", "c")
KEYS = [(n, "gauge", tags) for n in NAMES for tags in ((), (("device.index", "0"),))]

OPS = st.lists(st.one_of(st.tuples(st.just("set"), st.sampled_from(KEYS), st.integers(0, 3)),
                         st.tuples(st.just("remove"), st.sampled_from(KEYS), st.just(0)),
                         st.tuples(st.just("tick"), st.just(KEYS[0]), st.integers(1, 12))),
               min_size=1, max_size=120)


def check(view, want):
    """The view reads exactly the snapshots `want` ([(ts, {key: state})])."""
    assert isinstance(view, HistoryView)
    assert len(view) == len(want)
    assert view.times == tuple(ts for ts, _ in want)
    assert [ts for ts, _ in view] == [ts for ts, _ in want]
    assert [ts for ts, _ in reversed(view)] == [ts for ts, _ in reversed(want)]
    for i, (ts, states) in enumerate(want):
        got_ts, snap = view[i]
        assert isinstance(snap, HistorySnapshot)
        assert got_ts == ts
        assert dict(snap.items()) == states
        assert len(snap) == len(states)
        for key in KEYS:
            assert (key in snap) == (key in states)
            assert snap.get(key, "none") == states.get(key, "none")
        for name in NAMES:
            assert sorted(snap.items_named([name])) == sorted((k, v) for k, v in states.items() if k[0] == name)
            assert snap.has_name(name) == any(k[0] == name for k in states)
    assert [ts for ts, _ in view[1:3]] == [ts for ts, _ in want[1:3]]
    for key in KEYS:
        for start, end in ((0, len(want) - 1), (len(want) // 2, len(want) - 1), (0, len(want) // 2)):
            if not want or start > end:
                continue
            seen = [x for state, n in view.runs(key, start, end) for x in [state] * n]
            assert seen == [states.get(key) for _, states in want[start:end + 1]]


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(2, 24))
def test_views_read_what_the_model_holds_while_the_history_goes_on(ops, maxlen):
    h = History(maxlen)
    live, changed, snaps, views = {}, set(), [], []
    ts = T0
    for op, key, val in ops:
        if op == "set":
            live[key] = val
            changed.add(key)
        elif op == "remove":
            if key in live:
                h.removed(key)
                del live[key]
                changed.discard(key)
        else:
            for _ in range(val):
                seq = h.begin()
                for k in sorted(changed):
                    h.record(k, seq, live[k], "gauge")
                changed.clear()
                ts += S
                h.commit(seq, ts)
                snaps.append((ts, dict(live)))
                views.append((h.view(), snaps[-maxlen:]))
    assert len(h) == min(len(snaps), maxlen)
    for view, want in views:  # every view, taken at any time, still reads its own moment
        check(view, want)
    if snaps:
        assert h.view().max_seconds == maxlen - 1
        assert [ts for ts, _ in h] == [ts for ts, _ in snaps[-maxlen:]]


def test_an_idle_series_costs_one_entry_and_old_changes_are_trimmed():
    h = History(10)
    key, busy = KEYS[0], KEYS[1]
    for i in range(100):
        seq = h.begin()
        if i == 0:
            h.record(key, seq, 1, "gauge")
        h.record(busy, seq, i, "gauge")
        h.commit(seq, T0 + i * S)
    assert h.entries(key) == 1  # idle since the first snapshot
    # the busy one: the last 10 snapshots' changes, plus at most the 16 the trim waits for
    assert 10 <= h.entries(busy) <= 10 + 16
    assert h.states(busy)[-1] == 99
    assert h[0][1][key] == 1 and h[0][1][busy] == 90


def test_a_removed_series_is_gone_from_the_next_snapshot_and_then_forgotten():
    h = History(4)
    key = KEYS[2]
    seq = h.begin()
    h.record(key, seq, 7, "gauge")
    h.commit(seq, T0)
    before = h.view()
    h.removed(key)
    for i in range(1, 40):
        seq = h.begin()
        h.commit(seq, T0 + i * S)
    assert key not in h[-1][1] and h.view().kind(key) is None and key not in h.keys()
    assert before[0][1][key] == 7 and before.kind(key) == "gauge"  # an earlier view keeps it


def test_pick_takes_the_snapshot_nearest_n_seconds_back():
    times = [T0 + i * S for i in range(7)]
    assert pick(times, 1) == (5, 6)
    assert pick(times, 2.5) == (3, 6)  # 3.5 s back: a tie goes to the older
    assert pick(times, 600) == (0, 6)
    assert pick(times[:1], 5) == (0, 0)
    assert pick([], 5) is None


def test_the_store_keeps_its_names_for_what_moved():
    # the store's readers (graphsignal.sidecar.windows, scripts) still find these there
    assert store_mod.pick is pick and store_mod.History is History
    assert store_mod.HistoryView is HistoryView and store_mod.HistorySnapshot is HistorySnapshot
    s = store_mod.MetricStore()
    assert isinstance(s.history, History) and isinstance(s.snapshot().history, HistoryView)
