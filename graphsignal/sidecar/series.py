"""The series types of the metric store. Each type owns its cumulative
state and its payload `stats`; the window maths over its states are
graphsignal.windowmath's, whose module doc says what each type's state is.

A live series (Gauge, Counter, LogHistogram, BucketHistogram, Profile) is
written by graphsignal.sidecar.store under the store's lock. Readers never touch
one: store.snapshot() hands them SeriesViews, immutable copies taken under
the lock (graphsignal.signals_model.SeriesViewLike is what they may read of
one), and the history keeps per-second states (history_state()). A view's
state is in windowmath's form of its type (immutable; units are the series'
own, in its name); a log-linear histogram's view adds its exact min and max
(bounds), which that form has no room for. From a view, the type's maths
compute:

  Type.stats_of(view)    the payload's `stats` (since start)
  Type.stats_json(view)  the same as JSON bytes (what the view's encoded()
                         and fingerprint are made of)

and a profile's view picks the frames /metrics and OTLP show (frames(top)).

The two histogram kinds are two types that both report as "histogram":
LogHistogram accumulates log-linear bins from raw values (probes: exact
count, sum, min and max), BucketHistogram holds an engine's cumulative `le`
buckets as last scraped (min and max are not measured and stay null).

Names are not the data's: a profile renders its frames as they are, then
passes them to its `annotate` (a function the store gives it:
graphsignal.naming.annotate, which adds kernel frames' display names and
categories), so each series' JSON is named once, when it is encoded, and
the frames a view shows /metrics and OTLP once per view.
"""
import heapq
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Type, cast

import numpy as np
import numpy.typing as npt
import orjson

from graphsignal import histo
from graphsignal.jsonsafe import dumps
from graphsignal.signals_model import (OTHER_FRAME, Bounds, Buckets, Frame, HistogramState, HistogramStats, LogBins,
                                       ProfileState, SeriesKey, SeriesState, SeriesStats)
from graphsignal.windowmath import (COUNTER, GAUGE, HISTOGRAM, MAX_FRAMES, MAX_FRAMES_KEPT, PROFILE, QUANTILES,
                                    Bins, DeltaBins, SparseBins, bins_diff)

__all__ = ["GAUGE", "COUNTER", "HISTOGRAM", "PROFILE", "MAX_FRAMES", "MAX_FRAMES_KEPT", "CHECKPOINT_EVERY",
           "QUANTILES", "Annotate", "Render", "PLAIN", "NO_BOUNDS", "dumps", "SeriesView", "HistogramView",
           "ProfileView", "Series", "Gauge", "Counter",
           "LogHistogram", "BucketHistogram", "Profile", "TYPES", "SparseBins", "DeltaBins", "bins_diff"]

CHECKPOINT_EVERY = 64  # history states of a histogram between two full copies of its bins

# annotate(profile name, frames): adds presentation to the frames, in place
Annotate = Callable[[Optional[str], List[Frame]], Any]
# how a profile renders its frames: (how many, the largest first; its annotate or None)
Render = Tuple[int, Optional[Annotate]]
PLAIN: Render = (MAX_FRAMES, None)

NO_BOUNDS: Bounds = (None, None)
_UPDATED = b',"updated_ns":'  # what follows a series' stats in its JSON
_SCALAR_END = b"}" + _UPDATED  # a one-number series' stats closed, then its updated_ns
_JSON_OPT = orjson.OPT_SERIALIZE_NUMPY
_orjson_dumps = orjson.dumps
_PLAIN_NUMBERS = (float, int, type(None))  # what orjson writes without its numpy option


class SeriesView:
    """One series as of a snapshot (graphsignal.signals_model.SeriesViewLike,
    the contract every reader reads): name, type, tags, updated_ns (epoch
    ns of its last change), its immutable state (in windowmath's form of
    its type) and bounds. stats() and encoded() are the payload's, each
    computed from the state by the series' type (its maths), encoded()
    once. A profile's view is a ProfileView, a log-linear histogram's a
    HistogramView (their bounds)."""

    __slots__ = ("name", "type", "tags", "updated_ns", "state", "created", "_kind", "_head", "_json", "_render")
    bounds: Bounds = NO_BOUNDS  # (min, max): not measured (HistogramView's slot overrides it)

    def __init__(self, series: "Series", state: SeriesState) -> None:
        self.created = series.created  # the order series were made in (see StoreSnapshot.named)
        self.name = series.name
        self.type: str = series.type  # type: ignore[assignment]  # every series class sets its own
        self.tags: Mapping[str, str] = series.tags  # never changed after the series is made: shared, read-only
        self.updated_ns = series.updated_ns
        self.state = state
        self._kind: Type[Series] = type(series)  # whose maths read the state
        self._head = series._head
        # plain reads: getattr's default would cost a raised AttributeError
        self._render = series.render
        self._json: Optional[bytes] = None

    @property
    def key(self) -> SeriesKey:
        return (self.name, self.type, tuple(sorted(self.tags.items())))

    def stats(self) -> SeriesStats:
        return self._kind.stats_of(self)

    def frames(self, top: int) -> List[Frame]:
        return []

    @property
    def fingerprint(self) -> bytes:
        # the encoded JSON up to its updated_ns: the tail encoded() appended, measured, not searched for
        j = self.encoded()
        return j[:len(j) - len(_UPDATED) - len(_orjson_dumps(self.updated_ns)) - 1]

    def encoded(self) -> bytes:
        """{name, type, tags, stats, updated_ns} as JSON bytes. The same
        bytes object on every call (readers skip unchanged series by
        identity)."""
        j = self._json
        if j is None:
            kind = self._kind
            if kind.scalar:
                # most series are one number: no stats to build (_Scalar.stats_json, inlined)
                state = self.state
                try:
                    number = _orjson_dumps(state) if type(state) in _PLAIN_NUMBERS else _orjson_dumps(
                        state, option=_JSON_OPT)
                except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
                    number = dumps(state)
                j = b"".join((self._head, number, _SCALAR_END, _orjson_dumps(self.updated_ns), b"}"))
            else:
                j = b"".join((self._head, kind.stats_json(self), _UPDATED, _orjson_dumps(self.updated_ns), b"}"))
            # readers serialize without the store's lock, so two may race here: the
            # first one kept wins, keeping "the same bytes object on every call"
            kept = self._json
            if kept is None:
                self._json = j
            else:
                j = kept
        return j


class HistogramView(SeriesView):
    """A log-linear histogram's view: its exact min and max (bounds)."""

    __slots__ = ("bounds",)

    def __init__(self, series: "LogHistogram", state: SeriesState) -> None:
        SeriesView.__init__(self, series, state)
        self.bounds = (series.min, series.max)


class ProfileView(SeriesView):
    """A profile's view: frames(top), named once (the store's annotate)
    and kept for the readers that ask with the same top (/metrics and OTLP
    both ask for GRAPHSIGNAL_METRICS_TOP_FRAMES)."""

    __slots__ = ("_shown",)

    def __init__(self, series: "Series", state: SeriesState) -> None:
        SeriesView.__init__(self, series, state)
        self._shown: Optional[Tuple[int, List[Frame]]] = None

    def frames(self, top: int) -> List[Frame]:
        shown = self._shown
        if shown is not None and shown[0] == top:
            return shown[1]
        max_frames, annotate = self._render
        state: ProfileState = self.state or {}  # type: ignore[assignment]  # a profile's (no cast() call)
        # the payload's order (value, largest first; ties as made) without sorting every frame
        # (heapq.nlargest is sorted()[:n]); a profile cut at max_frames lists max_frames - 1
        # named frames and the cut's (other), left out here
        if len(state) <= max_frames:
            items = heapq.nlargest(min(top, max_frames), state.items(), key=_frame_value)
        else:
            items = heapq.nlargest(min(top, max_frames - 1), ((k, x) for k, x in state.items() if k != OTHER_FRAME),
                                   key=_frame_value)
        frames: List[Frame] = [{"name": k, "value": v, "samples": n} for k, (v, n) in items]
        if annotate is not None and frames:
            annotate(self.name, frames)
        # two readers may race here: both name the same frames, either result is right
        self._shown = (top, frames)
        return frames


def _frame_value(item: Tuple[str, Sequence[Any]]) -> Any:
    return item[1][0]


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

    def stats(self) -> SeriesStats:
        return self.view().stats()

    def to_json(self) -> bytes:
        return self.view().encoded()

    def state(self) -> Any:
        """The cumulative state (immutable; windowmath's form of its type)."""
        raise NotImplementedError

    def history_state(self) -> Any:
        """The state the per-second history keeps (called once per
        history snapshot in which the series changed)."""
        return self.view().state

    def merge(self, src: Any) -> None:
        """Adds src's cumulative values (a series of the same type) into
        this one (the store folds exited processes)."""

    @classmethod
    def stats_of(cls, v: SeriesView) -> SeriesStats:
        """The payload's `stats` of a view of a series of this type."""
        raise NotImplementedError

    @classmethod
    def stats_json(cls, v: SeriesView) -> bytes:
        st = cls.stats_of(v)
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
    def stats_of(cls, v: SeriesView) -> SeriesStats:
        return {cls._key: v.state}  # type: ignore[return-value]  # {"value": ...} or {"total": ...}

    @classmethod
    def stats_json(cls, v: SeriesView) -> bytes:
        try:
            return cls._prefix + orjson.dumps(v.state, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
            return cls._prefix + dumps(v.state) + b"}"


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


class _Histogram(Series):
    __slots__ = ("count", "sum", "min", "max")
    type = HISTOGRAM

    def __init__(self, name: str, tags: Mapping[str, str]) -> None:
        Series.__init__(self, name, tags)
        self.count = 0
        self.sum: Any = 0
        self.min: Any = None
        self.max: Any = None


def _histogram_stats(count: Any, total: Any, vmin: Any, vmax: Any, q: Sequence[Optional[float]], bins: Any,
                     counts: Any) -> HistogramStats:
    """A histogram's payload stats (bins and counts: lists, or numpy arrays
    orjson writes alike)."""
    return {"count": count, "sum": total, "min": vmin, "max": vmax, "mean": (total / count) if count else None,
            "p50": q[0], "p95": q[1], "p99": q[2], "bins": bins, "counts": counts}


_NO_QUANTILES = (None, None, None)


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

    def view(self) -> SeriesView:
        v = self._view
        if v is None:
            v = self._view = HistogramView(self, self.state())
        return v

    def state(self) -> Any:
        bins = None
        if self.bin_counts is not None:
            nz = self.bin_counts.nonzero()[0]  # 1-D: np.flatnonzero's ravel and wrapper add nothing
            bins = SparseBins(nz, self.bin_counts[nz])
        return (self.count, self.sum, bins)

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

    @classmethod
    def stats_of(cls, v: SeriesView) -> SeriesStats:
        return LogHistogram._stats(v, True)

    @classmethod
    def stats_json(cls, v: SeriesView) -> bytes:
        # the bins as numpy arrays: orjson writes them as it writes lists of ints, without
        # making a Python int of each first
        st = LogHistogram._stats(v, False)
        try:
            return orjson.dumps(st, option=_JSON_OPT)
        except orjson.JSONEncodeError:
            return dumps(st)

    @staticmethod
    def _stats(v: SeriesView, lists: bool) -> HistogramStats:
        """stats_of's stats; lists: bins and counts as lists (else numpy
        arrays)."""
        count, total, bins = cast(HistogramState, v.state)
        vmin, vmax = v.bounds
        if bins is None:
            return _histogram_stats(count, total, vmin, vmax, _NO_QUANTILES, [], [])
        nz, counts = cast(LogBins, bins).nonzero()
        upper = histo.BIN_UPPER[nz]
        return _histogram_stats(count, total, vmin, vmax,
                                histo.quantiles_loglinear(nz, counts, QUANTILES, vmin, vmax),
                                upper.tolist() if lists else upper,
                                counts if not lists and _numpy_ints(counts) else counts.tolist())


def _numpy_ints(a: Any) -> bool:
    """Whether orjson writes array `a` as it writes a.tolist(): integers,
    native byte order, in one block."""
    return bool(a.dtype.kind in "iu" and a.dtype.isnative and a.flags.c_contiguous)


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

    @classmethod
    def stats_of(cls, v: SeriesView) -> SeriesStats:
        count, total, buckets = cast(HistogramState, v.state)
        if buckets is None:
            return _histogram_stats(count, total, None, None, _NO_QUANTILES, [], [])
        le, counts = cast(Buckets, buckets)
        return _histogram_stats(count, total, None, None, histo.quantiles_buckets(list(le), list(counts), QUANTILES),
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

    def view(self) -> SeriesView:
        v = self._view
        if v is None:
            v = self._view = ProfileView(self, self.state())
        return v

    def state(self) -> Dict[str, Tuple[Any, Any]]:
        return dict(self.frames)

    @classmethod
    def stats_of(cls, v: SeriesView) -> SeriesStats:
        """The largest frames first. Past max_frames, the largest
        max_frames - 1 named frames and one OTHER_FRAME holding all the
        rest (and what was already folded there), so the frames still sum
        to the profile's whole value and samples; frames_folded says how
        many distinct names that frame took in at this cut."""
        max_frames, annotate = v._render
        state = cast(ProfileState, v.state)
        name = v.name
        items = list(state.items())
        value = [x for x, _ in state.values()].__getitem__  # a key without a Python call per frame
        frames: List[Frame]
        if len(items) <= max_frames:
            at = sorted(range(len(items)), key=value, reverse=True)
            frames = [{"name": k, "value": x, "samples": n} for k, (x, n) in map(items.__getitem__, at)]
            if annotate is not None:
                annotate(name, frames)
            return {"frames": frames}
        folded_at = -1
        if OTHER_FRAME in state:
            folded_at = next(i for i, (k, _) in enumerate(items) if k == OTHER_FRAME)
        named = range(len(items)) if folded_at < 0 else (i for i in range(len(items)) if i != folded_at)
        # the same frames, in the same order (ties too) as sorting them all would give
        at = heapq.nlargest(max(max_frames - 1, 0), named, key=value)
        frames = [{"name": k, "value": x, "samples": n} for k, (x, n) in map(items.__getitem__, at)]
        listed = len(at) + (folded_at >= 0)
        kept = set(at)
        rest_v = rest_n = 0
        for i, (_, (x, n)) in enumerate(items):
            if i not in kept:
                rest_v += x
                rest_n += n
        other: Frame = {"name": OTHER_FRAME, "value": rest_v, "samples": rest_n}
        # in its place by value (after equal ones), so the list stays largest first
        pos = next((j for j, f in enumerate(frames) if f["value"] < rest_v), len(frames))
        frames.insert(pos, other)
        if annotate is not None:
            annotate(name, frames)
        return {"frames": frames, "frames_folded": len(items) - listed}


# the class a write of each kind makes (the store's get())
TYPES: Dict[str, Type[Series]] = {GAUGE: Gauge, COUNTER: Counter, HISTOGRAM: LogHistogram, PROFILE: Profile}
