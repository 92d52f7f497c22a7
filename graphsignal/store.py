"""The metric store: series keyed by (name, type, tags), errors, resources.

Every source writes here (poller, telemetry, scraper, console); the server
reads. One lock guards it; each series keeps its serialized JSON until it
changes, so a /signals request re-serializes only what moved.

Units live in metric names; all timestamps are epoch nanoseconds.
"""
import collections
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


def tags_key(tags):
    return tuple(sorted((str(k), str(v)) for k, v in tags.items())) if tags else ()


class Series:
    __slots__ = ("name", "type", "tags", "updated_ns", "_json", "_head")

    def __init__(self, name, type_, tags):
        self.name = name
        self.type = type_
        self.tags = dict(tags)
        self.updated_ns = None
        self._json = None
        # '{"name":..,"type":..,"tags":{..}' never changes: serialize it once
        self._head = orjson.dumps({"name": name, "type": type_, "tags": self.tags})[:-1]

    def touch(self, ts):
        self.updated_ns = ts
        self._json = None

    def stats(self):
        raise NotImplementedError

    def stats_json(self):
        return orjson.dumps(self.stats(), option=orjson.OPT_SERIALIZE_NUMPY)

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
        return b'{"value":' + orjson.dumps(self.value, option=orjson.OPT_SERIALIZE_NUMPY) + b"}"

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
        return b'{"total":' + orjson.dumps(self.total, option=orjson.OPT_SERIALIZE_NUMPY) + b"}"

    def state(self):
        return self.total


class Histogram(Series):
    """Either log-linear bins accumulated here from raw values (probes,
    exact count/sum/min/max), or explicit cumulative `le` buckets set from
    a scrape (engines: min/max are not measured and stay null)."""

    __slots__ = ("count", "sum", "min", "max", "bin_counts", "le", "le_counts")

    def __init__(self, name, tags):
        Series.__init__(self, name, HISTOGRAM, tags)
        self.count = 0
        self.sum = 0
        self.min = None
        self.max = None
        self.bin_counts = None  # np.int64[histo.NBINS] for log-linear
        self.le = None  # explicit bucket upper bounds (ascending, may end in inf)
        self.le_counts = None  # per-bucket (non-cumulative) counts

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
            return (self.count, self.sum, self.bin_counts.copy())
        return (self.count, self.sum, None if self.le_counts is None else (tuple(self.le), tuple(self.le_counts)))


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
        self.history = collections.deque(maxlen=history_seconds + 1)  # (ts_ns, {key: state})
        self._warned_cap = False
        self._order = None  # series in payload order, rebuilt when series come or go
        self.last_read_ns = None  # when /signals was last served (see prerender)

    # -- series --------------------------------------------------------------
    def get(self, name, type_, tags=None):
        """The series for (name, type, tags), created on first use; None
        when the series cap is reached (counted, logged once)."""
        key = (name, type_, tags_key(tags))
        s = self.series.get(key)
        if s is None:
            if len(self.series) >= self.max_series:
                self.series_dropped += 1
                if not self._warned_cap:
                    self._warned_cap = True
                    logger.warning("graphsignal: series cap of %d reached; new series are dropped (%s)",
                                   self.max_series, name)
                return None
            if type_ == PROFILE:
                s = Profile(name, tags or {}, self.max_frames)
            else:
                s = _TYPES[type_](name, tags or {})
            self.series[key] = s
            self._order = None
        return s

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
        per-bin counts over histo's log-linear bins."""
        with self.lock:
            s = self.get(name, HISTOGRAM, tags)
            if s is None:
                return
            if s.bin_counts is None:
                s.bin_counts = np.zeros(histo.NBINS, dtype=np.int64)
            s.count += count
            s.sum += total
            if vmin is not None:
                s.min = vmin if s.min is None else min(s.min, vmin)
            if vmax is not None:
                s.max = vmax if s.max is None else max(s.max, vmax)
            s.bin_counts += bin_counts
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
            self.series.pop((name, type_, tags_key(tags)), None)
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
        """Marks the unresolved entries whose tags include `tags` as resolved
        at `ts` (epoch ns): the condition they report has cleared (an
        engine's endpoint answers again). Returns how many were marked."""
        ts = ts or self.clock()
        want = {str(k): str(v) for k, v in tags.items()}
        n = 0
        with self.lock:
            for e in self.errors:
                if e.get("resolved_ns") is None and all(e["tags"].get(k) == v for k, v in want.items()):
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
        once a second by the poller); windows are differences of two."""
        ts = ts or self.clock()
        with self.lock:
            snap = {key: s.state() for key, s in self.series.items()}
        self.history.append((ts, snap))

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
        """Serialized series in (name, tags) order."""
        with self.lock:
            self.last_read_ns = self.clock()
            if self._order is None:
                keys = sorted(self.series, key=lambda k: (k[0], k[2], k[1]))
                self._order = [self.series[k] for k in keys]
            return [s.to_json() for s in self._order]

    def lookup(self, name, type_=None, tags=None):
        """Series with this name (and type, and tags containing `tags`)."""
        with self.lock:
            out = []
            for (n, t, _), s in self.series.items():
                if n == name and (type_ is None or t == type_) and \
                        all(s.tags.get(k) == v for k, v in (tags or {}).items()):
                    out.append(s)
            return out
