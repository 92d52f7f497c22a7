"""GET /metrics: every signal in the Prometheus text format (OpenMetrics
when the scraper's Accept asks for it), written by prometheus_client's own
exposition code from a custom collector.

Mapping, from a /signals series to Prometheus families:

  name      `graphsignal_` + the metric name (not doubled for names that
            already start with it), characters outside [a-zA-Z0-9_] as `_`
            (colons too: Prometheus keeps them for recording rules, and
            prometheus_client's OpenMetrics writer escapes them in sample
            names but not in the family's TYPE line);
            `_nanoseconds` and `_ns` (epoch timestamps) become `_seconds`,
            values divided by 1e9; other units stay in the name as they are
            (`_bytes`, `_percent`, `_watts`, ...)
  gauge     a gauge; null (not measured) is no sample
  counter   a counter: `<family>_total` (a name's own `_total` is not doubled)
  histogram a histogram. Our log-linear bins (probes) become cumulative
            buckets at every power of two, `le` = 2**k - 1 in the metric's
            unit (then in seconds for nanoseconds), from the octave of the
            smallest to that of the largest value seen, plus +Inf: at most
            65 buckets, and exact counts, because every octave edge is a bin
            edge. Engine histograms keep the engine's own `le` buckets;
            engine summaries (count and sum only) stay summaries.
  profile   two counters per frame: `<family>_total{frame="..."}` (value)
            and `<family>_count_total{frame="..."}` (samples), for the top N
            frames by value (N = GRAPHSIGNAL_METRICS_TOP_FRAMES, default 50)
  tags      labels: characters outside [a-zA-Z0-9_] as `_` (`process.pid`
            -> `process_pid`); a tag that would clash with the family's own
            label (`frame` on profiles, `le` on histograms, `quantile` on
            summaries) or starts with `__` gets a `tag_` prefix

Engine metrics (what the sidecar scraped from the engine's own endpoint)
are left out unless GRAPHSIGNAL_METRICS_ENGINE=1 or the scrape asks with
`?engine=1`: the engine serves them itself. A name that two series would
both claim (a probe gauge `x_count` beside a histogram `x`, a gauge and a
counter of one name), or two series whose tags sanitize to the same
labels, is exported once, for the first in /signals order; the others
are counted in `graphsignal_metrics_conflicting_series`.

Source: the store's snapshot (MetricStore.snapshot(), without JSON), its
series views read directly: a gauge's value, a counter's total and a
histogram's count, sum and bins from the type's own stats, a profile's top
frames from its state. Every number is what /signals writes and a JSON
parser reads back (NaN and infinities are null, integers beyond 64 bits
floats), so /metrics says what /signals says; a series with a value JSON
cannot hold is left out, as /signals leaves it out. A scrape of /metrics
is no read of /signals: it does not keep the store serializing JSON
(MetricStore.prerender).

Cost: prometheus_client writes a few microseconds per sample, too slow to
re-render 5,000 series every scrape. So Exposition keeps each series'
rendered lines, keyed by what the series showed (its value, total, count
and sum, or its top frames), and has prometheus_client render only the
series that changed since the last scrape, all of them in one call; the
response is those lines reassembled family by family, byte for byte what
one prometheus_client call over everything writes (tests compare the two).
"""
import heapq
import logging
import math
import threading
from typing import Any, Callable, Dict, Optional, Set, Tuple

import numpy as np
import orjson
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from graphsignal import config
from graphsignal.sidecar.series import dumps
from graphsignal.sidecar.store import MetricStore
from graphsignal.signals_model import SeriesKey, SeriesViewLike

logger = logging.getLogger("graphsignal")

DEFAULT_TOP_FRAMES = config.DEFAULT_TOP_FRAMES
MAX_TOP_FRAMES = config.MAX_TOP_FRAMES  # what /signals itself lists per profile
PREFIX = "graphsignal_"
CONFLICTS_METRIC = "graphsignal_metrics_conflicting_series"
NS = 1e9

_OWN_LABEL = {"profile": "frame", "histogram": "le", "summary": "quantile"}
# the sample names each family type writes (OpenMetrics), to find clashes
_SUFFIXES = {"gauge": ("",), "counter": ("_total", "_created"),
             "histogram": ("_bucket", "_count", "_sum", "_created"),
             "summary": ("", "_count", "_sum", "_created")}


def _sanitize(text):
    return "".join(ch if ("a" <= ch <= "z" or "A" <= ch <= "Z" or "0" <= ch <= "9" or ch == "_") else "_"
                   for ch in text)


_name_cache: Dict[Tuple[str, str], Tuple[str, int]] = {}


def family_name(name, type_):
    """(Prometheus family name, divisor) for a /signals metric name and
    type; dividing the stored value by divisor gives the family's unit."""
    got = _name_cache.get((name, type_))
    if got is not None:
        return got
    base = name
    if type_ == "counter" and base.endswith("_total"):
        base = base[:-6]
    div = 1
    if base.endswith("_nanoseconds"):
        base, div = base[:-12] + "_seconds", NS
    elif base.endswith("_ns"):
        base, div = base[:-3] + "_seconds", NS
    base = _sanitize(base)
    if not base.startswith(PREFIX):
        base = PREFIX + base
    if len(_name_cache) < 20000:
        _name_cache[(name, type_)] = (base, div)
    return base, div


_label_cache: Dict[str, str] = {}


def label_name(key):
    """A Prometheus label name for a tag key (before the family's own
    label is set aside, see labels_of)."""
    out = _label_cache.get(key)
    if out is None:
        out = _sanitize(key) or "_"
        if out[0].isdigit():
            out = "_" + out
        if out.startswith("__"):  # reserved for Prometheus itself
            out = "tag_" + out
        if len(_label_cache) < 20000:
            _label_cache[key] = out
    return out


def labels_of(tags, own=None):
    """Labels for tags; own: the label the family sets itself (le, ...).
    Two keys that sanitize alike: the first in sorted order wins."""
    labels = {}
    for k in sorted(tags):
        ln = label_name(k)
        if ln == own:
            ln = "tag_" + ln
        if ln not in labels:
            labels[ln] = str(tags[k])
    return labels


def octave_buckets(bins, counts, div=1):
    """[(le, cumulative count)] at le = 2**k - 1 (divided by div), for k
    from the octave of the smallest bin to that of the largest, from
    log-linear bin upper bounds (ascending) and their counts."""
    if not bins:
        return []
    ub = np.asarray(bins, dtype=np.uint64)
    k = np.frexp(ub.astype(np.float64))[1].astype(np.int64)  # bit_length, for ub < 2**53
    # float64 rounds 2**k - 1 up to 2**k for k > 53: one octave too high
    over = (k > 0) & (np.right_shift(ub, np.maximum(k - 1, 0).astype(np.uint64)) == 0)
    k -= over.astype(np.int64)
    lo = int(k[0])
    per = np.bincount(k - lo, weights=np.asarray(counts, dtype=np.float64))
    cum = np.cumsum(per)
    return [(((1 << (lo + i)) - 1) / div, int(c)) for i, c in enumerate(cum.tolist())]


class _Row:
    """One series' part of one family: the series' identity, what it shows
    (fingerprint), how to build its samples, and its rendered lines."""

    __slots__ = ("key", "fingerprint", "build", "lines")

    def __init__(self, key, fingerprint, build):
        self.key, self.fingerprint, self.build = key, fingerprint, build
        self.lines = None


def series_key(s):
    return s["name"], s["type"], dumps(s["tags"])


_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integers


def _plain(x):
    """x as /signals writes it and a JSON parser reads it back: NaN and
    infinities None, integers beyond 64 bits floats (None beyond a float).
    Raises what /signals would (a value JSON cannot hold)."""
    t = type(x)
    if t is int:
        if _INT_MIN <= x <= _INT_MAX:
            return x
        try:
            return float(x)
        except OverflowError:
            return None
    if t is float:
        return x if math.isfinite(x) else None
    if x is None or t is bool or t is str:
        return x
    return orjson.loads(dumps(x))  # numpy scalars and the rest: their own JSON, read back


def _plain_list(xs):
    return [x if type(x) is int and _INT_MIN <= x <= _INT_MAX else _plain(x) for x in xs]


def shown(v: SeriesViewLike, top: int, max_frames: int) -> Optional[Dict[str, Any]]:
    """What /metrics shows of a series view, as the payload's metric dict
    ({name, type, tags, stats}) with only the stats read here, or None
    when a value cannot be written (the series is left out, as /signals
    leaves it out). top: frames per profile; max_frames: the payload's."""
    type_ = v.type
    try:
        if type_ == "profile":
            # the payload's order (value, largest first; ties as made), without sorting every frame
            items = heapq.nlargest(min(top, max_frames), (v.state or {}).items(), key=lambda kv: kv[1][0])
            frames = [{"name": k, "value": _plain(fv), "samples": _plain(fs)} for k, (fv, fs) in items]
            stats: Dict[str, Any] = {"frames": frames}
        else:
            st = v.stats()
            if type_ == "gauge":
                stats = {"value": _plain(st["value"])}
            elif type_ == "counter":
                stats = {"total": _plain(st["total"])}
            else:
                stats = {"count": _plain(st["count"]), "sum": _plain(st["sum"]), "bins": _plain_list(st["bins"]),
                         "counts": _plain_list(st["counts"])}
    except (TypeError, ValueError, OverflowError):  # orjson.JSONEncodeError is a TypeError
        return None
    return {"name": v.name, "type": type_, "tags": v.tags, "stats": stats}


class _Planner:
    """Assigns series to families in exposition order, one at a time."""

    def __init__(self, engine_keys, engine, top_frames):
        self.engine_keys = engine_keys or set()
        self.engine_names = {k[0] for k in self.engine_keys}
        self.engine = engine
        self.top = top_frames
        self.families = {}  # family name -> [Metric, rows, (source name, type)]
        self.taken = {}  # sample names some family writes -> family name
        self.labelsets = set()  # (family name, labels) exported so far
        self.conflicts = 0

    def place(self, s):
        """(layout, rows) for series s, rows also appended to their
        families; None when s is not exported (engine, or a name clash)."""
        name, type_, tags = s["name"], s["type"], s["tags"]
        is_engine = name in self.engine_names and (name, type_, tuple(sorted(tags.items()))) in self.engine_keys
        if is_engine and not self.engine:
            return None
        if type_ == "histogram" and is_engine and not s["stats"].get("bins"):
            type_ = "summary"
        fname, div = family_name(name, type_)
        kinds = ((fname, "counter"), (fname + "_count", "counter")) if type_ == "profile" else ((fname, type_),)
        slots = []
        for n, t in kinds:
            slot = self.families.get(n)
            if slot is None:
                # its samples must not be another family's samples, nor
                # another family's name (OpenMetrics parsers refuse both)
                if n in self.taken or any(n + suf in self.taken or n + suf in self.families for suf in _SUFFIXES[t]):
                    break
                doc = "%s (%s%s)" % (name, s["type"], ", in seconds" if div != 1 else "")
                slot = self.families[n] = [Metric(n, doc, t), [], (name, s["type"])]
                for suf in _SUFFIXES[t]:
                    self.taken[n + suf] = n
            elif slot[2] != (name, s["type"]):
                break
            slots.append(slot)
        if len(slots) != len(kinds):
            self.conflicts += 1
            return None
        labels = labels_of(tags, _OWN_LABEL.get(type_)) if tags else {}
        ident = (fname, tuple(sorted(labels.items())))
        if ident in self.labelsets:  # tags that sanitize alike ("a.b" and "a_b"): one series only
            self.conflicts += 1
            return None
        self.labelsets.add(ident)
        layout = (type_, fname, div, labels, is_engine)
        key = series_key(s)
        rows = [_Row(key, fp, build) for fp, build in parts(s, layout, self.top)]
        for slot, row in zip(slots, rows):
            slot[1].append(row)
        return layout, rows

    def plan(self):
        out = [(slot[0], slot[1]) for slot in self.families.values()]
        if self.conflicts:
            fam = Metric(CONFLICTS_METRIC, "series left out of /metrics: their Prometheus name was taken", "gauge")
            n = self.conflicts
            out.append((fam, [_Row(("", "gauge", b""), (n,), lambda: [Sample(CONFLICTS_METRIC, {}, n)])]))
        return out


def parts(s, layout, top):
    """[(fingerprint, build)] of series s, one per family it feeds: the
    fingerprint is what the series shows (equal fingerprints render equal
    lines); build() -> its prometheus_client Samples."""
    type_, fname, div, labels, is_engine = layout
    stats = s["stats"]
    if type_ == "gauge" or type_ == "counter":
        v = stats.get("value" if type_ == "gauge" else "total")
        sname = fname if type_ == "gauge" else fname + "_total"
        return [((v,), lambda: [] if v is None else [Sample(sname, labels, v / div if div != 1 else v)])]
    if type_ == "profile":
        fp = tuple((f["name"], f["value"], f["samples"]) for f in stats.get("frames", ())[:top])
        return [(fp, lambda: _profile_values(fname, labels, fp, div)),
                (fp, lambda: _profile_samples(fname, labels, fp))]
    # cumulative: an unchanged count and sum is an unchanged histogram
    fp = (stats.get("count"), stats.get("sum"), len(stats.get("bins") or ()))
    fn = _summary if type_ == "summary" else _histogram
    return [(fp, lambda: fn(fname, labels, stats, div, is_engine))]


class Collector:
    """prometheus_client's collector protocol over one snapshot of the
    store: collect() yields the Metric families of the module doc."""

    def __init__(self, series, top_frames=DEFAULT_TOP_FRAMES, engine_keys=None, engine=False):
        """series: the payload's metric dicts ({name, type, tags, stats}:
        shown() of a snapshot's views, or a /signals document's metrics);
        engine_keys: the set of (name, type, tags tuple) that came from the
        engine's endpoint; engine: export those too."""
        self.series = series
        self.top_frames = top_frames
        self.engine_keys = engine_keys
        self.engine = engine

    def collect(self):
        planner = _Planner(self.engine_keys, self.engine, self.top_frames)
        for s in self.series:
            planner.place(s)
        for fam, rows in planner.plan():
            for row in rows:
                fam.samples.extend(row.build())
            yield fam


def _profile_values(fname, labels, frames, div):
    name = fname + "_total"
    out = []
    for frame, value, _ in frames:
        fl = dict(labels)
        fl["frame"] = frame
        out.append(Sample(name, fl, value / div if div != 1 else value))
    return out


def _profile_samples(fname, labels, frames):
    name = fname + "_count_total"
    out = []
    for frame, _, samples in frames:
        fl = dict(labels)
        fl["frame"] = frame
        out.append(Sample(name, fl, samples))
    return out


def _summary(fname, labels, stats, div, is_engine):
    count = stats.get("count")
    if count is None:
        return []
    return _count_sum(fname, labels, count, stats, div)


def _histogram(fname, labels, stats, div, is_engine):
    count = stats.get("count")
    if count is None:
        return []
    bins, counts = stats.get("bins") or [], stats.get("counts") or []
    if is_engine:  # the engine's own buckets (None is +Inf)
        buckets, cum = [], 0
        for b, c in zip(bins, counts):
            cum += c
            if b is not None:
                buckets.append((b / div, cum))
    else:
        buckets = octave_buckets(bins, counts, div)
    name_b = fname + "_bucket"
    out = []
    for le, cum in buckets:
        bl = dict(labels)
        bl["le"] = floatToGoString(le)
        out.append(Sample(name_b, bl, cum))
    bl = dict(labels)
    bl["le"] = "+Inf"
    out.append(Sample(name_b, bl, count))
    return out + _count_sum(fname, labels, count, stats, div)


def _count_sum(fname, labels, count, stats, div):
    # An engine that did not expose its _sum (null here): neither, since
    # OpenMetrics allows no NaN sum and no _count without a _sum.
    total = stats.get("sum")
    if total is None:
        return []
    return [Sample(fname + "_count", labels, count), Sample(fname + "_sum", labels, total / div)]


class _Families:
    """A collector over prepared families (what the encoders call)."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def _content(v):
    """What a view's rows are made of, cheaply: a histogram's count and sum
    (and an engine's buckets) without its quantiles (a cumulative count
    and sum that did not move is a histogram that did not: see parts()),
    else its state."""
    return v.kind.plain_stats(v.state) if v.type == "histogram" else v.state


def _same(a, b):
    """Whether two contents are equal and of one type; False when they
    cannot be compared (then the view is read in full)."""
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. arrays: their == is no bool
        return False


class _State:
    """What the last render of one (content type, engine) pair left: the
    series views in order, each with its layout and rows, the plan, and
    the rendered header of each family."""

    def __init__(self):
        self.views = []
        self.entries = []  # per series: (key, layout, rows); layout None: not exported, False: not writable
        self.plan = []
        self.engine_keys = None
        self.heads = {}  # family name -> header lines


class Exposition:
    """Renders /metrics for one store. engine_keys: callable -> set of
    series keys that came from the engine's endpoint (empty when there is
    none); top_frames: frames exported per profile (1..MAX_TOP_FRAMES);
    engine: re-export the engine's series (a scrape's ?engine= overrides
    it). Settings come as these values (from_settings(): config.Settings')."""

    def __init__(self, store: MetricStore, engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None,
                 top_frames: int = DEFAULT_TOP_FRAMES, engine: bool = False) -> None:
        if not 1 <= top_frames <= MAX_TOP_FRAMES:
            raise ValueError("top_frames must be between 1 and %d, not %r" % (MAX_TOP_FRAMES, top_frames))
        self.store = store
        self.engine_keys = engine_keys
        self.top_frames = top_frames
        self.engine = engine
        self._lock = threading.Lock()
        self._states: Dict[Tuple[str, bool], _State] = {}  # (content type, engine) -> _State
        self.rendered_samples = 0  # samples prometheus_client wrote in the last render
        self.replanned = False  # the last render laid out every series afresh

    @classmethod
    def from_settings(cls, store: MetricStore, settings: config.Settings,
                      engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None) -> "Exposition":
        """An Exposition as the run's settings configure it
        (GRAPHSIGNAL_METRICS_TOP_FRAMES, GRAPHSIGNAL_METRICS_ENGINE)."""
        return cls(store, engine_keys, settings.metrics_top_frames, settings.metrics_engine)

    def _keys(self):
        return self.engine_keys() if self.engine_keys is not None else set()

    def collector(self, engine: Optional[bool] = None) -> Collector:
        """The plain collector over the store as it is now (no cache)."""
        snap = self.store.snapshot()
        series = [m for m in (shown(v, self.top_frames, snap.max_frames) for v in snap.series) if m is not None]
        return Collector(series, self.top_frames, self._keys(), self.engine if engine is None else engine)

    def render(self, accept: Optional[str] = None, engine: Optional[bool] = None) -> Tuple[bytes, str]:
        """(body bytes, content type) for a scrape with this Accept header.
        engine: re-export engine metrics (None: as configured)."""
        encoder, content_type = choose_encoder(accept or "")
        engine = self.engine if engine is None else engine
        snap = self.store.snapshot()
        keys = self._keys()
        with self._lock:
            st = self._states.get((content_type, engine))
            if st is None:
                st = self._states[(content_type, engine)] = _State()
            return self._render(st, snap.series, snap.max_frames, keys, engine, encoder, content_type), content_type

    def _update(self, st, views, max_frames, keys):
        """Brings st's rows up to date with the views in place; False when
        the series or their layout changed (then everything is laid out
        anew)."""
        if len(views) != len(st.views) or keys != st.engine_keys:
            return False
        old = st.views
        for i, v in enumerate(views):
            o = old[i]
            if v is o:
                continue  # unchanged: the store hands out the same view until the series changes
            if v.tags is not o.tags and (v.name != o.name or v.type != o.type or v.tags != o.tags):
                return False  # another series (a series' views share its tags)
            if _same(_content(v), _content(o)):
                continue  # touched (set again to what it held): nothing to render
            key, layout, rows = st.entries[i]
            if layout is False:
                return False  # a series that could not be written changed: maybe it can now
            if layout is None:
                continue  # left out (the engine's, or a name clash) and still the same series
            s = shown(v, self.top_frames, max_frames)
            if s is None:
                return False
            if layout[0] == "summary" and s["stats"].get("bins"):
                return False  # an engine summary that grew buckets: a histogram now
            for row, (fp, build) in zip(rows, parts(s, layout, self.top_frames)):
                if fp != row.fingerprint:
                    row.fingerprint, row.build, row.lines = fp, build, None
        st.views = list(views)
        return True

    def _replan(self, st, views, max_frames, keys, engine):
        old = {}
        for fam, rows in st.plan:
            for row in rows:
                if row.lines is not None:
                    old[(fam.name, row.key)] = (row.fingerprint, row.lines)
        planner = _Planner(keys, engine, self.top_frames)
        entries = []
        for v in views:
            s = shown(v, self.top_frames, max_frames)
            if s is None:
                entries.append((None, False, None))
                continue
            placed = planner.place(s)
            entries.append((series_key(s), None, None) if placed is None else (placed[1][0].key,) + placed)
        plan = planner.plan()
        for fam, rows in plan:
            for row in rows:
                hit = old.get((fam.name, row.key))
                if hit is not None and hit[0] == row.fingerprint:
                    row.lines = hit[1]
        st.views, st.entries, st.plan, st.engine_keys = list(views), entries, plan, set(keys)
        st.heads = {name: h for name, h in st.heads.items() if name in planner.families}

    def _render(self, st, views, max_frames, keys, engine, encoder, ctype):
        self.replanned = not self._update(st, views, max_frames, keys)
        if self.replanned:
            self._replan(st, views, max_frames, keys, engine)
        todo = []
        for fam, rows in st.plan:
            missed = [row for row in rows if row.lines is None]
            if missed or fam.name not in st.heads:
                todo.append((fam, missed))
        if todo:
            built = [(fam, [(row, row.build()) for row in missed]) for fam, missed in todo]
            self.rendered_samples = sum(len(samples) for _, m in built for _, samples in m)
            fams = []
            for fam, missed in built:
                part = Metric(fam.name, fam.documentation, fam.type)
                for _, samples in missed:
                    part.samples.extend(samples)
                fams.append(part)
            lines = encoder(_Families(fams)).split(b"\n")
            if not self._split(st, built, lines):
                # an encoder that writes other than 2 header lines per family
                # and one line per sample: render everything, keep nothing
                logger.debug("graphsignal: /metrics: unexpected exposition layout; rendering without the cache")
                self._states.clear()
                return encoder(_Families(self._whole(st.plan)))
        else:
            self.rendered_samples = 0
        out = []
        for fam, rows in st.plan:
            out.append(st.heads[fam.name])
            out.extend(row.lines for row in rows)
        if ctype.startswith("application/openmetrics-text"):
            out.append(b"# EOF\n")
        return b"".join(out)

    @staticmethod
    def _split(st, built, lines):
        """Hands the lines of one encoder call back to their families and
        rows; False when the layout is not the expected one."""
        i = 0
        for fam, missed in built:
            head = lines[i:i + 2]
            if len(head) != 2 or not all(h.startswith(b"# ") for h in head):
                return False
            st.heads[fam.name] = b"\n".join(head) + b"\n"
            i += 2
            for row, samples in missed:
                part = lines[i:i + len(samples)]
                if len(part) != len(samples) or any(p.startswith(b"#") for p in part):
                    return False
                row.lines = b"".join(p + b"\n" for p in part)
                i += len(samples)
        return lines[i:] in ([b""], [b"# EOF", b""])

    @staticmethod
    def _whole(plan):
        out = []
        for fam, rows in plan:
            part = Metric(fam.name, fam.documentation, fam.type)
            for row in rows:
                part.samples.extend(row.build())
            out.append(part)
        return out
