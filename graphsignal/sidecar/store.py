"""The metric store: series keyed by (name, type, tags), errors, resources,
and the per-second history of the series' cumulative states.

Writers (the poller, sources, the console capture, the uploader's own
counters) call the write methods below; each takes the store's lock, and
batch() holds it over several writes that must land together. Readers
(the payload, windows, the engine summary, /metrics, the uploader) call
snapshot(): an immutable StoreSnapshot taken under the lock, read without
it. Nothing outside this module touches the store's state; the series
types (graphsignal.sidecar.series) own their stats, graphsignal.windowmath
the window maths over their states.

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
graphsignal_dropped_series and the first one is an error entry.
"""
import bisect
import collections
import collections.abc
import logging
import threading
import time
import types
from typing import TYPE_CHECKING, Any, Collection, List, Mapping, Optional, Tuple

import numpy as np

from graphsignal import histo, naming
from graphsignal.report import Reporter
from graphsignal.sidecar.series import (CHECKPOINT_EVERY, COUNTER, GAUGE, HISTOGRAM, MAX_FRAMES, MAX_FRAMES_KEPT,
                                        PROFILE, TYPES, BucketHistogram, Counter, DeltaBins, Gauge, LogHistogram,
                                        Profile, Series, SeriesView, SparseBins, bins_diff, dumps)
from graphsignal.windowmath import pick

if TYPE_CHECKING:
    from graphsignal.sidecar.payload import ErrorEntry, Resource

__all__ = ["MetricStore", "StoreSnapshot", "HistoryView", "HistorySnapshot", "pick", "tags_key", "dumps",
           "GAUGE", "COUNTER", "HISTOGRAM", "PROFILE", "Series", "Gauge", "Counter", "LogHistogram",
           "BucketHistogram", "Profile", "SeriesView", "SparseBins", "DeltaBins", "bins_diff",
           "CHECKPOINT_EVERY", "MAX_FRAMES", "MAX_FRAMES_KEPT"]

logger = logging.getLogger("graphsignal")

NS = 1_000_000_000
MAX_SERIES = 5000
MAX_ERRORS = 100
MAX_EXITED_KEPT = 32  # exited processes whose series stay apart; older ones are folded
EXITED = "exited"  # process.pid of the series that exited processes are folded into
PER_PROCESS_TAGS = ("process.pid", "rank", "local_rank", "world_size")
DROPPED_SERIES_METRIC = "graphsignal_dropped_series"
FOLDED_METRIC = "graphsignal_folded_processes"
_INTERNAL = (DROPPED_SERIES_METRIC, FOLDED_METRIC)  # exempt from the cap: they report it


def tags_key(tags):
    return tuple(sorted((str(k), str(v)) for k, v in tags.items())) if tags else ()


def _payload_order(key):
    return (key[0], key[2], key[1])


# -- the per-second history ---------------------------------------------------------
_MISSING = object()
_GONE = object()  # the series was removed at this snapshot


class _Track:
    """One series' changes: the snapshot numbers (ascending) at which its
    state changed, and those states. Appended in place (states first, so a
    reader that finds a number finds its state); replaced, never cut, when
    old changes are forgotten, so a view taken earlier keeps reading the
    lists it had."""

    __slots__ = ("kind", "seqs", "states")

    def __init__(self, kind, seqs, states):
        self.kind, self.seqs, self.states = kind, seqs, states

    def at(self, seq):
        n = bisect.bisect_right(self.seqs, seq)
        if n == 0:
            return _MISSING
        st = self.states[n - 1]
        return _MISSING if st is _GONE else st


class History:
    """The per-second snapshots of every series' cumulative state, kept as
    changes: a snapshot stores a series' state only if it changed since the
    previous snapshot, so an idle series costs nothing per second (4,900
    idle histograms used to cost 75 MB a second). Written under the store's
    lock; read through view() (a HistoryView), which needs no lock: the
    dictionaries a view holds are copied before the next change to them
    (copy on write), and the lists it reads only grow past its end.

    Memory: one entry per (series, second in which it changed), for at
    most `maxlen` snapshots; histogram states keep only their non-empty
    bins (SparseBins)."""

    def __init__(self, maxlen):
        self.maxlen = maxlen
        self._times = collections.deque(maxlen=maxlen)  # (seq, ts)
        self._tracks = {}  # key -> _Track
        self._by_name = {}  # name -> frozenset of keys
        self._shared = False  # a view holds _tracks and _by_name: copy them before changing them
        self._seq = 0
        self._trimmed_to = 0

    # -- writing (under the store's lock) ------------------------------------
    def _own(self):
        if self._shared:
            self._tracks = dict(self._tracks)
            self._by_name = dict(self._by_name)
            self._shared = False

    def begin(self):
        self._seq += 1
        return self._seq

    def record(self, key, seq, state, kind):
        t = self._tracks.get(key)
        if t is None:
            self._own()
            self._tracks[key] = _Track(kind, [seq], [state])
            self._by_name[key[0]] = self._by_name.get(key[0], frozenset()) | {key}
        elif t.seqs[-1] == seq:
            t.states[-1] = state  # a snapshot no view can see yet (seq is not committed)
        else:
            t.kind = kind
            t.states.append(state)
            t.seqs.append(seq)

    def removed(self, key):
        """The series is gone from the next snapshot on."""
        t = self._tracks.get(key)
        if t is not None:
            self.record(key, self._seq + 1, _GONE, t.kind)

    def commit(self, seq, ts):
        self._times.append((seq, ts))
        if self._times[0][0] - self._trimmed_to >= 16:
            self._trim(self._times[0][0])

    def _trim(self, oldest):
        """Forgets changes older than the oldest snapshot, keeping the last
        of them (the state at that snapshot)."""
        self._trimmed_to = oldest
        self._own()
        for key, t in list(self._tracks.items()):
            seqs = t.seqs
            if seqs[0] >= oldest:
                continue
            i = bisect.bisect_right(seqs, oldest) - 1  # the state at `oldest`
            if len(seqs) - i == 1 and t.states[-1] is _GONE:
                del self._tracks[key]
                names = self._by_name.get(key[0], frozenset()) - {key}
                if names:
                    self._by_name[key[0]] = names
                else:
                    self._by_name.pop(key[0], None)
            elif i > 0:
                self._tracks[key] = _Track(t.kind, seqs[i:], t.states[i:])

    # -- reading ---------------------------------------------------------------
    def view(self):
        self._shared = True
        return HistoryView(tuple(self._times), self._tracks, self._by_name, self.maxlen)

    def entries(self, key=None):
        """Changes kept (of one series, or all): the history's memory."""
        if key is not None:
            t = self._tracks.get(key)
            return len(t.seqs) if t is not None else 0
        return sum(len(t.seqs) for t in self._tracks.values())

    def keys(self):
        return list(self._tracks)

    def states(self, key):
        """The states kept of one series, oldest first."""
        t = self._tracks.get(key)
        return list(t.states) if t is not None else []

    def __len__(self):
        return len(self._times)

    def __iter__(self):
        return iter(self.view())

    def __getitem__(self, i):
        return self.view()[i]

    def __reversed__(self):
        return reversed(self.view())


class HistoryView(collections.abc.Sequence):
    """The history as of one store snapshot: a sequence of (ts_ns,
    HistorySnapshot), oldest first. Immutable."""

    __slots__ = ("_times", "_tracks", "_by_name", "max_snapshots", "times")

    def __init__(self, times, tracks, by_name, max_snapshots):
        self._times = times  # ((seq, ts), ...)
        self._tracks = tracks
        self._by_name = by_name
        self.max_snapshots = max_snapshots
        self.times = tuple(ts for _, ts in times)

    @property
    def max_seconds(self):
        """The longest window it can ever span."""
        return self.max_snapshots - 1

    def __len__(self):
        return len(self._times)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self._times)))]
        seq, ts = self._times[i]
        return ts, HistorySnapshot(self, seq)

    def __iter__(self):
        return iter([(ts, HistorySnapshot(self, seq)) for seq, ts in self._times])

    def __reversed__(self):
        return iter([(ts, HistorySnapshot(self, seq)) for seq, ts in reversed(self._times)])

    def span(self, seconds):
        """(start, end) indices of the last `seconds` (see pick), or None."""
        return pick(self.times, seconds)

    def kind(self, key):
        """The series type of key's states (graphsignal.sidecar.series), or None."""
        t = self._tracks.get(key)
        return t.kind if t is not None else None

    def runs(self, key, start, end):
        """[(state, snapshots it held for)] of key between snapshots start
        and end (indices, both included); a state of None: not there."""
        lo, hi = self._times[start][0], self._times[end][0]
        t = self._tracks.get(key)
        if t is None:
            return [(None, hi - lo + 1)]
        st = t.at(lo)
        seq, v = lo, (None if st is _MISSING else st)
        runs = []
        seqs, states = t.seqs, t.states
        for k in range(bisect.bisect_right(seqs, lo), bisect.bisect_right(seqs, hi)):
            runs.append((v, seqs[k] - seq))
            seq, v = seqs[k], (None if states[k] is _GONE else states[k])
        runs.append((v, hi - seq + 1))
        return runs

    def _state_at(self, key, seq):
        t = self._tracks.get(key)
        return _MISSING if t is None else t.at(seq)

    def _keys_named(self, name):
        return self._by_name.get(name, ())


class HistorySnapshot(collections.abc.Mapping):
    """{series key: cumulative state} as of one history snapshot."""

    __slots__ = ("view", "seq")

    def __init__(self, view, seq):
        self.view, self.seq = view, seq

    def __getitem__(self, key):
        st = self.view._state_at(key, self.seq)
        if st is _MISSING:
            raise KeyError(key)
        return st

    def get(self, key, default=None):
        st = self.view._state_at(key, self.seq)
        return default if st is _MISSING else st

    def __contains__(self, key):
        return self.view._state_at(key, self.seq) is not _MISSING

    def __iter__(self):
        seq = self.seq
        return iter([k for k, t in self.view._tracks.items() if t.at(seq) is not _MISSING])

    def __len__(self):
        return sum(1 for _ in self)

    def items_named(self, names):
        """[(key, state)] of the series with one of these names."""
        out = []
        for name in names:
            for key in self.view._keys_named(name):
                st = self.view._state_at(key, self.seq)
                if st is not _MISSING:
                    out.append((key, st))
        return out

    def has_name(self, name):
        return any(self.view._state_at(k, self.seq) is not _MISSING for k in self.view._keys_named(name))


# -- snapshots ----------------------------------------------------------------------
class StoreSnapshot:
    """The store at one moment, immutable, read without the store's lock.

    taken_ns: when (epoch ns); start_ns: when the workload was launched (or
    the store began); ended_ns, exit_status: the workload's end and exit
    status (None while it runs); context:
    {key: value}; errors: the kept error entries (dicts), oldest first;
    errors_total: entries ever added; resources: resource dicts in payload
    order; series: SeriesViews in payload order (name, tags, type);
    encoded: their JSON (bytes) when taken with encode=True, without any
    that could not be serialized; history: the HistoryView."""

    __slots__ = ("taken_ns", "start_ns", "ended_ns", "exit_status", "context", "errors", "errors_total",
                 "resources", "series", "encoded", "history")
    taken_ns: int
    start_ns: int
    ended_ns: Optional[int]
    exit_status: Optional[int]
    context: Mapping[str, Any]
    errors: Tuple["ErrorEntry", ...]
    errors_total: int
    resources: Tuple["Resource", ...]
    series: Tuple[SeriesView, ...]
    encoded: Optional[Tuple[bytes, ...]]
    history: "HistoryView"

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a StoreSnapshot is immutable")

    def named(self, names: Collection[str]) -> List[SeriesView]:
        """The series with one of these names, in the order they were made."""
        return sorted((v for v in self.series if v.name in names), key=lambda v: v.created)


class _Meta:
    """Frozen copies of the store's errors and resources, remade after they
    change."""

    __slots__ = ("errors", "resources")

    def __init__(self, errors, resources):
        self.errors = tuple(dict(e) for e in errors)
        self.resources = tuple(dict(r, attributes=dict(r["attributes"]), tags=dict(r["tags"]))
                               for r in sorted(resources.values(),
                                               key=lambda r: (r["kind"], sorted(r["tags"].items()))))


class MetricStore:
    def __init__(self, max_series=MAX_SERIES, max_frames=MAX_FRAMES, clock=time.time_ns,
                 history_seconds=600, annotate=naming.annotate):
        self._lock = threading.RLock()
        self.clock = clock
        self.max_series = max_series
        self.max_frames = max_frames
        self.annotate = annotate  # names a profile's frames as it is encoded (graphsignal.naming)
        self.history_seconds = history_seconds
        self.start_ns = clock()
        self.ended_ns = None  # the workload's end (set_ended)
        self.exit_status = None
        self._series = {}  # (name, type, tags_key) -> Series
        self._series_dropped = 0
        self._errors = collections.deque(maxlen=MAX_ERRORS)
        self._errors_total = 0
        self._resources = {}  # (kind, tags_key) -> dict
        self._context = {}
        self._meta = None  # _Meta, or None once errors, resources or context changed
        self._history = History(history_seconds + 1)  # (ts_ns, {key: state}) once a second
        self._reporter = Reporter(self, {"source": "store"})
        self._created = 0  # series made so far (a view's `created`)
        self._order = None  # series in payload order, rebuilt when series come or go
        self._views = None  # their views, parallel to _order
        self._encoded = None  # their JSON (None: not serialized yet, False: left out), parallel to _order
        self._left = 0  # False entries in _encoded
        self._pos = None  # id(series) -> index in _order
        self._todo = []  # indices whose JSON is None
        self._stale = set()  # series changed since their view was taken (Series.touch adds)
        self.last_read_ns = None  # when /signals was last served (see prerender)
        self._by_pid = {}  # process.pid tag -> set of series keys
        self._exited = collections.OrderedDict()  # pids that exited, oldest first (not folded yet)

    # -- white-box views (tests, debugging; readers use snapshot()) ---------------
    @property
    def series(self):
        """{key: live Series}, read-only."""
        return types.MappingProxyType(self._series)

    @property
    def errors(self):
        return tuple(self._errors)

    @property
    def errors_total(self):
        return self._errors_total

    @property
    def series_dropped(self):
        return self._series_dropped

    @property
    def resources(self):
        return types.MappingProxyType(self._resources)

    @property
    def context(self):
        """The payload's `context` dict (writers: set_context)."""
        return self._context

    @property
    def history(self):
        return self._history

    def batch(self):
        """Holds the store's lock over several writes (readers see all of
        them or none)."""
        return self._lock

    # -- series --------------------------------------------------------------
    def get(self, name, type_, tags=None, kind=None):
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
                    self._refuse(name, tags)
                    return None
            cls = kind or TYPES[type_]
            s = cls(name, tags or {}, self.max_frames, self.annotate) if cls is Profile else cls(name, tags or {})
            s.bind(self._stale, self._created)
            self._created += 1
            self._series[key] = s
            self._order = None
            pid = s.tags.get("process.pid")
            if pid is not None:
                self._by_pid.setdefault(pid, set()).add(key)
        return s

    def _refuse(self, name, tags):
        self._series_dropped += 1
        s = self.get(DROPPED_SERIES_METRIC, COUNTER, {})
        s.total = self._series_dropped
        s.touch(self.clock())
        if not self._reporter.said("cap"):
            self._reporter.once("cap", "series cap of %d reached; new series are dropped and counted in %s (first: "
                                "%s %s)" % (self.max_series, DROPPED_SERIES_METRIC, name, dict(tags or {})))

    # -- processes that exited ------------------------------------------------
    def pids(self):
        """process.pid tag values that have series (exited ones included)."""
        with self._lock:
            return [p for p in self._by_pid if p != EXITED]

    def process_exited(self, pid):
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

    def _fold(self, pids):
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
                dst = self.get(src.name, src.type, tags, type(src))
                if dst is None:
                    continue
                if type(dst) is type(src):
                    dst.merge(src)
                dst.touch(ts)
            for rkey in [k for k, r in self._resources.items() if r["tags"].get("process.pid") == pid]:
                del self._resources[rkey]
                self._meta = None
            s = self.get(FOLDED_METRIC, COUNTER, {})
            s.total = (s.total or 0) + 1
            s.touch(ts)

    def set_gauge(self, name, tags, value, ts=None):
        with self._lock:
            s = self.get(name, GAUGE, tags)
            if s is not None:
                s.value = value
                s.touch(ts or self.clock())

    def set_counter(self, name, tags, total, ts=None):
        """Sets a counter's cumulative total (sources that read totals)."""
        with self._lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = total
                s.touch(ts or self.clock())

    def add_counter(self, name, tags, delta, ts=None):
        with self._lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = (s.total or 0) + delta
                s.touch(ts or self.clock())

    def add_profile(self, name, tags, frames, ts=None):
        """frames: iterable of (frame, value, samples) to add."""
        with self._lock:
            s = self.get(name, PROFILE, tags)
            if s is not None:
                for frame, value, samples in frames:
                    s.add(frame, value, samples)
                s.touch(ts or self.clock())

    def ensure_profile(self, name, tags, ts=None):
        """An empty profile is a measured zero (e.g. no graphs launched)."""
        with self._lock:
            s = self.get(name, PROFILE, tags)
            if s is not None and s.updated_ns is None:
                s.touch(ts or self.clock())

    def add_histogram_values(self, name, tags, values, ts=None):
        """Accumulates raw integer values (numpy uint64/int64) exactly."""
        values = np.asarray(values)
        if values.size == 0:
            return
        bins = histo.bin_index(values)
        counts = np.bincount(bins, minlength=histo.NBINS)
        self.add_histogram_agg(name, tags, int(values.size), histo.exact_sum(values),
                               int(values.min()), int(values.max()), counts, ts)

    def add_histogram_agg(self, name, tags, count, total, vmin, vmax, bin_counts, ts=None):
        """Accumulates pre-aggregated values: count, sum, min, max and
        per-bin counts over histo's log-linear bins (a dense array, or
        (bin indices, counts) of the bins hit)."""
        with self._lock:
            s = self.get(name, HISTOGRAM, tags, LogHistogram)
            if s is None or not isinstance(s, LogHistogram):
                return
            s.add(count, total, vmin, vmax, bin_counts)
            s.touch(ts or self.clock())

    def set_histogram_buckets(self, name, tags, count, total, le, cumulative, ts=None):
        """Sets a histogram from cumulative `le` buckets (Prometheus)."""
        with self._lock:
            s = self.get(name, HISTOGRAM, tags, BucketHistogram)
            if s is not None and isinstance(s, BucketHistogram):
                s.set(count, total, le, cumulative)
                s.touch(ts or self.clock())

    def remove(self, name, type_, tags=None):
        with self._lock:
            key = (name, type_, tags_key(tags))
            s = self._series.pop(key, None)
            if s is not None:
                self._history.removed(key)
                keys = self._by_pid.get(s.tags.get("process.pid"))
                if keys is not None:
                    keys.discard(key)
            self._order = None

    def lookup(self, name, type_=None, tags=None):
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
    def add_error(self, level, message, exception=None, tags=None, ts=None):
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

    def resolve_errors(self, tags, ts=None):
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

    def set_resource(self, kind, tags, attributes, ts=None):
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

    def set_context(self, **values):
        """Adds keys to the payload's `context`."""
        with self._lock:
            self._context.update(values)

    def set_started(self, started_ns):
        """The workload's launch (epoch ns): the payload's start_ns, so its
        covered time is the workload's, not the sidecar's, which comes up
        after it. Only moves the start earlier, and never by more than an
        hour (a clock that jumped is not a launch)."""
        if isinstance(started_ns, int) and not isinstance(started_ns, bool):
            with self._lock:
                if self.start_ns - 3600 * 10**9 <= started_ns < self.start_ns:
                    self.start_ns = started_ns

    def set_ended(self, ended_ns, exit_status, ts=None):
        """The workload's end (epoch ns) and exit status (its exit code, or
        -N for a death by signal N): a payload with ended_ns is the record
        of a finished run."""
        with self._lock:
            self.ended_ns = ended_ns if isinstance(ended_ns, int) and not isinstance(ended_ns, bool) else (
                ts or self.clock())
            self.exit_status = exit_status

    # -- the clock's work (graphsignal.sidecar.clock) ----------------------------
    def take_history(self, ts=None):
        """Appends a snapshot of every series' cumulative state (once a
        second, by the sidecar's clock); windows are differences of two.
        Only series that changed since the previous snapshot are copied."""
        ts = ts or self.clock()
        with self._lock:
            h = self._history
            seq = h.begin()
            for key, s in self._series.items():
                if s.take_changed():
                    h.record(key, seq, s.history_state(), type(s))
            h.commit(seq, ts)

    def prerender(self, active_window_ns=60_000_000_000):
        """Serializes the series that changed, off the request path (the
        sidecar's clock calls this every cycle), but only while someone has
        read /signals recently: an unread sidecar spends nothing on JSON.
        Returns how many were serialized."""
        if not self.being_read(active_window_ns):
            return 0
        with self._lock:
            return self._refresh(True)

    def being_read(self, active_window_ns=60_000_000_000):
        """Whether /signals was served within active_window_ns: prerender
        works only then, and the clock ticks for it only then."""
        last = self.last_read_ns
        return last is not None and self.clock() - last <= active_window_ns

    # -- reading -----------------------------------------------------------------
    def _refresh(self, encode):
        """Brings the views (and, with encode, their JSON) up to date with
        the series; returns how many series were serialized."""
        if self._order is None:
            keys = sorted(self._series, key=_payload_order)
            self._order = [self._series[k] for k in keys]
            self._pos = {id(s): i for i, s in enumerate(self._order)}
            self._views = [s.view() for s in self._order]
            self._encoded = [None] * len(self._order)
            self._left = 0
            self._todo = list(range(len(self._order)))
            self._stale.clear()
        elif self._stale:
            order, views, enc, stale = self._order, self._views, self._encoded, self._stale
            if 4 * len(stale) >= len(order):
                # most changed (telemetry re-sets everything each second): one pass in
                # payload order walks memory in order, and the JSON below follows it
                changed = [i for i, s in enumerate(order) if s in stale]
            else:
                pos = self._pos
                changed = sorted(pos[id(s)] for s in stale if id(s) in pos)
            stale.clear()
            todo = self._todo
            for i in changed:
                views[i] = order[i].view()
                e = enc[i]
                if e is not None:  # None: not serialized yet, already to do
                    if e is False:
                        self._left -= 1
                    enc[i] = None
                    todo.append(i)
        if not encode or not self._todo:
            return 0
        enc, views = self._encoded, self._views
        todo, self._todo = self._todo, []
        for i in todo:
            v = views[i]
            try:
                enc[i] = v.encoded()
            except Exception as ex:
                enc[i] = False  # left out (until it changes)
                self._left += 1
                self._left_out(v, ex)
        return len(todo)

    def snapshot(self, encode: bool = False) -> StoreSnapshot:
        """The store as it is now (a StoreSnapshot). encode: also the
        series' JSON (a series that cannot be serialized is left out, with
        one error entry); this counts as a read of /signals (see
        prerender)."""
        with self._lock:
            self._refresh(encode)
            if encode:
                self.last_read_ns = self.clock()
            meta = self._meta
            if meta is None:
                meta = self._meta = _Meta(self._errors, self._resources)
            return StoreSnapshot(
                taken_ns=self.clock(), start_ns=self.start_ns, ended_ns=self.ended_ns, exit_status=self.exit_status,
                context=types.MappingProxyType(dict(self._context)),
                errors=meta.errors,
                errors_total=self._errors_total, resources=meta.resources, series=tuple(self._views),
                encoded=(tuple(self._encoded) if not self._left else tuple(e for e in self._encoded if e))
                if encode else None, history=self._history.view())

    def metrics_json(self):
        """Serialized series in payload order (name, tags, type)."""
        return list(self.snapshot(encode=True).encoded)

    def _left_out(self, s, e):
        key = (s.name, s.type, tags_key(s.tags))
        if not self._reporter.said(("unserializable", key)):
            self._reporter.once(("unserializable", key), "series %s %s cannot be serialized (%s: %s); it is left "
                                "out of the payload" % (s.name, s.tags, type(e).__name__, e), "error",
                                log_level=logging.WARNING)
