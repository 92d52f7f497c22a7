"""What happened in the last N seconds: the `window` of GET /signals?window=N.

The sidecar's clock appends a cumulative snapshot of every series to the
store's history about once a second; a window is the difference between
the newest snapshot and the one nearest to N seconds before it (the one
rule, graphsignal.windowmath.pick). Everything is read from one
store.snapshot(); the window maths are graphsignal.windowmath's, the same
graphsignal-server's windows use. Which
snapshots and the seconds between them are the monotonic clock's (a wall
clock that steps moves neither); start_ns and end_ns are epoch ns to
show. Rates divide by the seconds the two snapshots actually span
(`covered_seconds`),
never by the N that was asked for, so a window that is shorter than asked
(the run is younger than N, or snapshots jittered) still gives true rates.

The document:

    {"seconds": N,                      # asked for
     "start_ns": ..., "end_ns": ...,    # the two snapshots (epoch ns)
     "covered_seconds": 5.002,          # between the two, by the monotonic clock
     "partial": false,                  # true: less history than N exists
     "snapshots": 6,                    # snapshots inside [start, end]
     "metrics": [{"name", "type", "tags", "new_in_window", "stats": {...}}],
     "engine": {...}}                   # with an engine: its tokens and requests in
                                        # the window and work_per_token / _request
                                        # (graphsignal.engine_summary.window_work)

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
  out (frames_idle counts them), at most MAX_FRAMES are listed; a kernel
  frame also has display_name and category (graphsignal.naming).

null still means "not measured"; 0 means "measured, nothing happened".
A series first seen inside the window (`new_in_window`) is counted from
zero, exact for everything the sidecar accumulates itself (rings, probes);
a total imported from elsewhere (an engine's or driver's counter first
read inside the window) then includes what happened before it was read.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

from graphsignal import naming, windowmath
from graphsignal.signals_model import SnapshotSource, StoreSnapshot
from graphsignal.windowmath import GAUGE, PROFILE

__all__ = ["window_stats", "window_of", "pick"]


def pick(history: Sequence[Tuple[int, Any]], seconds: float) -> Optional[Tuple[int, int]]:
    """graphsignal.windowmath.pick (the one rule for "the last N seconds")
    over a sequence of (ts_ns, snapshot) pairs."""
    return windowmath.pick([ts for ts, _ in history], seconds)


def window_stats(store: SnapshotSource, seconds: int) -> Dict[str, Any]:
    """The window document for the last `seconds` (see the module doc)."""
    return window_of(store.snapshot(), seconds)


def window_of(snap: StoreSnapshot, seconds: int) -> Dict[str, Any]:
    """The window document for the last `seconds` of a StoreSnapshot."""
    span = snap.history.span(seconds)
    if span is None:
        return {"seconds": seconds, "start_ns": None, "end_ns": None, "covered_seconds": 0.0,
                "partial": True, "snapshots": 0, "metrics": [],
                "note": "no snapshot yet: the first is taken within a second of start"}
    history = snap.history
    si, ei = span
    start_ns, start = history[si]
    end_ns, end = history[ei]
    # by the monotonic clock: a wall clock that stepped between the two
    # snapshots must not stretch or shrink the window
    covered = history.seconds_between(si, ei)
    # partial: no snapshot reaches N seconds back (the run is younger, or
    # the clock started late); what exists is used and says its span
    partial = si == 0 and covered < seconds
    # a histogram's exact min/max since start also bound its window values,
    # so window quantiles are clamped to them as the cumulative ones are
    current = {v.key: v for v in snap.series}
    out: List[Dict[str, Any]] = []
    for key in sorted(end, key=lambda k: (k[0], k[2], k[1])):
        view = current.get(key)
        if view is None:
            continue  # removed since the snapshot
        prev, cur = start.get(key), end[key]
        runs = history.runs(key, si, ei) if view.type == GAUGE else ()
        vmin, vmax = view.bounds
        stats = windowmath.window(view.type, prev, cur, covered, runs, vmin, vmax)
        if view.type == PROFILE:
            naming.annotate(view.name, stats["frames"])
        out.append({"name": view.name, "type": view.type, "tags": dict(view.tags), "new_in_window": key not in start,
                    "stats": stats})
    doc: Dict[str, Any] = {"seconds": seconds, "start_ns": start_ns, "end_ns": end_ns,
                           "covered_seconds": round(covered, 6), "partial": partial, "snapshots": ei - si + 1,
                           "metrics": out}
    engine = _engine_work(out)
    if engine is not None:
        doc["engine"] = engine
    if covered == 0:
        doc["note"] = "one snapshot so far: deltas are 0 and rates null until the next (about a second)"
    elif partial:
        doc["note"] = "the run's history covers %.3f of the %d seconds asked for" % (covered, seconds)
    return doc


def _engine_work(metrics: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The engine's tokens and requests in the window, and what the
    workload did for them (graphsignal.engine_summary.window_work); None
    without an engine. A failure there costs this part only."""
    try:
        from graphsignal import engine_summary

        return engine_summary.window_work(metrics)
    except Exception as e:
        from graphsignal import report

        report.once(("windows", "engine_work"), "window engine figures failed: %s: %s" % (type(e).__name__, e))
        return None
