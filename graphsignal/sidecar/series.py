"""The series types of the metric store. Each type owns its cumulative
state, its payload `stats` and its window maths; nothing else decodes a
state.

A live series (Gauge, Counter, LogHistogram, BucketHistogram, Profile) is
written by graphsignal.sidecar.store under the store's lock. Readers never touch
one: store.snapshot() hands them SeriesViews, immutable copies taken under
the lock, and the history keeps per-second states. From those, the type's
static maths compute:

  Type.stats_of(state, name, max_frames)    the payload's `stats` (since start)
  Type.window(prev, cur, covered, ...)      the window's `stats` between two
                                            history states, `covered` seconds
                                            apart (graphsignal.sidecar.windows)

The two histogram kinds are two types that both report as "histogram":
LogHistogram accumulates log-linear bins from raw values (probes: exact
count, sum, min and max), BucketHistogram holds an engine's cumulative `le`
buckets as last scraped (min and max are not measured and stay null).

States (immutable; units are the series' own, in its name):

  Gauge            value (None: not measured)
  Counter          total (a Python int or float; None: not measured)
  LogHistogram     view: (count, sum, min, max, (bin indices, counts));
                   history: (count, sum, SparseBins | DeltaBins)
  BucketHistogram  (count, sum, (le tuple, per-bucket counts tuple) | None)
  Profile          {frame: (value, samples)}
"""
from typing import Any, Optional

import numpy as np
import orjson

from graphsignal import histo, kernel_names

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"
PROFILE = "profile"

MAX_FRAMES = 250  # frames rendered per profile (the largest)
MAX_FRAMES_KEPT = 20000  # frames kept per profile before new names are folded into "(other)"
CHECKPOINT_EVERY = 64  # history states of a histogram between two full copies of its bins
QUANTILES = (0.5, 0.95, 0.99)

_JSON_OPT = orjson.OPT_SERIALIZE_NUMPY
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def _json_safe(obj):
    """obj with every int outside orjson's 64-bit range as a float (inf,
    which JSON lacks, as None)."""
    if isinstance(obj, int) and not isinstance(obj, bool):
        if _INT_MIN <= obj <= _INT_MAX:
            return obj
        try:
            return float(obj)
        except OverflowError:
            return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray) and obj.dtype == object:
        return [_json_safe(v) for v in obj.tolist()]
    return obj


def dumps(obj: Any) -> bytes:
    """orjson.dumps that never fails on a number: integers beyond 64 bits
    become floats (see graphsignal.sidecar.store's module doc)."""
    try:
        return orjson.dumps(obj, option=_JSON_OPT)
    except orjson.JSONEncodeError:
        return orjson.dumps(_json_safe(obj), option=_JSON_OPT)


def _rate(x, covered):
    return (x / covered) if covered > 0 and x is not None else None


class SeriesView:
    """One series as of a snapshot: name, type, tags, updated_ns (epoch ns
    of its last change), its immutable state and its type (`kind`, whose
    maths read the state). encoded() is its /signals JSON, computed once."""

    __slots__ = ("name", "type", "tags", "updated_ns", "state", "kind", "created", "_head", "_json", "_max_frames")

    def __init__(self, series, state):
        self.created = series.created  # the order series were made in (see StoreSnapshot.named)
        self.name = series.name
        self.type = series.type
        self.tags = series.tags  # never changed after the series is made: shared, read-only
        self.updated_ns = series.updated_ns
        self.state = state
        self.kind = type(series)
        self._head = series._head
        self._max_frames = series.max_frames  # a plain read: getattr's default would cost a raised AttributeError
        self._json = None

    @property
    def key(self):
        return (self.name, self.type, tuple(sorted(self.tags.items())))

    def stats(self):
        return self.kind.stats_of(self.state, self.name, self._max_frames)

    def encoded(self):
        """{name, type, tags, stats, updated_ns} as JSON bytes. The same
        bytes object on every call (readers skip unchanged series by
        identity)."""
        if self._json is None:
            self._json = b"".join((self._head, b',"stats":',
                                   self.kind.stats_json(self.state, self.name, self._max_frames),
                                   b',"updated_ns":', orjson.dumps(self.updated_ns), b"}"))
        return self._json


class Series:
    """A live series: written under the store's lock, read only through
    view() (a SeriesView, cached until the series changes)."""

    __slots__ = ("name", "tags", "updated_ns", "created", "_view", "_head", "_changed", "_stale")
    type: Optional[str] = None  # the payload's "type" (each subclass's)
    max_frames = MAX_FRAMES  # frames rendered (Profile's own slot overrides it)

    def __init__(self, name, tags):
        self.name = name
        self.tags = dict(tags)
        self.updated_ns = None
        self.created = 0
        self._view = None
        self._changed = True  # since the last history snapshot
        self._stale = None
        # '{"name":..,"type":..,"tags":{..}' never changes: serialize it once
        self._head = orjson.dumps({"name": name, "type": self.type, "tags": self.tags})[:-1]

    def bind(self, stale, created):
        """Joins a store: touch() adds the series to `stale` (the store's
        set of series whose view is out of date); created: its number."""
        self._stale = stale
        self.created = created

    def touch(self, ts):
        """The series changed at ts (epoch ns)."""
        self.updated_ns = ts
        self._view = None
        self._changed = True
        if self._stale is not None:
            self._stale.add(self)

    def view(self):
        v = self._view
        if v is None:
            v = self._view = SeriesView(self, self.state())
        return v

    def take_changed(self):
        """True once after each change: whether the next history snapshot
        stores this series' state."""
        changed, self._changed = self._changed, False
        return changed

    def stats(self):
        return self.view().stats()

    def to_json(self):
        return self.view().encoded()

    def state(self):
        """The cumulative state (immutable: see the module doc)."""
        raise NotImplementedError

    def history_state(self):
        """The state the per-second history keeps (called once per
        history snapshot in which the series changed)."""
        return self.view().state

    def merge(self, src):
        """Adds src's cumulative values (a series of the same type) into
        this one (the store folds exited processes)."""

    @staticmethod
    def bounds(state):
        """(min, max) ever observed, where the type measures them (they
        bound a window's quantiles too), else (None, None)."""
        return None, None

    @staticmethod
    def plain_stats(state):
        """The stats without anything computed (no quantiles), for merging
        over series (graphsignal.engine_summary); None: not mergeable."""
        return None

    @classmethod
    def stats_json(cls, state, name, max_frames):
        st = cls.stats_of(state, name, max_frames)
        try:
            return orjson.dumps(st, option=_JSON_OPT)
        except orjson.JSONEncodeError:
            return dumps(st)


class Gauge(Series):
    __slots__ = ("value",)
    type = GAUGE

    def __init__(self, name, tags):
        Series.__init__(self, name, tags)
        self.value = None

    def state(self):
        return self.value

    @staticmethod
    def stats_of(state, name=None, max_frames=None):
        return {"value": state}

    plain_stats = stats_of

    @classmethod
    def stats_json(cls, state, name=None, max_frames=None):
        try:
            return b'{"value":' + orjson.dumps(state, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:
            return b'{"value":' + dumps(state) + b"}"

    @staticmethod
    def window(prev, cur, covered, runs=(), **_):
        """value (at the end), min, max, mean and samples over the window's
        snapshots; runs: [(value, snapshots it held for)]."""
        runs = [(x, n) for x, n in runs if x is not None and n > 0]
        if not runs:
            return {"value": cur, "min": None, "max": None, "mean": None, "samples": 0}
        samples = sum(n for _, n in runs)
        return {"value": cur, "min": min(x for x, _ in runs), "max": max(x for x, _ in runs),
                "mean": sum(x * n for x, n in runs) / samples, "samples": samples}


class Counter(Series):
    __slots__ = ("total",)
    type = COUNTER

    def __init__(self, name, tags):
        Series.__init__(self, name, tags)
        self.total = None

    def state(self):
        return self.total

    def merge(self, src):
        if src.total is not None:
            self.total = (self.total or 0) + src.total

    @staticmethod
    def stats_of(state, name=None, max_frames=None):
        return {"total": state}

    plain_stats = stats_of

    @classmethod
    def stats_json(cls, state, name=None, max_frames=None):
        try:
            return b'{"total":' + orjson.dumps(state, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
            return b'{"total":' + dumps(state) + b"}"

    @staticmethod
    def window(prev, cur, covered, **_):
        """delta, rate (per second), total (at the end), reset (the total
        went down, e.g. an engine restarted: delta then counts from zero)."""
        if cur is None:
            return {"delta": None, "rate": None, "total": None, "reset": False}
        reset = prev is not None and cur < prev
        delta = cur if (prev is None or reset) else cur - prev
        return {"delta": delta, "rate": _rate(delta, covered), "total": cur, "reset": reset}


class _Histogram(Series):
    __slots__ = ("count", "sum", "min", "max")
    type = HISTOGRAM

    def __init__(self, name, tags):
        Series.__init__(self, name, tags)
        self.count = 0
        self.sum = 0
        self.min = None
        self.max = None

    @staticmethod
    def _window_doc(d_count, d_sum, covered, q, reset):
        return {"count": d_count, "sum": d_sum, "mean": (d_sum / d_count) if d_count else None,
                "rate": _rate(d_count, covered), "p50": q[0], "p95": q[1], "p99": q[2], "reset": reset}


class LogHistogram(_Histogram):
    """Log-linear bins accumulated from raw values (histo's bins), exact
    count, sum, min and max."""

    __slots__ = ("bin_counts", "_added", "_hist_bins")

    def __init__(self, name, tags):
        _Histogram.__init__(self, name, tags)
        self.bin_counts = None  # np.int64[histo.NBINS], once anything is added
        self._added = []  # (bin indices, counts) added since the last history snapshot
        self._hist_bins = None  # the bins of the last history snapshot (SparseBins / DeltaBins)

    def add(self, count, total, vmin, vmax, bins):
        """Accumulates count, sum, min, max (None: not known) and bins (see
        add_bins; None: no bins)."""
        self.count += count
        self.sum += total
        if vmin is not None:
            self.min = vmin if self.min is None else min(self.min, vmin)
        if vmax is not None:
            self.max = vmax if self.max is None else max(self.max, vmax)
        if bins is not None:
            self.add_bins(bins)

    def add_bins(self, bins):
        """Adds per-bin counts: a dense array over histo's bins, or
        (bin indices, counts) of the bins hit."""
        if self.bin_counts is None:
            self.bin_counts = np.zeros(histo.NBINS, dtype=np.int64)
        if isinstance(bins, tuple):
            idx, counts = bins
            np.add.at(self.bin_counts, idx, counts)
        else:
            self.bin_counts += bins
            idx = np.flatnonzero(bins)
            counts = bins[idx]
        if idx.size:
            self._added.append((np.asarray(idx, dtype=np.int64), np.asarray(counts, dtype=np.int64)))

    def merge(self, src):
        self.add(src.count, src.sum, src.min, src.max, src.bin_counts)

    @staticmethod
    def bounds(state):
        return state[2], state[3]

    @staticmethod
    def plain_stats(state):
        # no engine buckets; a history state (3 items) is left out altogether
        return {"count": state[0], "sum": state[1], "bins": [], "counts": []} if len(state) == 5 else None

    def state(self):
        bins = None
        if self.bin_counts is not None:
            nz = np.flatnonzero(self.bin_counts)
            bins = (nz, self.bin_counts[nz])
        return (self.count, self.sum, self.min, self.max, bins)

    def history_state(self):
        if self.bin_counts is None:
            return (self.count, self.sum, None)
        prev, added, self._added = self._hist_bins, self._added, []
        if prev is None or prev.depth >= CHECKPOINT_EVERY:
            bins = SparseBins.of(self.bin_counts)
        else:
            # only the bins hit since the previous snapshot (a busy histogram hits a few a
            # second; its cumulative non-empty bins can be hundreds)
            idx = np.concatenate([a for a, _ in added]) if added else np.zeros(0, dtype=np.int64)
            cnt = np.concatenate([c for _, c in added]) if added else np.zeros(0, dtype=np.int64)
            uniq, inv = np.unique(idx, return_inverse=True)
            bins = DeltaBins(prev, uniq.astype(np.uint16), np.bincount(inv.reshape(-1), weights=cnt,
                                                                       minlength=uniq.size).astype(np.int64))
        self._hist_bins = bins
        return (self.count, self.sum, bins)

    @staticmethod
    def stats_of(state, name=None, max_frames=None):
        count, total, vmin, vmax, bins = state
        st = {"count": count, "sum": total, "min": vmin, "max": vmax, "mean": (total / count) if count else None}
        if bins is not None:
            nz, counts = bins
            q = histo.quantiles_loglinear(nz, counts, QUANTILES, vmin, vmax)
            st.update(p50=q[0], p95=q[1], p99=q[2], bins=histo.BIN_UPPER[nz].tolist(), counts=counts.tolist())
        else:
            st.update(p50=None, p95=None, p99=None, bins=[], counts=[])
        return st

    @classmethod
    def window(cls, prev, cur, covered, vmin=None, vmax=None, **_):
        """count, sum, mean, rate (observations per second) and p50/p95/p99
        from the bins observed in the window, clamped to the exact min/max
        since start (they bound the window's values too). States: history
        states, or (count, sum, dense bins) (graphsignal-server's)."""
        count, total, bins = cur
        p_count, p_total, p_bins = prev if prev is not None else (0, 0, None)
        q = (None, None, None)
        reset = count < p_count
        if reset:
            p_count, p_total, p_bins = 0, 0, None
        d_count, d_sum = count - p_count, total - p_total
        if isinstance(bins, np.ndarray):
            diff = bins if p_bins is None or not isinstance(p_bins, np.ndarray) else bins - p_bins
            nz = np.flatnonzero(diff > 0)
            if nz.size:
                q = histo.quantiles_loglinear(nz, diff[nz], QUANTILES, vmin, vmax)
        elif bins is not None and bins is not p_bins and d_count:  # the same object: nothing changed
            diff = bins_diff(bins, p_bins if isinstance(p_bins, (SparseBins, DeltaBins)) else None)
            nz = np.flatnonzero(diff > 0)
            if nz.size:
                q = histo.quantiles_loglinear(nz, diff[nz], QUANTILES, vmin, vmax)
        return cls._window_doc(d_count, d_sum, covered, q, reset)


class BucketHistogram(_Histogram):
    """An engine's histogram: cumulative `le` buckets as last scraped."""

    __slots__ = ("le", "le_counts")

    def __init__(self, name, tags):
        _Histogram.__init__(self, name, tags)
        self.le = None  # explicit bucket upper bounds (ascending, may end in inf)
        self.le_counts = None  # per-bucket (non-cumulative) counts

    def set(self, count, total, le, cumulative):
        self.count, self.sum = count, total
        self.le = list(le)
        self.le_counts = [c - p for c, p in zip(cumulative, [0] + list(cumulative[:-1]))]

    def merge(self, src):
        self.count += src.count
        self.sum += src.sum
        if src.le is not None and (self.le is None or list(self.le) == list(src.le)):
            self.le = list(src.le)
            self.le_counts = [a + b for a, b in zip(self.le_counts or [0] * len(src.le), src.le_counts)]

    def state(self):
        return (self.count, self.sum, None if self.le_counts is None else (tuple(self.le), tuple(self.le_counts)))

    @staticmethod
    def plain_stats(state):
        count, total, buckets = state
        le, counts = buckets if buckets is not None else ((), ())
        return {"count": count, "sum": total, "bins": [None if b == float("inf") else b for b in le],
                "counts": list(counts)}

    @staticmethod
    def stats_of(state, name=None, max_frames=None):
        count, total, buckets = state
        st = {"count": count, "sum": total, "min": None, "max": None, "mean": (total / count) if count else None}
        if buckets is not None:
            le, counts = buckets
            q = histo.quantiles_buckets(list(le), list(counts), QUANTILES)
            st.update(p50=q[0], p95=q[1], p99=q[2], bins=[b if b != float("inf") else None for b in le],
                      counts=list(counts))
        else:
            st.update(p50=None, p95=None, p99=None, bins=[], counts=[])
        return st

    @classmethod
    def window(cls, prev, cur, covered, **_):
        """As LogHistogram.window, from the buckets: a bucket that went down
        (the engine restarted) counts the window from zero."""
        count, total, buckets = cur
        p_count, p_total, p_buckets = prev if prev is not None else (0, 0, None)
        q = (None, None, None)
        reset = count < p_count
        if reset:
            p_count, p_total, p_buckets = 0, 0, None
        d_count, d_sum = count - p_count, total - p_total
        if buckets is not None:
            le, counts = buckets
            if isinstance(p_buckets, tuple) and tuple(p_buckets[0]) == tuple(le):
                per = [c - p for c, p in zip(counts, p_buckets[1])]
                if any(x < 0 for x in per):  # buckets went down: the source restarted
                    per, reset = list(counts), True
                    d_count, d_sum = count, total
            else:
                per = list(counts)  # first seen in the window, or the bucket layout changed
            q = histo.quantiles_buckets(list(le), per, QUANTILES)
        return cls._window_doc(d_count, d_sum, covered, q, reset)


class Profile(Series):
    """Cumulative value and samples per named frame."""

    __slots__ = ("frames", "max_frames")
    type = PROFILE

    def __init__(self, name, tags, max_frames=MAX_FRAMES):
        Series.__init__(self, name, tags)
        self.frames = {}  # name -> [value, samples]
        self.max_frames = max_frames

    def add(self, frame, value, samples):
        f = self.frames.get(frame)
        if f is None:
            if len(self.frames) >= MAX_FRAMES_KEPT:
                frame = "(other)"
                f = self.frames.get(frame)
            if f is None:
                f = self.frames[frame] = [0, 0]
        f[0] += value
        f[1] += samples

    def merge(self, src):
        for frame, (v, n) in src.frames.items():
            self.add(frame, v, n)

    def state(self):
        return {k: (v[0], v[1]) for k, v in self.frames.items()}

    @staticmethod
    def plain_stats(state):
        """Every frame's value and samples, uncut and unnamed (for sums over
        series: graphsignal.engine_summary.work)."""
        return {"frames": [{"name": k, "value": v[0], "samples": v[1]} for k, v in (state or {}).items()]}

    @staticmethod
    def stats_of(state, name=None, max_frames=MAX_FRAMES):
        items = sorted(state.items(), key=lambda kv: kv[1][0], reverse=True)[:max_frames]
        frames = [{"name": k, "value": v[0], "samples": v[1]} for k, v in items]
        return {"frames": kernel_names.annotate(name, frames)}  # kernels: + display_name, category

    @staticmethod
    def window(prev, cur, covered, name=None, **_):
        """value, samples and rate of the whole profile; per frame value,
        samples, share (of the window's value), rate and mean (value per
        sample), largest first; idle frames are counted in frames_idle, at
        most MAX_FRAMES are listed. name: kernel profiles get display names."""
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
        doc = {
            "value": total_v, "samples": total_s, "rate": _rate(total_v, covered),
            "frames": [{"name": n, "value": v, "samples": s, "share": (v / total_v) if total_v else None,
                        "rate": _rate(v, covered), "mean": (v / s) if s else None} for n, v, s in listed],
            "frames_omitted": len(frames) - len(listed), "frames_idle": idle,
        }
        kernel_names.annotate(name, doc["frames"])
        return doc


# the class a write of each kind makes (the store's get())
TYPES = {GAUGE: Gauge, COUNTER: Counter, HISTOGRAM: LogHistogram, PROFILE: Profile}


class SparseBins:
    """A histogram's cumulative log-linear bin counts as kept in the
    history: only the bins that are not empty (of 1920). Every
    CHECKPOINT_EVERY-th state of a histogram is one of these; the states in
    between are DeltaBins."""

    __slots__ = ("idx", "counts")
    depth = 0
    base = None

    def __init__(self, idx, counts):
        self.idx, self.counts = idx, counts

    @classmethod
    def of(cls, dense):
        nz = np.flatnonzero(dense)
        return cls(nz.astype(np.uint16), dense[nz].copy())

    def dense(self):
        out = np.zeros(histo.NBINS, dtype=np.int64)
        out[self.idx] = self.counts
        return out


class DeltaBins:
    """Cumulative bins as the previous state's plus the bins hit since
    (packed in one bytes object: uint16 bin indices, then int64 counts)."""

    __slots__ = ("base", "_packed", "depth")

    def __init__(self, base, idx, counts):
        self.base = base
        self._packed = idx.astype("<u2").tobytes() + counts.astype("<i8").tobytes()
        self.depth = base.depth + 1

    @property
    def idx(self):
        return np.frombuffer(self._packed, dtype="<u2", count=len(self._packed) // 10)

    @property
    def counts(self):
        n = len(self._packed) // 10
        return np.frombuffer(self._packed, dtype="<i8", count=n, offset=2 * n)

    def dense(self):
        out = self.base.dense()
        np.add.at(out, self.idx, self.counts)
        return out


def bins_diff(cur, prev):
    """Dense bins(cur) - bins(prev) for two states of one histogram (prev
    may be None: since start)."""
    # the common case, a short window: prev is an ancestor of cur, so the
    # difference is the deltas in between
    out = np.zeros(histo.NBINS, dtype=np.int64)
    b = cur
    while b is not None and b is not prev and isinstance(b, DeltaBins):
        np.add.at(out, b.idx, b.counts)
        b = b.base
    if b is prev:
        return out
    out += b.dense()  # b: a checkpoint (prev is older or unrelated)
    if prev is not None:
        out -= prev.dense()
    return out
