"""?window=N on the server: the same window document the sidecar's
/signals?window=N has (graphsignal.sidecar.windows), from the stored history
(one snapshot a minute, one an hour beyond 24 h) and the latest snapshot.
The window's start is the stored snapshot nearest to N seconds before the
latest upload, so `covered_seconds` says what was actually spanned and
`resolution_seconds` how far apart the snapshots are."""
import numpy as np

from graphsignal import histo
from graphsignal.sidecar import windows as W
from graphsignal.fleet.db import HOUR_NS, MINUTE_ROWS_NS, NS, series_key, state_of
from graphsignal.sidecar.series import BucketHistogram, Counter, Gauge, LogHistogram, Profile

MIN_SECONDS = 60  # the history's resolution


def _bin_index_of_uppers(bins):
    """Log-linear bin indices for bin upper bounds, or None when these are
    not our bins (an engine's `le` buckets)."""
    if not bins or any(b is None or not isinstance(b, int) for b in bins):
        return None
    ub = np.asarray(bins, dtype=np.uint64)
    idx = histo.bin_index(ub)
    if not np.array_equal(histo.BIN_UPPER[idx], ub):
        return None
    return idx


def _hist_kind(state):
    """The series type whose window maths read this converted histogram
    state: log-linear bins (a dense array) or an engine's buckets."""
    return LogHistogram if state is not None and isinstance(state[2], np.ndarray) else BucketHistogram


def _window_state(type_, state):
    """A stored state in the form the series types' window maths read
    (graphsignal.sidecar.series)."""
    if type_ in ("gauge", "counter") or state is None:
        return state
    if type_ == "profile":
        return {name: (v, s) for name, v, s in state}
    count, total, bins, counts = state
    total = float("nan") if total is None else total
    idx = _bin_index_of_uppers(bins)
    if idx is not None:
        full = np.zeros(histo.NBINS, dtype=np.int64)
        full[idx] = counts
        return (count or 0, total, full)
    if bins:
        return (count or 0, total, (tuple(float("inf") if b is None else b for b in bins), tuple(counts)))
    return (count or 0, total, None)


def window(db, owner, iid, snap, seconds):
    """The window document over the last `seconds` of this instance."""
    end_ns = snap["payload_ns"]
    meta, end = {}, {}
    for m in snap["metrics"]:
        k = series_key(m).decode()
        st = m["stats"]
        meta[k] = (m["name"], m["type"], m["tags"], st.get("min"), st.get("max"))
        end[k] = state_of(m)
    rows = [(ts, snap_) for ts, snap_ in db.history(owner, iid, end_ns - seconds * NS) if ts < end_ns]
    history = []
    for ts, states in rows + [(end_ns, end)]:
        history.append((ts, {k: _window_state(meta[k][1], v) for k, v in states.items() if k in meta}))
    si, ei = W.pick(history, seconds)
    start_ns, start = history[si]
    covered = (end_ns - start_ns) / NS
    inside = history[si:ei + 1]
    out = []
    for k in sorted(meta, key=lambda k: (meta[k][0], sorted(meta[k][2].items()), meta[k][1])):
        name, type_, tags, vmin, vmax = meta[k]
        cur, prev = history[ei][1].get(k), start.get(k)
        if type_ == "counter":
            stats = Counter.window(prev, cur, covered)
        elif type_ == "gauge":
            # each stored snapshot is one sample
            stats = Gauge.window(prev, cur, covered, runs=[(snap_.get(k), 1) for _, snap_ in inside])
        elif type_ == "histogram":
            if cur is None:
                continue
            stats = _hist_kind(cur).window(prev, cur, covered, vmin=vmin, vmax=vmax)
        else:
            stats = Profile.window(prev or {}, cur or {}, covered, name=name)
        out.append({"name": name, "type": type_, "tags": tags, "new_in_window": k not in start, "stats": stats})
    partial = si == 0 and covered < seconds
    doc = {"seconds": seconds, "start_ns": start_ns, "end_ns": end_ns, "covered_seconds": round(covered, 6),
           "partial": partial, "snapshots": len(inside),
           "resolution_seconds": 60 if end_ns - start_ns <= MINUTE_ROWS_NS else HOUR_NS // NS, "metrics": out}
    if covered == 0:
        doc["note"] = "no stored snapshot before the latest yet (the server keeps one a minute)"
    elif partial:
        doc["note"] = "the stored history covers %.3f of the %d seconds asked for" % (covered, seconds)
    return doc
