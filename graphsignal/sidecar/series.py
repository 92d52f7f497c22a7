"""The series types of the metric store. Each type owns its cumulative
state and its payload `stats`; the window maths over its states are
graphsignal.windowmath's, whose module doc says what each type's state is.

A live series (Gauge, Counter, LogHistogram, BucketHistogram, Profile) is
written by graphsignal.sidecar.store under the store's lock. Readers never touch
one: store.snapshot() hands them SeriesViews, immutable copies taken under
the lock, and the history keeps per-second states (history_state(): the
states of graphsignal.windowmath). From a view's state, the type's static
maths compute:

  Type.stats_of(state, name, render)   the payload's `stats` (since start);
                                       render: how a profile renders its
                                       frames (Render)

The two histogram kinds are two types that both report as "histogram":
LogHistogram accumulates log-linear bins from raw values (probes: exact
count, sum, min and max), BucketHistogram holds an engine's cumulative `le`
buckets as last scraped (min and max are not measured and stay null).

A view's state (immutable; units are the series' own, in its name) is the
history's (graphsignal.windowmath), but a LogHistogram's, which is
(count, sum, min, max, (bin indices, counts) | None).

Names are not the data's: a profile renders its frames as they are, then
passes them to its `annotate` (a function the store gives it:
graphsignal.naming.annotate, which adds kernel frames' display names and
categories), so each series' JSON is named once, when it is encoded.
"""
import heapq
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Type

import numpy as np
import numpy.typing as npt
import orjson

from graphsignal import histo
from graphsignal.signals_model import OTHER_FRAME
from graphsignal.textsafe import utf8
from graphsignal.windowmath import (COUNTER, GAUGE, HISTOGRAM, MAX_FRAMES, MAX_FRAMES_KEPT, PROFILE, QUANTILES, Bins,
                                    DeltaBins, SparseBins, bins_diff)

__all__ = ["GAUGE", "COUNTER", "HISTOGRAM", "PROFILE", "MAX_FRAMES", "MAX_FRAMES_KEPT", "CHECKPOINT_EVERY",
           "QUANTILES", "Annotate", "Render", "PLAIN", "dumps", "SeriesView", "Series", "Gauge", "Counter",
           "LogHistogram", "BucketHistogram", "Profile", "TYPES", "SparseBins", "DeltaBins", "bins_diff"]

CHECKPOINT_EVERY = 64  # history states of a histogram between two full copies of its bins

# annotate(profile name, frame dicts): adds presentation to the frames, in place
Annotate = Callable[[Optional[str], List[Dict[str, Any]]], Any]
# how a profile renders its frames: (how many, the largest first; its annotate or None)
Render = Tuple[int, Optional[Annotate]]
PLAIN: Render = (MAX_FRAMES, None)
Stats = Dict[str, Any]

_JSON_OPT = orjson.OPT_SERIALIZE_NUMPY
_orjson_dumps = orjson.dumps
_PLAIN_NUMBERS = (float, int, type(None))  # what orjson writes without its numpy option
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def _json_safe(obj: Any) -> Any:
    """obj with every int outside orjson's 64-bit range as a float (inf,
    which JSON lacks, as None), and every string UTF-8 can carry."""
    if isinstance(obj, str):
        return utf8(obj)
    if isinstance(obj, int) and not isinstance(obj, bool):
        if _INT_MIN <= obj <= _INT_MAX:
            return obj
        try:
            return float(obj)
        except OverflowError:
            return None
    if isinstance(obj, dict):
        return {utf8(k) if isinstance(k, str) else k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray) and obj.dtype == object:
        return [_json_safe(v) for v in obj.tolist()]
    return obj


def dumps(obj: Any) -> bytes:
    """orjson.dumps that never fails on a number or a string: integers
    beyond 64 bits become floats (see graphsignal.sidecar.store's module
    doc), bytes that were not UTF-8 U+FFFD."""
    try:
        return orjson.dumps(obj, option=_JSON_OPT)
    except orjson.JSONEncodeError:
        return orjson.dumps(_json_safe(obj), option=_JSON_OPT)


class SeriesView:
    """One series as of a snapshot: name, type, tags, updated_ns (epoch ns
    of its last change), its immutable state and its type (`kind`, whose
    maths read the state). encoded() is its /signals JSON, computed once."""

    __slots__ = ("name", "type", "tags", "updated_ns", "state", "kind", "created", "_head", "_json", "_render")

    def __init__(self, series: "Series", state: Any) -> None:
        self.created = series.created  # the order series were made in (see StoreSnapshot.named)
        self.name = series.name
        self.type = series.type
        self.tags = series.tags  # never changed after the series is made: shared, read-only
        self.updated_ns = series.updated_ns
        self.state = state
        self.kind: Type[Series] = type(series)
        self._head = series._head
        # plain reads: getattr's default would cost a raised AttributeError
        self._render = series.render
        self._json: Optional[bytes] = None

    @property
    def key(self) -> Tuple[str, Optional[str], Tuple[Tuple[str, str], ...]]:
        return (self.name, self.type, tuple(sorted(self.tags.items())))

    def stats(self) -> Stats:
        return self.kind.stats_of(self.state, self.name, self._render)

    def encoded(self) -> bytes:
        """{name, type, tags, stats, updated_ns} as JSON bytes. The same
        bytes object on every call (readers skip unchanged series by
        identity)."""
        j = self._json
        if j is None:
            kind = self.kind
            if kind.scalar:
                # most series are one number: no stats to build (_Scalar.stats_json, inlined)
                state = self.state
                try:
                    number = _orjson_dumps(state) if type(state) in _PLAIN_NUMBERS else _orjson_dumps(
                        state, option=_JSON_OPT)
                except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
                    number = dumps(state)
                j = b"".join((self._head, number, b'},"updated_ns":', _orjson_dumps(self.updated_ns), b"}"))
            else:
                j = b"".join((self._head, kind.stats_json(self.state, self.name, self._render), b',"updated_ns":',
                              _orjson_dumps(self.updated_ns), b"}"))
            # readers serialize without the store's lock, so two may race here: the
            # first one kept wins, keeping "the same bytes object on every call"
            kept = self._json
            if kept is None:
                self._json = j
            else:
                j = kept
        return j


class Series:
    """A live series: written under the store's lock, read only through
    view() (a SeriesView, cached until the series changes)."""

    __slots__ = ("name", "tags", "updated_ns", "created", "_view", "_head", "_changed", "_stale")
    type: Optional[str] = None  # the payload's "type" (each subclass's)
    render = PLAIN  # how its stats render (Profile's own slot overrides it)
    scalar = False  # stats are {_key: state}: _Scalar's
    _stats_open = b',"stats":'  # what follows the head in its JSON

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        self.name = name
        self.tags = dict(tags)
        self.updated_ns: Optional[int] = None
        self.created = 0
        self._view: Optional[SeriesView] = None
        self._changed = True  # since the last history snapshot
        self._stale: "Optional[Set[Series]]" = None
        # '{"name":..,"type":..,"tags":{..},"stats":' never changes: serialize it once
        self._head = dumps({"name": name, "type": self.type, "tags": self.tags})[:-1] + self._stats_open

    def bind(self, stale: "Set[Series]", created: int) -> None:
        """Joins a store: touch() adds the series to `stale` (the store's
        set of series whose view is out of date); created: its number."""
        self._stale = stale
        self.created = created

    def touch(self, ts: Optional[int]) -> None:
        """The series changed at ts (epoch ns)."""
        self.updated_ns = ts
        self._view = None
        self._changed = True
        if self._stale is not None:
            self._stale.add(self)

    def view(self) -> SeriesView:
        v = self._view
        if v is None:
            v = self._view = SeriesView(self, self.state())
        return v

    def take_changed(self) -> bool:
        """True once after each change: whether the next history snapshot
        stores this series' state."""
        changed, self._changed = self._changed, False
        return changed

    def stats(self) -> Stats:
        return self.view().stats()

    def to_json(self) -> bytes:
        return self.view().encoded()

    def state(self) -> Any:
        """The cumulative state (immutable: see the module doc)."""
        raise NotImplementedError

    def history_state(self) -> Any:
        """The state the per-second history keeps (called once per
        history snapshot in which the series changed)."""
        return self.view().state

    @staticmethod
    def window_state(state: Any) -> Any:
        """A view's state in graphsignal.windowmath's form (the history's):
        the same, but a LogHistogram's (see the module doc)."""
        return state

    def merge(self, src: Any) -> None:
        """Adds src's cumulative values (a series of the same type) into
        this one (the store folds exited processes)."""

    @staticmethod
    def bounds(state: Any) -> Tuple[Any, Any]:
        """(min, max) ever observed, where the type measures them (they
        bound a window's quantiles too), else (None, None)."""
        return None, None

    @staticmethod
    def plain_stats(state: Any) -> Optional[Stats]:
        """The stats without anything computed (no quantiles), for merging
        over series (graphsignal.engine_summary); None: not mergeable."""
        return None

    @staticmethod
    def stats_of(state: Any, name: Optional[str] = None, render: Render = PLAIN) -> Stats:
        """The payload's `stats` of a view's state."""
        raise NotImplementedError

    @classmethod
    def stats_json(cls, state: Any, name: Optional[str] = None, render: Render = PLAIN) -> bytes:
        st = cls.stats_of(state, name, render)
        try:
            return orjson.dumps(st, option=_JSON_OPT)
        except orjson.JSONEncodeError:
            return dumps(st)


class _Scalar(Series):
    """A gauge or a counter: one number, in the slot and payload stat
    `_key`."""

    __slots__ = ()
    _key, _prefix = "", b""
    scalar = True

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        Series.__init__(self, name, tags)
        setattr(self, self._key, None)

    @classmethod
    def stats_of(cls, state: Any, name: Optional[str] = None, render: Render = PLAIN) -> Stats:
        return {cls._key: state}

    @classmethod
    def plain_stats(cls, state: Any) -> Optional[Stats]:
        return {cls._key: state}

    @classmethod
    def stats_json(cls, state: Any, name: Optional[str] = None, render: Render = PLAIN) -> bytes:
        try:
            return cls._prefix + orjson.dumps(state, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
            return cls._prefix + dumps(state) + b"}"


class Gauge(_Scalar):
    __slots__ = ("value",)
    type = GAUGE
    _key, _prefix = "value", b'{"value":'
    _stats_open = b',"stats":' + _prefix
    value: Optional[float]

    def state(self) -> Optional[float]:
        return self.value


class Counter(_Scalar):
    __slots__ = ("total",)
    type = COUNTER
    _key, _prefix = "total", b'{"total":'
    _stats_open = b',"stats":' + _prefix
    total: Optional[float]

    def state(self) -> Optional[float]:
        return self.total

    def merge(self, src: Any) -> None:
        if src.total is not None:
            self.total = (self.total or 0) + src.total


def _quantile_stats(st: Stats, q: Any, bins: List[Any], counts: List[Any]) -> Stats:
    st.update(p50=q[0], p95=q[1], p99=q[2], bins=bins, counts=counts)
    return st


class _Histogram(Series):
    __slots__ = ("count", "sum", "min", "max")
    type = HISTOGRAM

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        Series.__init__(self, name, tags)
        self.count = 0
        self.sum: Any = 0
        self.min: Any = None
        self.max: Any = None


class LogHistogram(_Histogram):
    """Log-linear bins accumulated from raw values (histo's bins), exact
    count, sum, min and max."""

    __slots__ = ("bin_counts", "_added", "_hist_bins")

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        _Histogram.__init__(self, name, tags)
        self.bin_counts: "Optional[npt.NDArray[np.int64]]" = None  # np.int64[histo.NBINS], once anything is added
        # (bin indices, counts) added since the last history snapshot
        self._added: "List[Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]" = []
        self._hist_bins: Optional[Bins] = None  # the bins of the last history snapshot

    def add(self, count: int, total: Any, vmin: Any, vmax: Any, bins: Any) -> None:
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

    def add_bins(self, bins: Any) -> None:
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

    def merge(self, src: Any) -> None:
        self.add(src.count, src.sum, src.min, src.max, src.bin_counts)

    @staticmethod
    def bounds(state: Any) -> Tuple[Any, Any]:
        return state[2], state[3]

    @staticmethod
    def plain_stats(state: Any) -> Optional[Stats]:
        # no engine buckets; a history state (3 items) is left out altogether
        return {"count": state[0], "sum": state[1], "bins": [], "counts": []} if len(state) == 5 else None

    def state(self) -> Any:
        bins = None
        if self.bin_counts is not None:
            nz = self.bin_counts.nonzero()[0]  # 1-D: np.flatnonzero's ravel and wrapper add nothing
            bins = (nz, self.bin_counts[nz])
        return (self.count, self.sum, self.min, self.max, bins)

    @staticmethod
    def window_state(state: Any) -> Any:
        count, total, _, _, bins = state
        if bins is None:
            return (count, total, None)
        return (count, total, SparseBins(bins[0].astype(np.uint16), bins[1]))

    def history_state(self) -> Any:
        if self.bin_counts is None:
            return (self.count, self.sum, None)
        prev, added, self._added = self._hist_bins, self._added, []
        bins: Bins
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
    def stats_of(state: Any, name: Optional[str] = None, render: Render = PLAIN) -> Stats:
        return LogHistogram._stats(state, True)

    @classmethod
    def stats_json(cls, state: Any, name: Optional[str] = None, render: Render = PLAIN) -> bytes:
        # the bins as numpy arrays: orjson writes them as it writes lists of ints, without
        # making a Python int of each first
        st = LogHistogram._stats(state, False)
        try:
            return orjson.dumps(st, option=_JSON_OPT)
        except orjson.JSONEncodeError:
            return dumps(st)

    @staticmethod
    def _stats(state: Any, lists: bool) -> Stats:
        """stats_of's stats; lists: bins and counts as lists (else numpy
        arrays)."""
        count, total, vmin, vmax, bins = state
        st = {"count": count, "sum": total, "min": vmin, "max": vmax, "mean": (total / count) if count else None}
        if bins is None:
            return _quantile_stats(st, (None, None, None), [], [])
        nz, counts = bins
        upper = histo.BIN_UPPER[nz]
        return _quantile_stats(st, histo.quantiles_loglinear(nz, counts, QUANTILES, vmin, vmax),
                               upper.tolist() if lists else upper,
                               counts if not lists and _numpy_ints(counts) else counts.tolist())


def _numpy_ints(a: Any) -> bool:
    """Whether orjson writes array `a` as it writes a.tolist(): integers,
    native byte order, in one block."""
    return a.dtype.kind in "iu" and a.dtype.isnative and a.flags.c_contiguous


class BucketHistogram(_Histogram):
    """An engine's histogram: cumulative `le` buckets as last scraped."""

    __slots__ = ("le", "le_counts")

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        _Histogram.__init__(self, name, tags)
        self.le: Optional[List[float]] = None  # explicit bucket upper bounds (ascending, may end in inf)
        self.le_counts: Optional[List[Any]] = None  # per-bucket (non-cumulative) counts

    def set(self, count: int, total: Any, le: Any, cumulative: Any) -> None:
        self.count, self.sum = count, total
        self.le = list(le)
        self.le_counts = [c - p for c, p in zip(cumulative, [0] + list(cumulative[:-1]))]

    def merge(self, src: Any) -> None:
        self.count += src.count
        self.sum += src.sum
        if src.le is not None and (self.le is None or list(self.le) == list(src.le)):
            self.le = list(src.le)
            self.le_counts = [a + b for a, b in zip(self.le_counts or [0] * len(src.le), src.le_counts)]

    def state(self) -> Any:
        return (self.count, self.sum,
                None if self.le_counts is None or self.le is None else (tuple(self.le), tuple(self.le_counts)))

    @staticmethod
    def plain_stats(state: Any) -> Optional[Stats]:
        count, total, buckets = state
        le, counts = buckets if buckets is not None else ((), ())
        return {"count": count, "sum": total, "bins": [None if b == float("inf") else b for b in le],
                "counts": list(counts)}

    @staticmethod
    def stats_of(state: Any, name: Optional[str] = None, render: Render = PLAIN) -> Stats:
        count, total, buckets = state
        st = {"count": count, "sum": total, "min": None, "max": None, "mean": (total / count) if count else None}
        if buckets is None:
            return _quantile_stats(st, (None, None, None), [], [])
        le, counts = buckets
        return _quantile_stats(st, histo.quantiles_buckets(list(le), list(counts), QUANTILES),
                               [b if b != float("inf") else None for b in le], list(counts))


class Profile(Series):
    """Cumulative value and samples per named frame. max_frames: how many
    its stats list (the largest); annotate: see the module doc (None:
    frames as they are)."""

    __slots__ = ("frames", "render")
    type = PROFILE

    def __init__(self, name: str, tags: Mapping[str, str], max_frames: int = MAX_FRAMES,
                 annotate: Optional[Annotate] = None) -> None:
        Series.__init__(self, name, tags)
        # name -> (value, samples): immutable, so a view's state is a plain copy of the dict
        self.frames: Dict[str, Tuple[Any, Any]] = {}
        self.render = (max_frames, annotate)

    def add(self, frame: str, value: Any, samples: Any) -> None:
        frames = self.frames
        f = frames.get(frame)
        if f is None:
            if len(frames) >= MAX_FRAMES_KEPT:
                frame = OTHER_FRAME
                f = frames.get(frame)
            if f is None:
                f = (0, 0)
        frames[frame] = (f[0] + value, f[1] + samples)

    def merge(self, src: Any) -> None:
        for frame, (v, n) in src.frames.items():
            self.add(frame, v, n)

    def state(self) -> Dict[str, Tuple[Any, Any]]:
        return dict(self.frames)

    @staticmethod
    def plain_stats(state: Any) -> Optional[Stats]:
        """Every frame's value and samples, uncut and unnamed (for sums over
        series: graphsignal.engine_summary.work)."""
        return {"frames": [{"name": k, "value": v[0], "samples": v[1]} for k, v in (state or {}).items()]}

    @staticmethod
    def stats_of(state: Any, name: Optional[str] = None, render: Render = PLAIN) -> Stats:
        """The largest frames first. Past max_frames, the largest
        max_frames - 1 named frames and one OTHER_FRAME holding all the
        rest (and what was already folded there), so the frames still sum
        to the profile's whole value and samples; frames_folded says how
        many distinct names that frame took in at this cut."""
        max_frames, annotate = render
        items = list(state.items())
        value = [v for v, _ in state.values()].__getitem__  # a key without a Python call per frame
        if len(items) <= max_frames:
            at = sorted(range(len(items)), key=value, reverse=True)
            frames = [{"name": k, "value": v, "samples": n} for k, (v, n) in map(items.__getitem__, at)]
            if annotate is not None:
                annotate(name, frames)
            return {"frames": frames}
        folded_at = -1
        if OTHER_FRAME in state:
            folded_at = next(i for i, (k, _) in enumerate(items) if k == OTHER_FRAME)
        named = range(len(items)) if folded_at < 0 else (i for i in range(len(items)) if i != folded_at)
        # the same frames, in the same order (ties too) as sorting them all would give
        at = heapq.nlargest(max(max_frames - 1, 0), named, key=value)
        frames = [{"name": k, "value": v, "samples": n} for k, (v, n) in map(items.__getitem__, at)]
        listed = len(at) + (folded_at >= 0)
        kept = set(at)
        rest_v = rest_n = 0
        for i, (_, (v, n)) in enumerate(items):
            if i not in kept:
                rest_v += v
                rest_n += n
        other = {"name": OTHER_FRAME, "value": rest_v, "samples": rest_n}
        # in its place by value (after equal ones), so the list stays largest first
        pos = next((j for j, f in enumerate(frames) if f["value"] < rest_v), len(frames))
        frames.insert(pos, other)
        if annotate is not None:
            annotate(name, frames)
        return {"frames": frames, "frames_folded": len(items) - listed}


# the class a write of each kind makes (the store's get())
TYPES: Dict[str, Type[Series]] = {GAUGE: Gauge, COUNTER: Counter, HISTOGRAM: LogHistogram, PROFILE: Profile}
