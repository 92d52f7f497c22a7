"""Window maths: what a series did between two of its cumulative states,
for the sidecar's /signals?window=N (graphsignal.sidecar.windows) and
graphsignal-server's (graphsignal.fleet.windows) alike; and pick(), the
one rule for which two states span "the last N seconds".

A state is what a series holds since it began, at one moment; immutable.
By the series' type (the payload's `type`):

  counter    total: an int or a float; None: not measured
  gauge      value: an int or a float; None: not measured
  histogram  (count, sum, bins): count an int; sum a number (None: not
             known); bins one of
               None                    no bins
               SparseBins, DeltaBins   log-linear: cumulative counts of
                                       graphsignal.histo's NBINS bins
                                       (probes, rings)
               (le, counts)            an engine's buckets: upper bounds
                                       (ascending, may end in inf) and
                                       per-bucket counts (not cumulative),
                                       two tuples of the same length
  profile    {frame: (value, samples)}, both cumulative (the pair may be
             a list)

Two states of one series give a window (window(), or the function of the
type): prev at the window's start (None: the series had no state then,
and is counted from zero), cur at its end, `covered` the seconds between
them. Rates divide by `covered`. What each type's window holds is in its
function's doc.

The types of these forms are graphsignal.signals_model's (SeriesState,
HistogramState, LogBins, ...): every reader of a series view reads its
state in one of them. plain_stats() is a state's payload `stats` without
anything computed (no quantiles: what sums over series need); state_of()
the state a payload's `stats` give back.

States travel and are kept in a JSON form: a counter's, gauge's and
profile's as they are (a pair is a list); a histogram's as [count, sum,
bins] with bins null, {"idx": [bin indices], "counts": [...]}
(log-linear) or {"le": [upper bounds, null for inf], "counts": [...]}
(buckets). dump_state() writes it (the sidecar's uploads carry each
changed series' state so, graphsignal.upload_model; a profile's stats
list its frames up to the payload's cut, so beside them only the rest
travels), load_state() reads it. stored_state() is the JSON form of what
a series' payload `stats` give: with a profile's rest, exactly its state
(graphsignal-server joins them so); from the stats alone (an upload of
the first schema) exact but for a profile's, which has only the frames
the payload lists (its largest).
"""
import bisect
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union, cast

import numpy as np
import numpy.typing as npt

from graphsignal import config, histo
from graphsignal.signals_model import OTHER_FRAME, HistogramBins, HistogramState, Number, ProfileState, SeriesState

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"
PROFILE = "profile"

NS = 1_000_000_000
MAX_FRAMES = config.MAX_TOP_FRAMES  # frames a profile's window lists (the largest), as /signals does
MAX_FRAMES_KEPT = 20000  # frames a profile keeps before new names are folded into "(other)"
QUANTILES = (0.5, 0.95, 0.99)

Doc = Dict[str, Any]


def pick(times: Sequence[int], seconds: float) -> Optional[Tuple[int, int]]:
    """The one rule for "the last N seconds": indices (start, end) into
    ascending snapshot times (epoch ns) spanning the last `seconds`. end is
    the newest; start the one whose time is nearest to end - seconds (the
    older on a tie), or the oldest when history is shorter. None without
    any snapshot."""
    if not times:
        return None
    end = len(times) - 1
    target = times[end] - seconds * NS
    i = bisect.bisect_left(times, target)
    if i == 0:
        return 0, end
    if i > end:
        return end, end
    # times[i-1] < target <= times[i]
    start = i if times[i] - target < target - times[i - 1] else i - 1
    return start, end


def rate(x: Optional[float], covered: float) -> Optional[float]:
    """x per second over `covered` seconds (None: not measured, or no time)."""
    return (x / covered) if covered > 0 and x is not None else None


# -- log-linear bins ------------------------------------------------------------------
class SparseBins:
    """A histogram's cumulative log-linear bin counts: only the bins that
    are not empty (of histo.NBINS). The sidecar's history keeps one of
    these every CHECKPOINT_EVERY-th state of a histogram (the states in
    between are DeltaBins)."""

    __slots__ = ("idx", "counts")
    depth = 0
    base: "Optional[Bins]" = None

    def __init__(self, idx: "npt.NDArray[Any]", counts: "npt.NDArray[Any]") -> None:
        self.idx, self.counts = idx, counts

    @classmethod
    def of(cls, dense: "npt.NDArray[Any]") -> "SparseBins":
        nz = np.flatnonzero(dense)
        return cls(nz.astype(np.uint16), dense[nz].copy())

    def dense(self) -> "npt.NDArray[np.int64]":
        out = np.zeros(histo.NBINS, dtype=np.int64)
        out[self.idx] = self.counts
        return out

    def nonzero(self) -> "Tuple[npt.NDArray[Any], npt.NDArray[Any]]":
        """(bin indices, counts) of the bins that are not empty, ascending."""
        return self.idx, self.counts


class DeltaBins:
    """Cumulative bins as the previous state's plus the bins hit since
    (packed in one bytes object: uint16 bin indices, then int64 counts)."""

    __slots__ = ("base", "_packed", "depth")

    def __init__(self, base: "Bins", idx: "npt.NDArray[Any]", counts: "npt.NDArray[Any]") -> None:
        self.base = base
        self._packed = idx.astype("<u2").tobytes() + counts.astype("<i8").tobytes()
        self.depth: int = base.depth + 1

    @property
    def idx(self) -> "npt.NDArray[Any]":
        return np.frombuffer(self._packed, dtype="<u2", count=len(self._packed) // 10)

    @property
    def counts(self) -> "npt.NDArray[Any]":
        n = len(self._packed) // 10
        return np.frombuffer(self._packed, dtype="<i8", count=n, offset=2 * n)

    def dense(self) -> "npt.NDArray[np.int64]":
        out = self.base.dense()
        np.add.at(out, self.idx, self.counts)
        return out

    def nonzero(self) -> "Tuple[npt.NDArray[Any], npt.NDArray[Any]]":
        """(bin indices, counts) of the bins that are not empty, ascending."""
        dense = self.dense()
        nz = np.flatnonzero(dense)
        return nz, dense[nz]


Bins = Union[SparseBins, DeltaBins]


def bins_diff(cur: Bins, prev: Optional[Bins]) -> "npt.NDArray[np.int64]":
    """Dense bins(cur) - bins(prev) for two states of one histogram (prev
    may be None: since start)."""
    # the common case, a short window: prev is an ancestor of cur, so the
    # difference is the deltas in between
    out = np.zeros(histo.NBINS, dtype=np.int64)
    b: Optional[Bins] = cur
    while b is not None and b is not prev and isinstance(b, DeltaBins):
        np.add.at(out, b.idx, b.counts)
        b = b.base
    if b is prev:
        return out
    assert b is not None  # a chain ends in a SparseBins
    out += b.dense()  # b: a checkpoint (prev is older or unrelated)
    if prev is not None:
        out -= prev.dense()
    return out


# -- the windows ----------------------------------------------------------------------
def counter(prev: Optional[float], cur: Optional[float], covered: float) -> Doc:
    """delta, rate (per second), total (at the end), reset (the total went
    down, e.g. an engine restarted: delta then counts from zero)."""
    if cur is None:
        return {"delta": None, "rate": None, "total": None, "reset": False}
    reset = prev is not None and cur < prev
    delta = cur if (prev is None or reset) else cur - prev
    return {"delta": delta, "rate": rate(delta, covered), "total": cur, "reset": reset}


def gauge(cur: Optional[float], runs: Iterable[Tuple[Optional[float], int]] = ()) -> Doc:
    """value (at the end), min, max, mean and samples over the window's
    snapshots; runs: [(value, snapshots it held for)]."""
    held = [(x, n) for x, n in runs if x is not None and n > 0]
    if not held:
        return {"value": cur, "min": None, "max": None, "mean": None, "samples": 0}
    samples = sum(n for _, n in held)
    return {"value": cur, "min": min(x for x, _ in held), "max": max(x for x, _ in held),
            "mean": sum(x * n for x, n in held) / samples, "samples": samples}


def histogram(prev: Any, cur: Any, covered: float, vmin: Optional[float] = None,
              vmax: Optional[float] = None) -> Doc:
    """count, sum, mean, rate (observations per second) and p50/p95/p99
    from the bins observed in the window; reset: the count, or a bucket,
    went down (the source restarted: the window counts from zero).
    Log-linear quantiles are clamped to vmin/vmax, the exact min and max
    since start where known (they bound the window's values too)."""
    count, total, bins = cur
    p_count, p_total, p_bins = prev if prev is not None else (0, 0, None)
    q: Sequence[Optional[float]] = (None, None, None)
    reset = count < p_count
    if reset:
        p_count, p_total, p_bins = 0, 0, None
    d_count = count - p_count
    d_sum = None if total is None or p_total is None else total - p_total
    if isinstance(bins, tuple):
        le, counts = bins
        if isinstance(p_bins, tuple) and tuple(p_bins[0]) == tuple(le):
            per = [c - p for c, p in zip(counts, p_bins[1])]
            if any(x < 0 for x in per):  # buckets went down: the source restarted
                per, reset = list(counts), True
                d_count, d_sum = count, total
        else:
            per = list(counts)  # first seen in the window, or the bucket layout changed
        q = histo.quantiles_buckets(list(le), per, QUANTILES)
    elif bins is not None and bins is not p_bins and d_count:  # the same object: nothing changed
        diff = bins_diff(bins, p_bins if isinstance(p_bins, (SparseBins, DeltaBins)) else None)
        nz = np.flatnonzero(diff > 0)
        if nz.size:
            q = histo.quantiles_loglinear(nz, diff[nz], QUANTILES, vmin, vmax)
    return {"count": d_count, "sum": d_sum, "mean": (d_sum / d_count) if d_count and d_sum is not None else None,
            "rate": rate(d_count, covered), "p50": q[0], "p95": q[1], "p99": q[2], "reset": reset}


def profile(prev: Optional[Mapping[str, Sequence[Any]]], cur: Optional[Mapping[str, Sequence[Any]]],
            covered: float) -> Doc:
    """value, samples and rate of the whole profile; per frame name,
    value, samples, share (of the window's value), rate and mean (value
    per sample), largest first; idle frames are counted in frames_idle,
    at most MAX_FRAMES are listed (frames_omitted counts the rest)."""
    prev = prev or {}
    frames = []
    idle = 0
    total_v = total_s = 0
    for fname, (v, s) in (cur or {}).items():
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
        "value": total_v, "samples": total_s, "rate": rate(total_v, covered),
        "frames": [{"name": n, "value": v, "samples": s, "share": (v / total_v) if total_v else None,
                    "rate": rate(v, covered), "mean": (v / s) if s else None} for n, v, s in listed],
        "frames_omitted": len(frames) - len(listed), "frames_idle": idle,
    }


def window(type_: str, prev: Any, cur: Any, covered: float, runs: Iterable[Tuple[Any, int]] = (),
           vmin: Optional[float] = None, vmax: Optional[float] = None) -> Doc:
    """The window of a series of this type (see the functions above).
    runs: a gauge's values over the window; vmin, vmax: a histogram's
    bounds."""
    if type_ == COUNTER:
        return counter(prev, cur, covered)
    if type_ == GAUGE:
        return gauge(cur, runs)
    if type_ == HISTOGRAM:
        return histogram(prev, cur, covered, vmin, vmax)
    return profile(prev, cur, covered)


# -- states from payloads, in JSON -------------------------------------------------
_U64_MAX = (1 << 64) - 1


def loglinear_index(bins: Sequence[Any]) -> "Optional[npt.NDArray[Any]]":
    """Log-linear bin indices for bin upper bounds, or None when these are
    not our bins (an engine's `le` buckets)."""
    if not bins or any(type(b) is not int or not 0 <= b <= _U64_MAX for b in bins):
        return None
    ub = np.asarray(bins, dtype=np.uint64)
    idx = histo.bin_index(ub)
    if not np.array_equal(histo.BIN_UPPER[idx], ub):
        return None
    return idx


def stored_state(type_: str, stats: Mapping[str, Any], rest: Optional[Mapping[str, Any]] = None) -> Any:
    """A series' state from its payload `stats` (graphsignal.sidecar.series),
    in the JSON form (see the module doc). A histogram's bins are
    log-linear when they are exactly histo's upper bounds, else an
    engine's buckets. rest: a profile's frames its stats do not list
    ({frame: [value, samples]}, what an upload carries beside them): with
    it the state is exact, the "(other)" of a cut stats (frames_folded)
    being those frames summed; without it a cut profile's state is its
    listed frames and that "(other)"."""
    if type_ == GAUGE:
        return stats.get("value")
    if type_ == COUNTER:
        return stats.get("total")
    if type_ == HISTOGRAM:
        count, total = stats.get("count") or 0, stats.get("sum")
        bins, counts = stats.get("bins") or [], stats.get("counts") or []
        idx = loglinear_index(bins)
        if idx is not None:
            return [count, total, {"idx": idx.tolist(), "counts": counts}]
        return [count, total, {"le": bins, "counts": counts} if bins else None]
    frames = stats.get("frames") or []
    if rest is None:
        return {f["name"]: [f["value"], f["samples"]] for f in frames}
    cut = bool(stats.get("frames_folded"))
    out = {f["name"]: [f["value"], f["samples"]] for f in frames if not (cut and f["name"] == OTHER_FRAME)}
    out.update(rest)
    return out


def dump_state(type_: str, state: Any) -> Any:
    """The JSON form (see the module doc) of a state; load_state's
    inverse. A log-linear histogram's bin indices and counts stay numpy
    arrays (JSON writers with numpy support write them as lists)."""
    if type_ != HISTOGRAM or state is None:
        return state
    count, total, bins = state
    if bins is None:
        return [count, total, None]
    if isinstance(bins, tuple):
        le, counts = bins
        return [count, total, {"le": [None if b == float("inf") else b for b in le], "counts": list(counts)}]
    if isinstance(bins, DeltaBins):
        bins = SparseBins.of(bins.dense())
    return [count, total, {"idx": bins.idx, "counts": bins.counts}]


def load_state(type_: str, obj: Any) -> Any:
    """The state of its JSON form (see the module doc)."""
    if type_ != HISTOGRAM or obj is None:
        return obj
    count, total, bins = obj
    if bins is None:
        return (count, total, None)
    if "le" in bins:
        return (count, total, (tuple(float("inf") if b is None else b for b in bins["le"]), tuple(bins["counts"])))
    try:
        return (count, total, SparseBins(np.asarray(bins["idx"], dtype=np.uint16),
                                         np.asarray(bins["counts"], dtype=np.int64)))
    except (OverflowError, ValueError, TypeError):
        # counts no int64 holds (a row stored before the server refused them):
        # the bins are unknown, the window's quantiles null
        return (count, total, None)


# -- states and payload stats -------------------------------------------------------
def plain_stats(type_: str, state: SeriesState) -> Dict[str, Any]:
    """A state's payload `stats` without anything computed: no quantiles,
    min or max, and a profile's every frame, uncut, unsorted and unnamed
    (for sums over series: graphsignal.engine_summary). A histogram's
    log-linear bins are left out (bins and counts []), an engine's buckets
    kept (bins: upper bounds, None for inf)."""
    if type_ == GAUGE:
        return {"value": state}
    if type_ == COUNTER:
        return {"total": state}
    if type_ == HISTOGRAM:
        count, total, bins = cast(HistogramState, state)
        if isinstance(bins, tuple):
            le, counts = bins
            return {"count": count, "sum": total, "bins": [None if b == float("inf") else b for b in le],
                    "counts": list(counts)}
        return {"count": count, "sum": total, "bins": [], "counts": []}
    frames = cast(ProfileState, state or {})
    return {"frames": [{"name": k, "value": v[0], "samples": v[1]} for k, v in frames.items()]}


def state_of(type_: str, stats: Mapping[str, Any]) -> SeriesState:
    """The state a series' payload `stats` give: exact, but for a
    profile's, which has only the frames the payload lists (and the cut's
    "(other)" as one of them). A histogram's bins are log-linear when they
    are exactly histo's upper bounds (and their counts int64s), else an
    engine's buckets."""
    if type_ == GAUGE or type_ == COUNTER:
        number: Optional[Number] = stats.get("value" if type_ == GAUGE else "total")
        return number
    if type_ == HISTOGRAM:
        count = cast(int, stats.get("count"))  # (a recorded engine histogram's may be null)
        return (count, stats.get("sum"), _bins_of(stats.get("bins") or [], stats.get("counts") or []))
    return {f["name"]: (f["value"], f["samples"]) for f in stats.get("frames") or []}


def _bins_of(bins: Sequence[Any], counts: Sequence[Any]) -> HistogramBins:
    if not bins:
        return None
    idx = loglinear_index(bins)
    if idx is not None:
        try:
            return SparseBins(idx, np.asarray(counts, dtype=np.int64))
        except (OverflowError, ValueError, TypeError):
            pass  # counts no int64 holds: an engine's, then
    return (tuple(float("inf") if b is None else b for b in bins), tuple(counts))
