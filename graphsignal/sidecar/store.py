"""The metric store: series keyed by (name, type, tags), errors, resources,
and the per-second history of the series' cumulative states
(graphsignal.sidecar.history).

Writers (the poller, sources, the console capture, the uploader's own
counters) call the write methods below; each takes the store's lock, and
batch() holds it over several writes that must land together. Readers
(the payload, windows, the engine summary, /metrics, the uploader) call
snapshot(): an immutable StoreSnapshot (graphsignal.signals_model) taken
under the lock, read without it. Nothing outside this module touches the
store's state; the series types (graphsignal.sidecar.series) own their
stats, graphsignal.windowmath the window maths over their states.

A series keeps its immutable view (and its serialized JSON) until it
changes, so a snapshot costs what changed since the last one, and a
/signals request re-serializes only what moved.

Units live in metric names; all timestamps are epoch nanoseconds.

Numbers: counters, sums and frame values are Python ints, exact at any
size. JSON integers are exact up to 2**64 - 1 (orjson's range); a value
beyond that is written as a float (a JSON number, rounded), never an error.

Bounds: at most max_series series. Series of processes that have exited
(tag process.pid) are folded once more than MAX_EXITED_KEPT processes have
exited, or at once when the cap is reached: counters, histograms and
profiles are added into the same series with process.pid "exited", gauges
are dropped. A series refused at the cap is counted in
graphsignal_dropped_series once, however many records it is refused
(RefusedSeries: exact for the first MAX_REFUSED_KEPT distinct series, an
estimate past them, in bounded memory); the first one is an error entry
and a log line, and while the count grows one more line at most once a
minute says it.
"""
import collections
import logging
import threading
import time
import types
from typing import (Any, Callable, Deque, Dict, Iterable, List, Mapping, Optional, OrderedDict, Set, Tuple,
                    Type, Union)

import numpy as np

from graphsignal import histo, naming
from graphsignal.report import Reporter
from graphsignal.sidecar.history import NS, History, HistorySnapshot, HistoryView
from graphsignal.sidecar.refused import RefusedSeries
from graphsignal.sidecar.series import (CHECKPOINT_EVERY, COUNTER, GAUGE, HISTOGRAM, MAX_FRAMES, MAX_FRAMES_KEPT,
                                        PROFILE, TYPES, BucketHistogram, Counter, DeltaBins, Gauge, LogHistogram,
                                        Profile, Series, SeriesView, SparseBins, bins_diff, dumps)
from graphsignal.signals_model import ErrorEntry, Resource, SeriesKey, StoreSnapshot
from graphsignal.windowmath import pick

__all__ = ["MetricStore", "StoreSnapshot", "History", "HistoryView", "HistorySnapshot", "pick", "tags_key", "dumps",
           "NS", "GAUGE", "COUNTER", "HISTOGRAM", "PROFILE", "Series", "Gauge", "Counter", "LogHistogram",
           "BucketHistogram", "Profile", "SeriesView", "SparseBins", "DeltaBins", "bins_diff",
           "CHECKPOINT_EVERY", "MAX_FRAMES", "MAX_FRAMES_KEPT"]

logger = logging.getLogger("graphsignal")

MAX_SERIES = 5000
MAX_ERRORS = 100
MAX_EXITED_KEPT = 32  # exited processes whose series stay apart; older ones are folded
EXITED = "exited"  # process.pid of the series that exited processes are folded into
PER_PROCESS_TAGS = ("process.pid", "rank", "local_rank", "world_size")
DROPPED_SERIES_METRIC = "graphsignal_dropped_series"
FOLDED_METRIC = "graphsignal_folded_processes"
_INTERNAL = (DROPPED_SERIES_METRIC, FOLDED_METRIC)  # exempt from the cap: they report it
SAY_EVERY_NS = 60 * 10**9  # a loss that keeps growing is said again at most this often

Tags = Optional[Mapping[str, Any]]  # a series' tags as a writer gives them (values become str in its key)


Value = Any  # a measured number (int, float, numpy scalar); None: not measured


def tags_key(tags: Tags) -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in tags.items())) if tags else ()


def _payload_order(key: SeriesKey) -> Tuple[str, Tuple[Tuple[str, str], ...], str]:
    return (key[0], key[2], key[1])


class _Meta:
    """Frozen copies of the store's errors and resources, remade after they
    change."""

    __slots__ = ("errors", "resources")

    def __init__(self, errors: Iterable[ErrorEntry], resources: Mapping[Any, Resource]) -> None:
        self.errors: Tuple[ErrorEntry, ...] = tuple(e.copy() for e in errors)
        self.resources: Tuple[Resource, ...] = tuple(
            _copy_resource(r) for r in sorted(resources.values(), key=lambda r: (r["kind"], sorted(r["tags"].items()))))


def _copy_resource(r: Resource) -> Resource:
    c = r.copy()
    c["attributes"] = dict(r["attributes"])
    c["tags"] = dict(r["tags"])
    return c


class MetricStore:
    def __init__(self, max_series: int = MAX_SERIES, max_frames: int = MAX_FRAMES,
                 clock: Callable[[], int] = time.time_ns, history_seconds: int = 600,
                 annotate: Callable[..., Any] = naming.annotate,
                 monotonic: Callable[[], int] = time.monotonic_ns) -> None:
        """clock: epoch ns (what payloads show); monotonic: ns that never
        step (what the history's windows are measured by)."""
        self._lock = threading.RLock()
        self.clock = clock
        self.monotonic = monotonic
        self.max_series = max_series
        self.max_frames = max_frames
        self.annotate = annotate  # names a profile's frames as it is encoded (graphsignal.naming)
        self.history_seconds = history_seconds
        self.start_ns = clock()
        self.ended_ns: Optional[int] = None  # the workload's end (set_ended)
        self.exit_status: Optional[int] = None
        self._series: Dict[SeriesKey, Series] = {}
        self._refused = RefusedSeries()  # distinct series refused at the cap
        self._refused_said: Optional[Tuple[int, int]] = None  # (when, count) the cap's loss was last said
        self._errors: Deque[ErrorEntry] = collections.deque(maxlen=MAX_ERRORS)
        self._errors_total = 0
        self._resources: Dict[Tuple[str, Tuple[Tuple[str, str], ...]], Resource] = {}  # (kind, tags_key) ->
        self._context: Dict[str, Any] = {}
        self._meta: Optional[_Meta] = None  # _Meta, or None once errors, resources or context changed
        self._history = History(history_seconds + 1)  # (ts_ns, {key: state}) once a second
        self._reporter = Reporter(self, {"source": "store"})
        self._created = 0  # series made so far (a view's `created`)
        self._order: Optional[List[Series]] = None  # series in payload order, rebuilt when series come or go
        self._views: List[SeriesView] = []  # their views (each keeps its own JSON), parallel to _order
        self._pos: Dict[int, int] = {}  # id(series) -> index in _order
        self._stale: Set[Series] = set()  # series changed since their view was taken (Series.touch adds)
        self.last_read_ns: Optional[int] = None  # when /signals was last served (see prerender)
        self.prerenders = 0  # prerender() calls that had work to look at (the clock sees who else calls)
        self._by_pid: Dict[str, Set[SeriesKey]] = {}  # process.pid tag -> series keys
        self._exited: OrderedDict[str, bool] = collections.OrderedDict()  # pids that exited, oldest first

    # -- white-box views (tests, debugging; readers use snapshot()) ---------------
    @property
    def series(self) -> Mapping[SeriesKey, Series]:
        """{key: live Series}, read-only."""
        return types.MappingProxyType(self._series)

    @property
    def errors(self) -> Tuple[ErrorEntry, ...]:
        return tuple(self._errors)

    @property
    def errors_total(self) -> int:
        return self._errors_total

    @property
    def series_dropped(self) -> int:
        """Distinct series refused at the cap (graphsignal_dropped_series)."""
        return len(self._refused)

    @property
    def resources(self) -> Mapping[Tuple[str, Tuple[Tuple[str, str], ...]], Resource]:
        return types.MappingProxyType(self._resources)

    @property
    def context(self) -> Dict[str, Any]:
        """The payload's `context` dict (writers: set_context)."""
        return self._context

    @property
    def history(self) -> History:
        return self._history

    def batch(self) -> "threading.RLock":
        """Holds the store's lock over several writes (readers see all of
        them or none)."""
        return self._lock

    # -- series --------------------------------------------------------------
    def get(self, name: str, type_: str, tags: Tags = None, kind: Optional[Type[Series]] = None) -> Optional[Any]:
        """The series for (name, type, tags), created on first use (as
        `kind`, a graphsignal.sidecar.series type; default: the type's usual kind);
        None when the series cap is reached (counted in
        graphsignal_dropped_series, the first one also an error entry).
        Series of exited processes are folded first, so they never crowd
        out live ones. Call under the lock."""
        key = (name, type_, tags_key(tags))
        s = self._series.get(key)
        if s is None:
            if len(self._series) >= self.max_series and name not in _INTERNAL:
                if self._exited:
                    self._fold(list(self._exited))
                if len(self._series) >= self.max_series:
                    self._refuse(key, name, tags)
                    return None
            cls: Any = kind or TYPES[type_]
            args = (name, tags or {}, self.max_frames, self.annotate) if cls is Profile else (name, tags or {})
            s = cls(*args)
            s.bind(self._stale, self._created)
            self._created += 1
            self._series[key] = s
            self._order = None
            pid = s.tags.get("process.pid")
            if pid is not None:
                self._by_pid.setdefault(pid, set()).add(key)
        return s

    def _refuse(self, key: SeriesKey, name: str, tags: Tags) -> None:
        """A series refused at the cap: counted once per series (its records
        keep coming, batch after batch, and cost only this look-up then),
        said the first time and, while the count grows, at most once a
        minute."""
        if not self._refused.add(key):
            return
        n = len(self._refused)
        now = self.clock()
        s = self._own_counter(DROPPED_SERIES_METRIC)
        s.total = n
        s.touch(now)
        said = self._refused_said
        if said is None:
            self._refused_said = (now, n)
            self._reporter.once("cap", "series cap of %d reached; new series are dropped and counted in %s (first: "
                                "%s %s)" % (self.max_series, DROPPED_SERIES_METRIC, name, dict(tags or {})))
        elif not 0 <= now - said[0] < SAY_EVERY_NS:  # a wall clock that stepped back says it too
            self._refused_said = (now, n)
            # the log line only: the error entry above already says what and where
            self._reporter.say("series cap of %d: %d distinct series refused so far (%s)" % (
                self.max_series, n, DROPPED_SERIES_METRIC), entry=False)

    def _own_counter(self, name: str) -> Any:
        """One of the store's own counters (_INTERNAL: exempt from the cap,
        so always there)."""
        s = self.get(name, COUNTER, {})
        assert s is not None
        return s

    # -- processes that exited ------------------------------------------------
    def pids(self) -> List[str]:
        """process.pid tag values that have series (exited ones included)."""
        with self._lock:
            return [p for p in self._by_pid if p != EXITED]

    def process_exited(self, pid: Union[int, str]) -> None:
        """The process is gone: its series stay apart for a while (the last
        MAX_EXITED_KEPT exited processes), then fold into process.pid
        "exited" (see the module doc)."""
        pid = str(pid)
        with self._lock:
            if pid == EXITED or pid in self._exited or pid not in self._by_pid:
                return
            self._exited[pid] = True
            if len(self._exited) > MAX_EXITED_KEPT:
                self._fold(list(self._exited)[:len(self._exited) - MAX_EXITED_KEPT])

    def _fold(self, pids: Iterable[str]) -> None:
        ts = self.clock()
        for pid in pids:
            self._exited.pop(pid, None)
            for key in list(self._by_pid.pop(pid, ())):
                src = self._series.pop(key, None)
                if src is None:
                    continue
                self._history.removed(key)
                self._order = None
                if src.type == GAUGE:
                    continue  # the last reading of a process that is gone means nothing now
                tags = {k: v for k, v in src.tags.items() if k not in PER_PROCESS_TAGS}
                tags["process.pid"] = EXITED
                dst = self.get(src.name, key[1], tags, type(src))
                if dst is None:
                    continue
                if type(dst) is type(src):
                    dst.merge(src)
                dst.touch(ts)
            for rkey in [k for k, r in self._resources.items() if r["tags"].get("process.pid") == pid]:
                del self._resources[rkey]
                self._meta = None
            s = self._own_counter(FOLDED_METRIC)
            s.total = (s.total or 0) + 1
            s.touch(ts)

    def set_gauge(self, name: str, tags: Tags, value: Value, ts: Optional[int] = None) -> None:
        with self._lock:
            s = self.get(name, GAUGE, tags)
            if s is not None:
                s.value = value
                s.touch(ts or self.clock())

    def set_counter(self, name: str, tags: Tags, total: Value, ts: Optional[int] = None) -> None:
        """Sets a counter's cumulative total (sources that read totals)."""
        with self._lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = total
                s.touch(ts or self.clock())

    def raise_counter(self, name: str, tags: Tags, total: Value, ts: Optional[int] = None) -> None:
        """Sets a cumulative total unless it already holds more (two readers of
        one total: a sampled one and an exact one at the end)."""
        with self._lock:
            s = self.get(name, COUNTER, tags)
            if s is not None and (s.total is None or total > s.total):
                s.total = total
                s.touch(ts or self.clock())

    def add_counters(self, adds: Iterable[Tuple[Tuple[str, Mapping[str, str], Tuple[Tuple[str, str], ...]], Value]],
                     ts: Optional[int] = None) -> None:
        """add_counter for many: [((name, tags, tags_key(tags)), delta)],
        under one hold of the lock (a ring's batch lands whole); the key is
        the caller's, computed once per instrument, not once per batch."""
        ts = ts or self.clock()
        with self._lock:
            series, get, refused = self._series, self.get, self._refused
            for (name, tags, tkey), delta in adds:
                key = (name, COUNTER, tkey)
                s: Any = series.get(key)
                if s is None:
                    if key in refused and len(series) >= self.max_series and not self._exited:
                        continue  # refused and counted before; still no room
                    s = get(name, COUNTER, tags)
                    if s is None:
                        continue
                s.total = (s.total or 0) + delta
                s.touch(ts)

    def add_counter(self, name: str, tags: Tags, delta: Value, ts: Optional[int] = None) -> None:
        with self._lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = (s.total or 0) + delta
                s.touch(ts or self.clock())

    def add_profile(self, name: str, tags: Tags, frames: Iterable[Tuple[Any, Value, Value]],
                    ts: Optional[int] = None) -> None:
        """frames: iterable of (frame, value, samples) to add."""
        with self._lock:
            s = self.get(name, PROFILE, tags)
            if s is not None:
                for frame, value, samples in frames:
                    s.add(frame, value, samples)
                s.touch(ts or self.clock())

    def ensure_profile(self, name: str, tags: Tags, ts: Optional[int] = None) -> None:
        """An empty profile is a measured zero (e.g. no graphs launched)."""
        with self._lock:
            s = self.get(name, PROFILE, tags)
            if s is not None and s.updated_ns is None:
                s.touch(ts or self.clock())

    def add_histogram_values(self, name: str, tags: Tags, values: Any, ts: Optional[int] = None) -> None:
        """Accumulates raw integer values (numpy uint64/int64) exactly."""
        values = np.asarray(values)
        if values.size == 0:
            return
        bins = histo.bin_index(values)
        counts = np.bincount(bins, minlength=histo.NBINS)
        self.add_histogram_agg(name, tags, int(values.size), histo.exact_sum(values),
                               int(values.min()), int(values.max()), counts, ts)

    def add_histogram_agg(self, name: str, tags: Tags, count: int, total: Value, vmin: Value, vmax: Value,
                          bin_counts: Any, ts: Optional[int] = None) -> None:
        """Accumulates pre-aggregated values: count, sum, min, max and
        per-bin counts over histo's log-linear bins (a dense array, or
        (bin indices, counts) of the bins hit)."""
        with self._lock:
            s = self.get(name, HISTOGRAM, tags, LogHistogram)
            if s is None or not isinstance(s, LogHistogram):
                return
            s.add(count, total, vmin, vmax, bin_counts)
            s.touch(ts or self.clock())

    def set_histogram_buckets(self, name: str, tags: Tags, count: Value, total: Value, le: Iterable[float],
                              cumulative: List[Value], ts: Optional[int] = None) -> None:
        """Sets a histogram from cumulative `le` buckets (Prometheus)."""
        with self._lock:
            s = self.get(name, HISTOGRAM, tags, BucketHistogram)
            if s is not None and isinstance(s, BucketHistogram):
                s.set(count, total, le, cumulative)
                s.touch(ts or self.clock())

    def remove(self, name: str, type_: str, tags: Tags = None) -> None:
        with self._lock:
            key = (name, type_, tags_key(tags))
            s = self._series.pop(key, None)
            if s is not None:
                self._history.removed(key)
                pid = s.tags.get("process.pid")
                keys = self._by_pid.get(pid) if pid is not None else None
                if keys is not None:
                    keys.discard(key)
            self._order = None

    def lookup(self, name: str, type_: Optional[str] = None, tags: Tags = None) -> List[Any]:
        """The live series with this name (and type, and tags containing
        `tags`): for tests and tools; readers use snapshot()."""
        with self._lock:
            out = []
            for (n, t, _), s in self._series.items():
                if n == name and (type_ is None or t == type_) and \
                        all(s.tags.get(k) == v for k, v in (tags or {}).items()):
                    out.append(s)
            return out

    # -- errors, resources, context ---------------------------------------------
    def add_error(self, level: str, message: str, exception: Optional[str] = None, tags: Tags = None,
                  ts: Optional[int] = None) -> None:
        """Keeps the latest MAX_ERRORS entries; a repeat of the latest entry
        with the same text is counted instead of stored again (and is
        current again if it had been resolved)."""
        ts = ts or self.clock()
        with self._lock:
            self._errors_total += 1
            self._meta = None
            tags = {str(k): str(v) for k, v in (tags or {}).items()}
            for e in reversed(self._errors):
                if e["message"] == message and e["exception"] == exception and e["level"] == level \
                        and e["tags"] == tags:
                    e["count"] += 1
                    e["last_ns"] = ts
                    e["resolved_ns"] = None
                    return
            self._errors.append({"level": level, "message": message, "exception": exception, "tags": tags,
                                 "timestamp_ns": ts, "last_ns": ts, "count": 1, "resolved_ns": None})

    def resolve_errors(self, tags: Mapping[str, Any], ts: Optional[int] = None) -> int:
        """Marks the unresolved entries whose tags are exactly `tags` as
        resolved at `ts` (epoch ns): the condition they report has cleared
        (an engine's endpoint answers again). Exactly: a source's other
        reports, told apart by one more tag, keep their state. Returns how
        many were marked."""
        ts = ts or self.clock()
        want = {str(k): str(v) for k, v in tags.items()}
        n = 0
        with self._lock:
            for e in self._errors:
                if e.get("resolved_ns") is None and e["tags"] == want:
                    e["resolved_ns"] = ts
                    n += 1
            if n:
                self._meta = None
        return n

    def set_resource(self, kind: str, tags: Tags, attributes: Mapping[str, Any], ts: Optional[int] = None) -> None:
        ts_s = int((ts or self.clock()) // 1_000_000_000)
        with self._lock:
            key = (kind, tags_key(tags))
            r = self._resources.get(key)
            if r is None:
                r = self._resources[key] = {"kind": kind, "tags": dict(tags or {}), "attributes": {},
                                            "first_seen_ts": ts_s, "last_seen_ts": ts_s}
            r["attributes"].update({str(k): v for k, v in attributes.items()})
            r["last_seen_ts"] = ts_s
            self._meta = None

    def set_context(self, **values: Any) -> None:
        """Adds keys to the payload's `context`."""
        with self._lock:
            self._context.update(values)

    def set_started(self, started_ns: Any) -> None:
        """The workload's launch (epoch ns): the payload's start_ns, so its
        covered time is the workload's, not the sidecar's, which comes up
        after it. Only moves the start earlier, and never by more than an
        hour (a clock that jumped is not a launch)."""
        if isinstance(started_ns, int) and not isinstance(started_ns, bool):
            with self._lock:
                if self.start_ns - 3600 * 10**9 <= started_ns < self.start_ns:
                    self.start_ns = started_ns

    def set_ended(self, ended_ns: Any, exit_status: Optional[int], ts: Optional[int] = None) -> None:
        """The workload's end (epoch ns) and exit status (its exit code, or
        -N for a death by signal N): a payload with ended_ns is the record
        of a finished run."""
        with self._lock:
            self.ended_ns = ended_ns if isinstance(ended_ns, int) and not isinstance(ended_ns, bool) else (
                ts or self.clock())
            self.exit_status = exit_status

    # -- the clock's work (graphsignal.sidecar.clock) ----------------------------
    def take_history(self, ts: Optional[int] = None, mono: Optional[int] = None) -> None:
        """Appends a snapshot of every series' cumulative state (once a
        second, by the sidecar's clock); windows are differences of two.
        Only series that changed since the previous snapshot are copied.
        ts: epoch ns (default: now); mono: monotonic ns (default: now, or ts
        when ts is given: a caller that sets the time sets both)."""
        if mono is None:
            mono = ts if ts else self.monotonic()
        ts = ts or self.clock()
        with self._lock:
            h = self._history
            seq = h.begin()
            for key, s in self._series.items():
                if s.take_changed():
                    h.record(key, seq, s.history_state(), s.type)
            h.commit(seq, ts, mono)

    def prerender(self, active_window_ns: int = 60_000_000_000) -> int:
        """Serializes the series that changed, off the request path (the
        sidecar's clock calls this every cycle), but only while someone has
        read /signals recently: an unread sidecar spends nothing on JSON.
        The views are taken under the lock, the JSON written without it.
        Returns how many were serialized."""
        if not self.being_read(active_window_ns):
            return 0
        with self._lock:
            self.prerenders += 1
            fresh = self._refresh()
        return len(self._encode(fresh))

    def being_read(self, active_window_ns: int = 60_000_000_000) -> bool:
        """Whether /signals was served within active_window_ns: prerender
        works only then, and the clock ticks for it only then."""
        last = self.last_read_ns
        return last is not None and self.clock() - last <= active_window_ns

    # -- reading -----------------------------------------------------------------
    # The lock is the poller's: every record it applies takes it. Readers hold
    # it only to bring the views up to date (one view() per series changed
    # since the last reader, bounded by max_series) and to copy the tuple of
    # views; all serialization (orjson, the payload's framing, windows,
    # /metrics) runs on immutable SeriesViews after the lock is let go, so a
    # render never makes the drain wait.
    def _refresh(self) -> List[SeriesView]:
        """Brings the views up to date with the series (under the lock);
        returns the views made new since the last call, the JSON still to
        write."""
        if self._order is None:
            keys = sorted(self._series, key=_payload_order)
            self._order = [self._series[k] for k in keys]
            self._pos = {id(s): i for i, s in enumerate(self._order)}
            self._views = [s.view() for s in self._order]
            self._stale.clear()
            fresh = list(self._views)
        elif self._stale:
            order, views, stale = self._order, self._views, self._stale
            if 4 * len(stale) >= len(order):
                # most changed (telemetry re-sets everything each second): one pass in
                # payload order walks memory in order
                changed = [i for i, s in enumerate(order) if s in stale]
            else:
                pos = self._pos
                changed = sorted(pos[id(s)] for s in stale if id(s) in pos)
            stale.clear()
            fresh = []
            for i in changed:
                v = views[i] = order[i].view()
                fresh.append(v)
        else:
            return []
        return fresh

    def _encode(self, views: Iterable[SeriesView]) -> List[bytes]:
        """The JSON of these views (each view keeps its own, so a view
        already serialized costs nothing), without the lock. A series that
        cannot be serialized is left out (one error entry) and tried again
        once it changes."""
        out = []
        for v in views:
            try:
                out.append(v.encoded())
            except Exception as ex:
                self._left_out(v, ex)
        return out

    def snapshot(self, encode: bool = False) -> StoreSnapshot:
        """The store as it is now (a StoreSnapshot). encode: also the
        series' JSON (a series that cannot be serialized is left out, with
        one error entry), written after the lock is let go; this counts as
        a read of /signals (see prerender)."""
        with self._lock:
            self._refresh()
            if encode:
                self.last_read_ns = self.clock()
            meta = self._meta
            if meta is None:
                meta = self._meta = _Meta(self._errors, self._resources)
            views = tuple(self._views)
            fields = dict(
                taken_ns=self.clock(), start_ns=self.start_ns, ended_ns=self.ended_ns, exit_status=self.exit_status,
                context=types.MappingProxyType(dict(self._context)), errors=meta.errors,
                errors_total=self._errors_total, resources=meta.resources, series=views,
                history=self._history.view(), max_frames=self.max_frames)
        return StoreSnapshot(encoded=tuple(self._encode(views)) if encode else None, **fields)

    def metrics_json(self) -> List[bytes]:
        """Serialized series in payload order (name, tags, type)."""
        return list(self.snapshot(encode=True).encoded or ())

    def _left_out(self, s: SeriesView, e: Exception) -> None:
        key = (s.name, s.type, tags_key(s.tags))
        if not self._reporter.said(("unserializable", key)):
            self._reporter.once(("unserializable", key), "series %s %s cannot be serialized (%s: %s); it is left "
                                "out of the payload" % (s.name, s.tags, type(e).__name__, e), "error",
                                log_level=logging.WARNING)
