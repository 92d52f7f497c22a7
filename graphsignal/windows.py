"""What happened in the last N seconds: the `window` of GET /signals?window=N.

The poller appends a cumulative snapshot of every series to
store.history about once a second; a window is the difference between
the newest snapshot and the one nearest to N seconds before it. Rates
divide by the seconds the two snapshots actually span (`covered_seconds`),
never by the N that was asked for, so a window that is shorter than asked
(the run is younger than N, or snapshots jittered) still gives true rates.

The document:

    {"seconds": N,                      # asked for
     "start_ns": ..., "end_ns": ...,    # the two snapshots (epoch ns)
     "covered_seconds": 5.002,          # end_ns - start_ns, in seconds
     "partial": false,                  # true: less history than N exists
     "snapshots": 6,                    # snapshots inside [start, end]
     "metrics": [{"name", "type", "tags", "new_in_window", "stats": {...}}]}

`metrics` has the order and keys of the payload's own `metrics`, with
`stats` over the window instead of since start:

- counter: delta, rate (per second), total (at end_ns), reset (the total
  went down, e.g. an engine restarted: delta then counts from zero);
- gauge: value (at end_ns), min, max, mean and samples over the snapshots;
- histogram: count, sum, mean, rate (observations per second) and
  p50/p95/p99 from the bins observed in the window;
- profile: value, samples and rate for the whole profile, and per frame
  value, samples, share (of the profile's window value), rate and mean
  (value per sample), largest first; frames idle in the window are left
  out (frames_idle counts them), at most MAX_FRAMES are listed.

null still means "not measured"; 0 means "measured, nothing happened".
A series first seen inside the window (`new_in_window`) is counted from
zero, exact for everything the sidecar accumulates itself (rings, probes);
a total imported from elsewhere (an engine's or driver's counter first
read inside the window) then includes what happened before it was read.
"""
import bisect

import numpy as np

from graphsignal import histo, kernel_names
from graphsignal.store import (COUNTER, GAUGE, HISTOGRAM, MAX_FRAMES, PROFILE, DeltaBins, Snapshot, SparseBins,
                               bins_diff)

NS = 1_000_000_000


def _history(store):
    # The poller appends while a request reads; copying a deque is one C
    # call under the GIL, but retry if an append still slipped in.
    for _ in range(10):
        try:
            return list(store.history)
        except RuntimeError:
            continue
    return list(store.history)


def pick(history, seconds):
    """Indices (start, end) of the snapshots spanning the last `seconds`:
    end is the newest, start the one whose time is nearest to
    end - seconds (the older on a tie), or the oldest when history is
    shorter. None without any snapshot."""
    if not history:
        return None
    end = len(history) - 1
    target = history[end][0] - seconds * NS
    times = [ts for ts, _ in history]
    i = bisect.bisect_left(times, target)
    if i == 0:
        return 0, end
    if i > end:
        return end, end
    # history[i-1] < target <= history[i]
    start = i if times[i] - target < target - times[i - 1] else i - 1
    return start, end


def window_stats(store, seconds):
    """The window document for the last `seconds` (see the module doc)."""
    history = _history(store)
    span = pick(history, seconds)
    if span is None:
        return {"seconds": seconds, "start_ns": None, "end_ns": None, "covered_seconds": 0.0,
                "partial": True, "snapshots": 0, "metrics": [],
                "note": "no snapshot yet: the first is taken within a second of start"}
    si, ei = span
    start_ns, start = history[si]
    end_ns, end = history[ei]
    covered = (end_ns - start_ns) / NS
    # partial: no snapshot reaches N seconds back (the run is younger, or
    # the poller started late); what exists is used and says its span
    partial = si == 0 and covered < seconds
    inside = history[si:ei + 1]
    with store.lock:
        # a histogram's exact min/max since start also bound its window
        # values, so window quantiles are clamped to them as the
        # cumulative ones are
        series = {key: (s.name, s.type, dict(s.tags), getattr(s, "min", None), getattr(s, "max", None))
                  for key, s in store.series.items()}
    out = []
    for key in sorted(end, key=lambda k: (k[0], k[2], k[1])):
        meta = series.get(key)
        if meta is None:
            continue  # removed since the snapshot
        name, type_, tags, vmin, vmax = meta
        cur = end[key]
        new = key not in start
        prev = start.get(key)
        if type_ == COUNTER:
            stats = _counter(prev, cur, covered)
        elif type_ == GAUGE:
            stats = _gauge(key, inside, start, end)
        elif type_ == HISTOGRAM:
            stats = _histogram(prev, cur, covered, vmin, vmax)
        elif type_ == PROFILE:
            stats = _profile(prev or {}, cur, covered)
            kernel_names.annotate(name, stats["frames"])
        else:
            continue
        out.append({"name": name, "type": type_, "tags": tags, "new_in_window": new, "stats": stats})
    doc = {"seconds": seconds, "start_ns": start_ns, "end_ns": end_ns, "covered_seconds": round(covered, 6),
           "partial": partial, "snapshots": len(inside), "metrics": out}
    if covered == 0:
        doc["note"] = "one snapshot so far: deltas are 0 and rates null until the next (about a second)"
    elif partial:
        doc["note"] = "the run's history covers %.3f of the %d seconds asked for" % (covered, seconds)
    return doc


def _rate(x, covered):
    return (x / covered) if covered > 0 and x is not None else None


def _counter(prev, cur, covered):
    if cur is None:
        return {"delta": None, "rate": None, "total": None, "reset": False}
    reset = prev is not None and cur < prev
    delta = cur if (prev is None or reset) else cur - prev
    return {"delta": delta, "rate": _rate(delta, covered), "total": cur, "reset": reset}


def _gauge(key, inside, start, end):
    latest = end.get(key)
    if isinstance(start, Snapshot) and isinstance(end, Snapshot) and start.history is end.history:
        # the history keeps changes only: weigh each value by the snapshots it held for
        runs = []  # (value, snapshots)
        seq, v = start.seq, start.get(key)
        for cseq, cv in start.history.changes(key, start.seq, end.seq):
            runs.append((v, cseq - seq))
            seq, v = cseq, cv
        runs.append((v, end.seq - seq + 1))
        runs = [(x, n) for x, n in runs if x is not None and n > 0]
        if not runs:
            return {"value": latest, "min": None, "max": None, "mean": None, "samples": 0}
        samples = sum(n for _, n in runs)
        return {"value": latest, "min": min(x for x, _ in runs), "max": max(x for x, _ in runs),
                "mean": sum(x * n for x, n in runs) / samples, "samples": samples}
    vals = []
    for _, snap in inside:
        v = snap.get(key)
        if v is not None:
            vals.append(v)
    if not vals:
        return {"value": latest, "min": None, "max": None, "mean": None, "samples": 0}
    return {"value": latest, "min": min(vals), "max": max(vals), "mean": sum(vals) / len(vals),
            "samples": len(vals)}


def _histogram(prev, cur, covered, vmin=None, vmax=None):
    count, total, bins = cur
    p_count, p_total, p_bins = prev if prev is not None else (0, 0, None)
    q = (None, None, None)
    reset = count < p_count
    if reset:
        p_count, p_total, p_bins = 0, 0, None
    d_count, d_sum = count - p_count, total - p_total
    if isinstance(bins, (SparseBins, DeltaBins)):
        if bins is not p_bins and d_count:  # the same object: nothing changed in the window
            diff = bins_diff(bins, p_bins if isinstance(p_bins, (SparseBins, DeltaBins)) else None)
            nz = np.flatnonzero(diff > 0)
            if nz.size:
                q = histo.quantiles_loglinear(nz, diff[nz], (0.5, 0.95, 0.99), vmin, vmax)
    elif isinstance(bins, np.ndarray):
        diff = bins if p_bins is None or not isinstance(p_bins, np.ndarray) else bins - p_bins
        nz = np.flatnonzero(diff > 0)
        if nz.size:
            q = histo.quantiles_loglinear(nz, diff[nz], (0.5, 0.95, 0.99), vmin, vmax)
    elif bins is not None:
        le, counts = bins
        if isinstance(p_bins, tuple) and tuple(p_bins[0]) == tuple(le):
            per = [c - p for c, p in zip(counts, p_bins[1])]
            if any(x < 0 for x in per):  # buckets went down: the source restarted
                per, reset = list(counts), True
                d_count, d_sum = count, total
        else:
            per = list(counts)  # first seen in the window, or the bucket layout changed
        q = histo.quantiles_buckets(list(le), per, (0.5, 0.95, 0.99))
    return {"count": d_count, "sum": d_sum, "mean": (d_sum / d_count) if d_count else None,
            "rate": _rate(d_count, covered), "p50": q[0], "p95": q[1], "p99": q[2], "reset": reset}


def _profile(prev, cur, covered):
    frames = []
    idle = 0
    total_v = total_s = 0
    for fname, (v, s) in cur.items():
        pv, ps = prev.get(fname, (0, 0))
        dv, ds = v - pv, s - ps
        if dv < 0 or ds < 0:  # cannot happen for sidecar-accumulated frames; be safe
            dv, ds = v, s
        if dv == 0 and ds == 0:
            idle += 1
            continue
        total_v += dv
        total_s += ds
        frames.append((fname, dv, ds))
    frames.sort(key=lambda f: (-f[1], -f[2], f[0]))
    listed = frames[:MAX_FRAMES]
    return {
        "value": total_v, "samples": total_s, "rate": _rate(total_v, covered),
        "frames": [{"name": n, "value": v, "samples": s, "share": (v / total_v) if total_v else None,
                    "rate": _rate(v, covered), "mean": (v / s) if s else None} for n, v, s in listed],
        "frames_omitted": len(frames) - len(listed), "frames_idle": idle,
    }
