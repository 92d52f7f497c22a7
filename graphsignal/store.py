"""The metric store: series keyed by (name, type, tags), errors, resources.

Every source writes here (poller, telemetry, scraper, console); the server
reads. One lock guards it; each series keeps its serialized JSON until it
changes, so a /signals request re-serializes only what moved.

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

import numpy as np
import orjson

from graphsignal import histo, kernel_names

logger = logging.getLogger("graphsignal")

GAUGE = "gauge"
COUNTER = "counter"
HISTOGRAM = "histogram"
PROFILE = "profile"

MAX_SERIES = 5000
MAX_FRAMES = 250  # frames rendered per profile (the largest)
MAX_FRAMES_KEPT = 20000  # frames kept per profile before new names are folded into "(other)"
MAX_ERRORS = 100
MAX_EXITED_KEPT = 32  # exited processes whose series stay apart; older ones are folded
EXITED = "exited"  # process.pid of the series that exited processes are folded into
PER_PROCESS_TAGS = ("process.pid", "rank", "local_rank", "world_size")
DROPPED_SERIES_METRIC = "graphsignal_dropped_series"
FOLDED_METRIC = "graphsignal_folded_processes"
_INTERNAL = (DROPPED_SERIES_METRIC, FOLDED_METRIC)  # exempt from the cap: they report it
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


def dumps(obj):
    """orjson.dumps that never fails on a number: integers beyond 64 bits
    become floats (see the module doc)."""
    try:
        return orjson.dumps(obj, option=_JSON_OPT)
    except orjson.JSONEncodeError:
        return orjson.dumps(_json_safe(obj), option=_JSON_OPT)


def tags_key(tags):
    return tuple(sorted((str(k), str(v)) for k, v in tags.items())) if tags else ()


class Series:
    __slots__ = ("name", "type", "tags", "updated_ns", "_json", "_head", "_changed")

    def __init__(self, name, type_, tags):
        self.name = name
        self.type = type_
        self.tags = dict(tags)
        self.updated_ns = None
        self._json = None
        self._changed = True  # since the last history snapshot
        # '{"name":..,"type":..,"tags":{..}' never changes: serialize it once
        self._head = orjson.dumps({"name": name, "type": type_, "tags": self.tags})[:-1]

    def touch(self, ts):
        self.updated_ns = ts
        self._json = None
        self._changed = True

    def stats(self):
        raise NotImplementedError

    def stats_json(self):
        st = self.stats()
        try:
            return orjson.dumps(st, option=_JSON_OPT)
        except orjson.JSONEncodeError:
            return dumps(st)

    def to_json(self):
        if self._json is None:
            self._json = b"".join((self._head, b',"stats":', self.stats_json(), b',"updated_ns":',
                                   orjson.dumps(self.updated_ns), b"}"))
        return self._json

    def state(self):
        """A copy of the cumulative state, for the per-second history."""
        raise NotImplementedError


class Gauge(Series):
    __slots__ = ("value",)

    def __init__(self, name, tags):
        Series.__init__(self, name, GAUGE, tags)
        self.value = None

    def stats(self):
        return {"value": self.value}

    def stats_json(self):
        try:
            return b'{"value":' + orjson.dumps(self.value, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:
            return b'{"value":' + dumps(self.value) + b"}"

    def state(self):
        return self.value


class Counter(Series):
    __slots__ = ("total",)

    def __init__(self, name, tags):
        Series.__init__(self, name, COUNTER, tags)
        self.total = None

    def stats(self):
        return {"total": self.total}

    def stats_json(self):
        try:
            return b'{"total":' + orjson.dumps(self.total, option=_JSON_OPT) + b"}"
        except orjson.JSONEncodeError:  # beyond 64 bits (see dumps)
            return b'{"total":' + dumps(self.total) + b"}"

    def state(self):
        return self.total


class Histogram(Series):
    """Either log-linear bins accumulated here from raw values (probes,
    exact count/sum/min/max), or explicit cumulative `le` buckets set from
    a scrape (engines: min/max are not measured and stay null)."""

    __slots__ = ("count", "sum", "min", "max", "bin_counts", "le", "le_counts", "_added", "_hist_bins")

    def __init__(self, name, tags):
        Series.__init__(self, name, HISTOGRAM, tags)
        self.count = 0
        self.sum = 0
        self.min = None
        self.max = None
        self.bin_counts = None  # np.int64[histo.NBINS] for log-linear
        self.le = None  # explicit bucket upper bounds (ascending, may end in inf)
        self.le_counts = None  # per-bucket (non-cumulative) counts
        self._added = []  # (bin indices, counts) added since the last history snapshot
        self._hist_bins = None  # the bins of the last history snapshot (SparseBins / DeltaBins)

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

    def stats(self):
        count = self.count
        st = {"count": count, "sum": self.sum, "min": self.min, "max": self.max,
              "mean": (self.sum / count) if count else None}
        if self.bin_counts is not None:
            nz = np.flatnonzero(self.bin_counts)
            counts = self.bin_counts[nz]
            q = histo.quantiles_loglinear(nz, counts, (0.5, 0.95, 0.99), self.min, self.max)
            st.update(p50=q[0], p95=q[1], p99=q[2],
                      bins=histo.BIN_UPPER[nz].tolist(), counts=counts.tolist())
        elif self.le is not None:
            q = histo.quantiles_buckets(self.le, self.le_counts, (0.5, 0.95, 0.99))
            st.update(p50=q[0], p95=q[1], p99=q[2],
                      bins=[b if b != float("inf") else None for b in self.le],
                      counts=list(self.le_counts))
        else:
            st.update(p50=None, p95=None, p99=None, bins=[], counts=[])
        return st

    def state(self):
        if self.bin_counts is not None:
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
        return (self.count, self.sum, None if self.le_counts is None else (tuple(self.le), tuple(self.le_counts)))


CHECKPOINT_EVERY = 64  # history states of a histogram between two full copies of its bins


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


class Profile(Series):
    """Cumulative value and samples per named frame."""

    __slots__ = ("frames", "max_frames")

    def __init__(self, name, tags, max_frames=MAX_FRAMES):
        Series.__init__(self, name, PROFILE, tags)
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

    def stats(self):
        items = sorted(self.frames.items(), key=lambda kv: kv[1][0], reverse=True)[: self.max_frames]
        frames = [{"name": k, "value": v[0], "samples": v[1]} for k, v in items]
        return {"frames": kernel_names.annotate(self.name, frames)}  # kernels: + display_name, category

    def state(self):
        return {k: (v[0], v[1]) for k, v in self.frames.items()}


_TYPES = {GAUGE: Gauge, COUNTER: Counter, HISTOGRAM: Histogram, PROFILE: Profile}

_MISSING = object()
_GONE = object()  # the series was removed at this snapshot


class History:
    """The per-second snapshots of every series' cumulative state, kept as
    changes: a snapshot stores a series' state only if it changed since the
    previous snapshot, so an idle series costs nothing per second (4,900
    idle histograms used to cost 75 MB a second). Reads look like a deque
    of (ts_ns, snapshot) where a snapshot is a read-only mapping
    {series key: state}, the shape windows and the engine summary read.

    Memory: one entry per (series, second in which it changed), for at
    most `maxlen` snapshots; histogram states keep only their non-empty
    bins (SparseBins)."""

    def __init__(self, maxlen):
        self.maxlen = maxlen
        self._times = collections.deque(maxlen=maxlen)  # (seq, ts)
        self._seqs = {}  # key -> [seq, ...] ascending: the snapshots at which it changed
        self._states = {}  # key -> [state, ...] (parallel to _seqs); _GONE once removed
        self._by_name = {}  # name -> set of keys
        self._seq = 0
        self._trimmed_to = 0

    # -- writing (under the store's lock) ------------------------------------
    def begin(self):
        self._seq += 1
        return self._seq

    def record(self, key, seq, state):
        seqs = self._seqs.get(key)
        if seqs is None:
            self._seqs[key] = [seq]
            self._states[key] = [state]
            self._by_name.setdefault(key[0], set()).add(key)
        elif seqs[-1] == seq:
            self._states[key][-1] = state
        else:
            seqs.append(seq)
            self._states[key].append(state)

    def removed(self, key):
        """The series is gone from the next snapshot on."""
        if key in self._seqs:
            self.record(key, self._seq + 1, _GONE)

    def commit(self, seq, ts):
        self._times.append((seq, ts))
        if self._times[0][0] - self._trimmed_to >= 16:
            self._trim(self._times[0][0])

    def _trim(self, oldest):
        """Forgets changes older than the oldest snapshot, keeping the last
        of them (the state at that snapshot)."""
        self._trimmed_to = oldest
        for key in list(self._seqs):
            seqs = self._seqs[key]
            if seqs[0] >= oldest:
                continue
            i = bisect.bisect_right(seqs, oldest) - 1  # the state at `oldest`
            if i > 0:
                del seqs[:i]
                del self._states[key][:i]
            if len(seqs) == 1 and self._states[key][0] is _GONE:
                del self._seqs[key], self._states[key]
                names = self._by_name.get(key[0])
                if names is not None:
                    names.discard(key)
                    if not names:
                        del self._by_name[key[0]]

    # -- reading -------------------------------------------------------------
    def state_at(self, key, seq):
        seqs = self._seqs.get(key)
        if not seqs or seqs[0] > seq:
            return _MISSING
        states = self._states[key]
        if seqs[-1] <= seq:
            st = states[-1]
        else:
            st = states[bisect.bisect_right(seqs, seq) - 1]
        return _MISSING if st is _GONE else st

    def changes(self, key, seq_lo, seq_hi):
        """[(seq, state)] of the changes with seq_lo < seq <= seq_hi (state
        None: the series was removed)."""
        seqs = self._seqs.get(key)
        if not seqs:
            return []
        i = bisect.bisect_right(seqs, seq_lo)
        j = bisect.bisect_right(seqs, seq_hi)
        states = self._states[key]
        return [(seqs[k], None if states[k] is _GONE else states[k]) for k in range(i, j)]

    def keys_named(self, name):
        return list(self._by_name.get(name, ()))

    def __len__(self):
        return len(self._times)

    def __iter__(self):
        return iter([(ts, Snapshot(self, seq)) for seq, ts in list(self._times)])

    def __getitem__(self, i):
        seq, ts = self._times[i]
        return ts, Snapshot(self, seq)

    def __reversed__(self):
        return iter([(ts, Snapshot(self, seq)) for seq, ts in reversed(list(self._times))])


class Snapshot(collections.abc.Mapping):
    """{series key: cumulative state} as of one history snapshot."""

    __slots__ = ("history", "seq")

    def __init__(self, history, seq):
        self.history, self.seq = history, seq

    def __getitem__(self, key):
        st = self.history.state_at(key, self.seq)
        if st is _MISSING:
            raise KeyError(key)
        return st

    def get(self, key, default=None):
        st = self.history.state_at(key, self.seq)
        return default if st is _MISSING else st

    def __contains__(self, key):
        return self.history.state_at(key, self.seq) is not _MISSING

    def __iter__(self):
        h, seq = self.history, self.seq
        return iter([k for k in list(h._seqs) if h.state_at(k, seq) is not _MISSING])

    def __len__(self):
        return sum(1 for _ in self)

    def items_named(self, names):
        """[(key, state)] of the series with one of these names."""
        out = []
        for name in names:
            for key in self.history.keys_named(name):
                st = self.history.state_at(key, self.seq)
                if st is not _MISSING:
                    out.append((key, st))
        return out

    def has_name(self, name):
        return any(self.history.state_at(k, self.seq) is not _MISSING for k in self.history.keys_named(name))


class MetricStore:
    def __init__(self, max_series=MAX_SERIES, max_frames=MAX_FRAMES, clock=time.time_ns,
                 history_seconds=600):
        self.lock = threading.RLock()
        self.clock = clock
        self.max_series = max_series
        self.max_frames = max_frames
        self.series = {}  # (name, type, tags_key) -> Series
        self.series_dropped = 0
        self.errors = collections.deque(maxlen=MAX_ERRORS)
        self.errors_total = 0
        self.resources = {}  # (kind, tags_key) -> dict
        self.context = {}
        self.start_ns = clock()
        self.history = History(history_seconds + 1)  # (ts_ns, {key: state}) once a second
        self._warned_cap = False
        self._order = None  # series in payload order, rebuilt when series come or go
        self.last_read_ns = None  # when /signals was last served (see prerender)
        self._by_pid = {}  # process.pid tag -> set of series keys
        self._exited = collections.OrderedDict()  # pids that exited, oldest first (not folded yet)
        self._unserializable = set()  # keys left out of the payload (one error entry each)

    # -- series --------------------------------------------------------------
    def get(self, name, type_, tags=None):
        """The series for (name, type, tags), created on first use; None
        when the series cap is reached (counted in graphsignal_dropped_series,
        the first one also an error entry). Series of exited processes are
        folded first, so they never crowd out live ones."""
        key = (name, type_, tags_key(tags))
        s = self.series.get(key)
        if s is None:
            if len(self.series) >= self.max_series and name not in _INTERNAL:
                if self._exited:
                    self._fold(list(self._exited))
                if len(self.series) >= self.max_series:
                    self._refuse(name, tags)
                    return None
            if type_ == PROFILE:
                s = Profile(name, tags or {}, self.max_frames)
            else:
                s = _TYPES[type_](name, tags or {})
            self.series[key] = s
            self._order = None
            pid = s.tags.get("process.pid")
            if pid is not None:
                self._by_pid.setdefault(pid, set()).add(key)
        return s

    def _refuse(self, name, tags):
        self.series_dropped += 1
        s = self.get(DROPPED_SERIES_METRIC, COUNTER, {})
        s.total = self.series_dropped
        s.touch(self.clock())
        if not self._warned_cap:
            self._warned_cap = True
            msg = ("series cap of %d reached; new series are dropped and counted in %s (first: %s %s)"
                   % (self.max_series, DROPPED_SERIES_METRIC, name, dict(tags or {})))
            logger.warning("graphsignal: %s", msg)
            self.add_error("warning", msg, tags={"source": "store"})

    # -- processes that exited ------------------------------------------------
    def pids(self):
        """process.pid tag values that have series (exited ones included)."""
        with self.lock:
            return [p for p in self._by_pid if p != EXITED]

    def process_exited(self, pid):
        """The process is gone: its series stay apart for a while (the last
        MAX_EXITED_KEPT exited processes), then fold into process.pid
        "exited" (see the module doc)."""
        pid = str(pid)
        with self.lock:
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
                src = self.series.pop(key, None)
                if src is None:
                    continue
                self.history.removed(key)
                self._order = None
                if src.type == GAUGE:
                    continue  # the last reading of a process that is gone means nothing now
                tags = {k: v for k, v in src.tags.items() if k not in PER_PROCESS_TAGS}
                tags["process.pid"] = EXITED
                dst = self.get(src.name, src.type, tags)
                if dst is None:
                    continue
                _merge(dst, src)
                dst.touch(ts)
            for rkey in [k for k, r in self.resources.items() if r["tags"].get("process.pid") == pid]:
                del self.resources[rkey]
            s = self.get(FOLDED_METRIC, COUNTER, {})
            s.total = (s.total or 0) + 1
            s.touch(ts)

    def set_gauge(self, name, tags, value, ts=None):
        with self.lock:
            s = self.get(name, GAUGE, tags)
            if s is not None:
                s.value = value
                s.touch(ts or self.clock())

    def set_counter(self, name, tags, total, ts=None):
        """Sets a counter's cumulative total (sources that read totals)."""
        with self.lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = total
                s.touch(ts or self.clock())

    def add_counter(self, name, tags, delta, ts=None):
        with self.lock:
            s = self.get(name, COUNTER, tags)
            if s is not None:
                s.total = (s.total or 0) + delta
                s.touch(ts or self.clock())

    def add_profile(self, name, tags, frames, ts=None):
        """frames: iterable of (frame, value, samples) to add."""
        with self.lock:
            s = self.get(name, PROFILE, tags)
            if s is not None:
                for frame, value, samples in frames:
                    s.add(frame, value, samples)
                s.touch(ts or self.clock())

    def ensure_profile(self, name, tags, ts=None):
        """An empty profile is a measured zero (e.g. no graphs launched)."""
        with self.lock:
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
        with self.lock:
            s = self.get(name, HISTOGRAM, tags)
            if s is None:
                return
            s.count += count
            s.sum += total
            if vmin is not None:
                s.min = vmin if s.min is None else min(s.min, vmin)
            if vmax is not None:
                s.max = vmax if s.max is None else max(s.max, vmax)
            s.add_bins(bin_counts)
            s.touch(ts or self.clock())

    def set_histogram_buckets(self, name, tags, count, total, le, cumulative, ts=None):
        """Sets a histogram from cumulative `le` buckets (Prometheus)."""
        per = [c - p for c, p in zip(cumulative, [0] + list(cumulative[:-1]))]
        with self.lock:
            s = self.get(name, HISTOGRAM, tags)
            if s is not None:
                s.count, s.sum = count, total
                s.le, s.le_counts = list(le), per
                s.touch(ts or self.clock())

    def remove(self, name, type_, tags=None):
        with self.lock:
            key = (name, type_, tags_key(tags))
            s = self.series.pop(key, None)
            if s is not None:
                self.history.removed(key)
                keys = self._by_pid.get(s.tags.get("process.pid"))
                if keys is not None:
                    keys.discard(key)
            self._order = None

    # -- errors and resources ------------------------------------------------
    def add_error(self, level, message, exception=None, tags=None, ts=None):
        """Keeps the latest MAX_ERRORS entries; a repeat of the latest entry
        with the same text is counted instead of stored again (and is
        current again if it had been resolved)."""
        ts = ts or self.clock()
        with self.lock:
            self.errors_total += 1
            tags = {str(k): str(v) for k, v in (tags or {}).items()}
            for e in reversed(self.errors):
                if e["message"] == message and e["exception"] == exception and e["level"] == level \
                        and e["tags"] == tags:
                    e["count"] += 1
                    e["last_ns"] = ts
                    e["resolved_ns"] = None
                    return
            self.errors.append({"level": level, "message": message, "exception": exception, "tags": tags,
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
        with self.lock:
            for e in self.errors:
                if e.get("resolved_ns") is None and e["tags"] == want:
                    e["resolved_ns"] = ts
                    n += 1
        return n

    def set_resource(self, kind, tags, attributes, ts=None):
        ts_s = int((ts or self.clock()) // 1_000_000_000)
        with self.lock:
            key = (kind, tags_key(tags))
            r = self.resources.get(key)
            if r is None:
                r = self.resources[key] = {"kind": kind, "tags": dict(tags or {}), "attributes": {},
                                           "first_seen_ts": ts_s, "last_seen_ts": ts_s}
            r["attributes"].update({str(k): v for k, v in attributes.items()})
            r["last_seen_ts"] = ts_s

    # -- snapshots -----------------------------------------------------------
    def take_history(self, ts=None):
        """Appends a snapshot of every series' cumulative state (called
        once a second by the poller); windows are differences of two.
        Only series that changed since the previous snapshot are copied."""
        ts = ts or self.clock()
        with self.lock:
            h = self.history
            seq = h.begin()
            for key, s in self.series.items():
                if s._changed:
                    s._changed = False
                    h.record(key, seq, s.state())
            h.commit(seq, ts)

    def prerender(self, active_window_ns=60_000_000_000):
        """Serializes the series that changed, off the request path (the
        poller calls this every cycle), but only while someone has read
        /signals recently: an unread sidecar spends nothing on JSON."""
        last = self.last_read_ns
        if last is None or self.clock() - last > active_window_ns:
            return 0
        n = 0
        with self.lock:
            for s in self.series.values():
                if s._json is None:
                    s.to_json()
                    n += 1
        return n

    def metrics_json(self):
        """Serialized series in (name, tags) order. A series that cannot be
        serialized is left out, with one error entry."""
        with self.lock:
            self.last_read_ns = self.clock()
            if self._order is None:
                keys = sorted(self.series, key=lambda k: (k[0], k[2], k[1]))
                self._order = [self.series[k] for k in keys]
            try:
                return [s.to_json() for s in self._order]
            except Exception:
                pass
            out = []
            for s in self._order:
                try:
                    out.append(s.to_json())
                except Exception as e:
                    self._left_out(s, e)
            return out

    def _left_out(self, s, e):
        key = (s.name, s.type, tags_key(s.tags))
        if key in self._unserializable:
            return
        self._unserializable.add(key)
        msg = "series %s %s cannot be serialized (%s: %s); it is left out of the payload" % (
            s.name, s.tags, type(e).__name__, e)
        logger.warning("graphsignal: %s", msg)
        self.add_error("error", msg, tags={"source": "store"})

    def lookup(self, name, type_=None, tags=None):
        """Series with this name (and type, and tags containing `tags`)."""
        with self.lock:
            out = []
            for (n, t, _), s in self.series.items():
                if n == name and (type_ is None or t == type_) and \
                        all(s.tags.get(k) == v for k, v in (tags or {}).items()):
                    out.append(s)
            return out


def _merge(dst, src):
    """Adds src's cumulative values into dst (same name and type)."""
    if dst.type == COUNTER:
        if src.total is not None:
            dst.total = (dst.total or 0) + src.total
    elif dst.type == HISTOGRAM:
        dst.count += src.count
        dst.sum += src.sum
        if src.min is not None:
            dst.min = src.min if dst.min is None else min(dst.min, src.min)
        if src.max is not None:
            dst.max = src.max if dst.max is None else max(dst.max, src.max)
        if src.bin_counts is not None:
            dst.add_bins(src.bin_counts)
        elif src.le is not None and (dst.le is None or list(dst.le) == list(src.le)):
            dst.le = list(src.le)
            dst.le_counts = [a + b for a, b in zip(dst.le_counts or [0] * len(src.le), src.le_counts)]
    elif dst.type == PROFILE:
        for frame, (v, n) in src.frames.items():
            dst.add(frame, v, n)
