"""GET /metrics: every signal in the Prometheus text format (OpenMetrics
when the scraper's Accept asks for it).

Mapping, from a /signals series to Prometheus families, by one table
(graphsignal.naming.metrics: names, units, HELP text; the metric list of
graphsignal/reference/metrics.md is made from the same table):

  name      the table's name for our own metrics (Prometheus's naming
            rules: the `graphsignal_` prefix, base units, `_ratio` for
            fractions, `_total` only on counters, the workload's process
            metrics under client_python's names); for others (probes) the
            name with the prefix, units converted by suffix (`_nanoseconds`
            to `_seconds`, `_percent` to `_ratio`, ...); the engine's own
            names only prefixed. Characters outside [a-zA-Z0-9_] as `_`.
  gauge     a gauge; null (not measured) is no sample
  counter   a counter: `<family>_total`
  histogram a histogram. Our log-linear bins (probes: 32 per octave)
            become cumulative buckets at sub-octave edges that are bin
            edges (8 per octave, so Prometheus's histogram_quantile()
            interpolates within 1/8 of an octave; counts exact), from the
            edge of the smallest value seen to that of the largest, plus
            +Inf; a histogram whose values span more than 20 octaves gets
            4 (2 beyond 40) per octave: at most 161 buckets. Engine
            histograms keep the engine's own `le` buckets; engine
            summaries (count and sum only) stay summaries.
  profile   two counters per frame: `<family>_total{frame="..."}` (value)
            and the table's count family (`graphsignal_cuda_kernel_launches_total`;
            `<stem>_samples_total` for probes), for the top N frames by
            value (N = GRAPHSIGNAL_METRICS_TOP_FRAMES, default 50). Kernel
            profiles also carry `kernel` (the display name) and `category`.
  tags      labels: the table's label for well-known tags (`process.pid`
            -> `pid`, `device.uuid` -> `UUID`, `device.index` -> `gpu`,
            `device.bus_id` -> `pci_bus_id`: DCGM exporter's labels),
            others with characters outside [a-zA-Z0-9_] as `_`; a tag that
            would clash with the family's own label (`frame`, `le`,
            `quantile`) or starts with `__` gets a `tag_` prefix. Series of
            a GPU also get `model_name` and `Hostname`; every series gets
            the run's identity labels (service, GRAPHSIGNAL_TAGS).
  gpu_info  `graphsignal_gpu_info` = 1 per GPU resource, labelled gpu, UUID,
            pci_bus_id, model_name, Hostname, driver_version,
            cuda_driver_version.

Engine metrics (what the sidecar scraped from the engine's own endpoint)
are left out unless GRAPHSIGNAL_METRICS_ENGINE=1 or the scrape asks with
`?engine=1`: the engine serves them itself. A name that two series would
both claim (a probe gauge `x_count` beside a histogram `x`, a gauge and a
counter of one name), or two series whose tags give the same labels, is
exported once, for the first in /signals order; the others are counted in
`graphsignal_metrics_conflicting_series`.

Source: the store's snapshot (MetricStore.snapshot(), without JSON), its
series views read directly. Every number is what /signals writes and a
JSON parser reads back (NaN and infinities are null, integers beyond 64
bits floats), so /metrics says what /signals says; a series with a value
JSON cannot hold is left out, as /signals leaves it out. A scrape of
/metrics is no read of /signals: it does not keep the store serializing
JSON (MetricStore.prerender).

Cost: the text is written here, not by prometheus_client (whose metric
objects cost a few microseconds per sample): a series' labels are
rendered once, when it is laid out, and each series keeps its rendered
lines, keyed by what it showed (its value, total, count and sum, or its
top frames), so a scrape writes only the series that changed. Sample lines
are the same in both formats and shared; only the family headers differ.
prometheus_client remains the judge: Collector hands the same families to
its encoders, and the tests require both to write the same bytes.
"""
import heapq
import logging
import math
import threading
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Set, Tuple

import numpy as np
import orjson
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from graphsignal import config
from graphsignal.naming import KERNEL_PROFILES, NAMES
from graphsignal.naming.metrics import Family, label_of, prometheus_name
from graphsignal import histo
from graphsignal.sidecar.series import LogHistogram, dumps
from graphsignal.sidecar.store import MetricStore
from graphsignal.signals_model import OTHER_FRAME, SeriesKey, SeriesViewLike

logger = logging.getLogger("graphsignal")

DEFAULT_TOP_FRAMES = config.DEFAULT_TOP_FRAMES
MAX_TOP_FRAMES = config.MAX_TOP_FRAMES  # what /signals itself lists per profile
CONFLICTS_METRIC = "graphsignal_metrics_conflicting_series"
GPU_INFO_METRIC = "graphsignal_gpu_info"
PER_OCTAVE = 8  # buckets per octave of a probe histogram
MAX_BUCKETS = 160  # finite buckets of one histogram at most

_OWN_LABELS = {"histogram": ("le",), "summary": ("quantile",)}
_FRAME_LABELS = ("frame",)
_KERNEL_LABELS = ("frame", "kernel", "category")
# the sample names each family type writes (OpenMetrics), to find clashes
_SUFFIXES = {"gauge": ("",), "counter": ("_total", "_created"),
             "histogram": ("_bucket", "_count", "_sum", "_created"),
             "summary": ("", "_count", "_sum", "_created")}


class Context(NamedTuple):
    """What /metrics adds to the series' own labels: identity (label ->
    value, on every series), the host's name and each GPU's model (by
    UUID), for DCGM-style labels on GPU series, and the GPUs' info rows."""
    identity: Tuple[Tuple[str, str], ...] = ()
    hostname: str = ""
    models: Tuple[Tuple[str, str], ...] = ()
    gpus: Tuple[Tuple[Tuple[str, str], ...], ...] = ()


EMPTY_CONTEXT = Context()


def context_of(snap: Any, identity: Optional[Mapping[str, str]] = None) -> Context:
    """The Context of a store snapshot (its resources and context) and the
    run's identity labels."""
    host = snap.context.get("host.name") if isinstance(snap.context, Mapping) else None
    host = host if isinstance(host, str) else ""
    models = []
    gpus = []
    for r in snap.resources:
        if r.get("kind") != "device":
            continue
        tags, attrs = r.get("tags") or {}, r.get("attributes") or {}
        uuid = tags.get("device.uuid")
        model = attrs.get("device.name")
        if isinstance(uuid, str) and isinstance(model, str):
            models.append((uuid, model))
        row = {"gpu": tags.get("device.index"), "UUID": uuid, "pci_bus_id": tags.get("device.bus_id"),
               "model_name": model, "Hostname": host or None, "driver_version": attrs.get("driver_version"),
               "cuda_driver_version": attrs.get("cuda_driver_version")}
        gpus.append(tuple(sorted((k, str(v)) for k, v in row.items() if v is not None and v != "")))
    ident = tuple(sorted((label_of(str(k)), str(v)) for k, v in (identity or {}).items()))
    return Context(ident, host, tuple(sorted(models)), tuple(gpus))


def labels_of(tags, own=(), ctx=EMPTY_CONTEXT):
    """Labels for tags, sorted by name; own: the labels the family sets
    itself (le, frame, ...). Two keys that give one label: the first in
    sorted order wins; identity and GPU labels never replace a tag's."""
    labels = {}
    for k in sorted(tags):
        ln = label_of(k)
        if ln in own:
            ln = "tag_" + ln
        if ln not in labels:
            labels[ln] = str(tags[k])
    if ctx is not EMPTY_CONTEXT:
        uuid = tags.get("device.uuid")
        if uuid is not None:
            for u, model in ctx.models:
                if u == uuid:
                    labels.setdefault("model_name", model)
            if ctx.hostname:
                labels.setdefault("Hostname", ctx.hostname)
        for k, v in ctx.identity:
            if k not in own:
                labels.setdefault(k, v)
    return dict(sorted(labels.items()))


_INF = float("inf")


def _fg(v):
    """floatToGoString(v), without its cost for the usual numbers: a small
    int, or a finite float below 1e6 (where Go and Python write alike)."""
    t = type(v)
    if t is int:
        if -1000000 < v < 1000000:
            return "%d.0" % v
    elif t is float and -_INF < v < 1e6:
        return repr(v)
    return floatToGoString(v)


def _esc(v):
    """A label value escaped for both formats."""
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _label_str(labels):
    if not labels:
        return ""
    return "{" + ",".join('%s="%s"' % (k, _esc(v)) for k, v in labels.items()) + "}"


def _template(labels, extra):
    """A str.format template of the label set {labels + extra}, sorted as
    prometheus_client sorts: {0}, {1}, ... stand for the extra labels'
    (escaped) values, in the order given."""
    names = sorted(list(labels) + list(extra))
    parts = []
    for n in names:
        if n in labels:
            parts.append('%s="%s"' % (n, _esc(labels[n]).replace("{", "{{").replace("}", "}}")))
        else:
            parts.append('%s="{%d}"' % (n, extra.index(n)))
    return "{{" + ",".join(parts) + "}}"


def _conv_of(scale):
    """(divisor, multiplier) for a scale: divide by an integer where the
    scale is its inverse (exact decimal results), else multiply."""
    if scale == 1:
        return None, None
    if scale < 1:
        return float(round(1 / scale)), None
    return None, scale


def _conv(v, conv):
    div, mul = conv
    if div is not None:
        return v / div
    if mul is not None:
        return v * mul
    return v


# -- histogram buckets -------------------------------------------------------

def _grid(per_octave):
    edges = [0]
    for e in range(64):
        lo = 1 << e
        n = min(lo, per_octave)
        step = lo // n
        edges.extend(lo + step * j - 1 for j in range(1, n + 1))
    return np.array(edges, dtype=np.uint64)


_GRIDS = {d: _grid(d) for d in (8, 4, 2, 1)}


def _sub_octave(bins, counts, per_octave=PER_OCTAVE):
    """(per octave, index of the first edge in its grid, cumulative counts)
    of sub_octave_buckets; None for no bins."""
    if len(bins) == 0:
        return None
    ub = np.asarray(bins, dtype=np.uint64)
    span = int(ub[-1]).bit_length() - int(ub[0]).bit_length() + 1
    d = per_octave
    while d > 1 and span * d > MAX_BUCKETS:
        d //= 2
    idx = np.searchsorted(_GRIDS[d], ub, side="left")
    lo, hi = int(idx[0]), int(idx[-1])
    per = np.bincount(idx - lo, weights=np.asarray(counts, dtype=np.float64), minlength=hi - lo + 1)
    return d, lo, [int(c) for c in np.cumsum(per).tolist()]


def sub_octave_buckets(bins, counts, per_octave=PER_OCTAVE):
    """[(le, cumulative count)] from log-linear bin upper bounds (ascending
    integers) and their counts: le at every edge of `per_octave` equal
    parts of each power of two (each a bin edge, so counts are exact),
    from the edge of the smallest bin to that of the largest; fewer per
    octave where the bins span too many octaves (MAX_BUCKETS)."""
    got = _sub_octave(bins, counts, per_octave)
    if got is None:
        return []
    d, lo, cum = got
    return list(zip(_GRIDS[d][lo:lo + len(cum)].tolist(), cum))


_le_cache: Dict[Tuple[int, Any], List[str]] = {}


def _grid_les(d, conv):
    """The `le` strings of grid d's edges in the unit conv gives."""
    key = (d, conv)
    out = _le_cache.get(key)
    if out is None:
        out = [floatToGoString(_conv(e, conv)) for e in _GRIDS[d].tolist()]
        if len(_le_cache) < 256:
            _le_cache[key] = out
    return out


# -- families and rows -------------------------------------------------------

class _Fam:
    """One family of the exposition: name, type, help, unit, and its two
    headers (rendered when first asked for)."""

    __slots__ = ("name", "type", "help", "unit", "_text", "_om")

    def __init__(self, name, type_, help_, unit):
        self.name, self.type, self.help = name, type_, help_
        self.unit = unit if unit and name.endswith("_" + unit) else ""
        self._text = self._om = None

    def head(self, om):
        if om:
            if self._om is None:
                h = self.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
                out = "# HELP %s %s\n# TYPE %s %s\n" % (self.name, h, self.name, self.type)
                if self.unit:
                    out += "# UNIT %s %s\n" % (self.name, self.unit)
                self._om = out.encode("utf-8")
            return self._om
        if self._text is None:
            n = self.name + "_total" if self.type == "counter" else self.name
            h = self.help.replace("\\", "\\\\").replace("\n", "\\n")
            self._text = ("# HELP %s %s\n# TYPE %s %s\n" % (n, h, n, self.type)).encode("utf-8")
        return self._text

    def metric(self):
        return Metric(self.name, self.help, self.type, self.unit)


class _Row:
    """One series' part of one family: the series' identity, what it shows
    (fingerprint), what to write (spec: see _lines/_samples), and its
    rendered lines."""

    __slots__ = ("key", "fingerprint", "spec", "lines")

    def __init__(self, key, fingerprint, spec):
        self.key, self.fingerprint, self.spec = key, fingerprint, spec
        self.lines = None


def _lines(spec):
    """The sample lines (bytes) of a row's spec."""
    kind = spec[0]
    fg = _fg
    if kind == "value":
        _, sname, _, lstr, v = spec
        return b"" if v is None else ("%s%s %s\n" % (sname, lstr, fg(v))).encode("utf-8")
    if kind == "frames":
        pre, frames = spec[6], spec[4]  # each frame's line head, kept by the layout (_frame_heads)
        return "".join(["%s%s\n" % (p, fg(v)) for p, (_, v) in zip(pre, frames)]).encode("utf-8")
    if kind == "hist":
        _, fname, _, lstr, tpl, buckets, count, total, pre = spec
        if count is None:
            return b""
        b = fname + "_bucket" + tpl
        if pre is None:
            out = ["%s %s\n" % (b.format(le), fg(c)) for le, c in buckets]
        elif buckets and buckets[-1][1] < 1000000:  # cumulative: all small ints
            out = ["%s%d.0\n" % (p, c) for p, (_, c) in zip(pre, buckets)]
        else:
            out = ["%s%s\n" % (p, fg(c)) for p, (_, c) in zip(pre, buckets)]
        out.append("%s %s\n" % (b.format("+Inf"), fg(count)))
        if total is not None:
            out.append("%s_count%s %s\n%s_sum%s %s\n" % (fname, lstr, fg(count), fname, lstr, fg(total)))
        return "".join(out).encode("utf-8")
    # summary: count and sum
    _, fname, _, lstr, count, total = spec
    if count is None or total is None:
        return b""
    return ("%s_count%s %s\n%s_sum%s %s\n" % (fname, lstr, fg(count), fname, lstr, fg(total))).encode("utf-8")


def _samples(spec):
    """prometheus_client Samples of a row's spec (the judge's path)."""
    kind = spec[0]
    if kind == "value":
        _, sname, labels, _, v = spec
        return [] if v is None else [Sample(sname, dict(labels), v)]
    if kind == "frames":
        _, sname, labels, _, frames, extra, _ = spec
        names = _KERNEL_LABELS if extra else _FRAME_LABELS
        out = []
        for i, (frame, v) in enumerate(frames):
            fl = dict(labels)
            for n, x in zip(names, (frame,) + (tuple(extra[i]) if extra else ())):
                fl[n] = x
            out.append(Sample(sname, fl, v))
        return out
    if kind == "hist":
        _, fname, labels, _, _, buckets, count, total, _ = spec
        if count is None:
            return []
        out = []
        for le, c in buckets + [("+Inf", count)]:
            bl = dict(labels)
            bl["le"] = le
            out.append(Sample(fname + "_bucket", bl, c))
        if total is not None:
            out += [Sample(fname + "_count", dict(labels), count), Sample(fname + "_sum", dict(labels), total)]
        return out
    _, fname, labels, _, count, total = spec
    if count is None or total is None:
        return []
    return [Sample(fname + "_count", dict(labels), count), Sample(fname + "_sum", dict(labels), total)]


def series_key(s):
    return s["name"], s["type"], dumps(s["tags"])


_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integers
_NO_BINS = np.zeros(0, dtype=np.uint64)


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
            # the payload's order (value, largest first; ties as made), without sorting every frame. A
            # profile cut at the payload's max_frames lists max_frames - 1 named frames and the cut's
            # (other), which /metrics leaves out: what it holds changes with the cut, no counter
            state = v.state or {}
            if len(state) <= max_frames:
                items = heapq.nlargest(min(top, max_frames), state.items(), key=lambda kv: kv[1][0])
            else:
                items = heapq.nlargest(min(top, max_frames - 1), ((k, x) for k, x in state.items() if k != OTHER_FRAME),
                                       key=lambda kv: kv[1][0])
            frames = [{"name": k, "value": _plain(fv), "samples": _plain(fs)} for k, (fv, fs) in items]
            stats: Dict[str, Any] = {"frames": frames}
        else:
            if type_ == "histogram" and v.kind is LogHistogram:
                # the state itself: no quantiles, no lists (bins and counts stay arrays)
                count, total, _, _, bins = v.state
                ub, cnt = (_NO_BINS, _NO_BINS) if bins is None else (histo.BIN_UPPER[bins[0]], bins[1])
                return {"name": v.name, "type": type_, "tags": v.tags,
                        "stats": {"count": _plain(count), "sum": _plain(total), "bins": ub, "counts": cnt}}
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


class _Layout(NamedTuple):
    type: str  # gauge, counter, profile, histogram, summary
    family: Family
    conv: Tuple[Optional[float], Optional[float]]
    labels: Dict[str, str]
    lstr: str  # the labels, rendered ("" or "{...}")
    tpl: str  # the labels with the family's own ones as {0}, {1}, ...
    is_engine: bool
    kernels: bool  # a kernel profile (frames also carry kernel and category)
    cache: Dict[Any, str]  # rendered line heads of this series, by what they stand for


class _Planner:
    """Assigns series to families in exposition order, one at a time."""

    def __init__(self, engine_keys, engine, top_frames, ctx=EMPTY_CONTEXT):
        self.engine_keys = engine_keys or set()
        self.engine_names = {k[0] for k in self.engine_keys}
        self.engine = engine
        self.top = top_frames
        self.ctx = ctx
        self.families = {}  # family name -> [_Fam, rows, (source name, type)]
        self.taken = {}  # sample names some family writes -> family name
        self.labelsets = set()  # (family name, labels) exported so far
        self.conflicts = 0

    def _slot(self, n, t, help_, unit, source):
        """The family n of type t for series of `source`; None when the
        name is taken."""
        slot = self.families.get(n)
        if slot is None:
            # its samples must not be another family's samples, nor
            # another family's name (OpenMetrics parsers refuse both)
            if n in self.taken or any(n + suf in self.taken or n + suf in self.families for suf in _SUFFIXES[t]):
                return None
            slot = self.families[n] = [_Fam(n, t, help_, unit), [], source]
            for suf in _SUFFIXES[t]:
                self.taken[n + suf] = n
        elif slot[2] != source:
            return None
        return slot

    def place(self, s):
        """(layout, rows) for series s, rows also appended to their
        families; None when s is not exported (engine, left out by the
        table, or a name clash)."""
        name, type_, tags = s["name"], s["type"], s["tags"]
        is_engine = name in self.engine_names and (name, type_, tuple(sorted(tags.items()))) in self.engine_keys
        if is_engine and not self.engine:
            return None
        if type_ == "histogram" and is_engine and not s["stats"].get("bins"):
            type_ = "summary"
        fam = prometheus_name(name, type_, is_engine)
        if fam is None:
            return None
        source = (name, s["type"])
        if type_ == "profile":
            kinds = ((fam.name, "counter", fam.help, fam.unit),)
            if fam.samples:  # a count profile (--cuda-trace light's) has its counts as its value only
                kinds += ((fam.samples, "counter", fam.samples_help, ""),)
        else:
            kinds = ((fam.name, type_, fam.help, fam.unit),)
        slots = []
        for n, t, h, u in kinds:
            slot = self._slot(n, t, h, u, source)
            if slot is None:
                break
            slots.append(slot)
        if len(slots) != len(kinds):
            self.conflicts += 1
            return None
        kernels = type_ == "profile" and name in KERNEL_PROFILES
        own = _KERNEL_LABELS if kernels else _FRAME_LABELS if type_ == "profile" else _OWN_LABELS.get(type_, ())
        labels = labels_of(tags, own, self.ctx)
        ident = (fam.name, tuple(labels.items()))
        if ident in self.labelsets:  # tags that sanitize alike ("a.b" and "a_b"): one series only
            self.conflicts += 1
            return None
        self.labelsets.add(ident)
        tpl = _template(labels, own) if own else ""
        layout = _Layout(type_, fam, _conv_of(fam.scale), labels, _label_str(labels), tpl, is_engine, kernels, {})
        key = series_key(s)
        rows = [_Row(key, fp, spec) for fp, spec in parts(s, layout, self.top)]
        for slot, row in zip(slots, rows):
            slot[1].append(row)
        return layout, rows

    def plan(self):
        out = [(slot[0], slot[1]) for slot in self.families.values()]
        if self.ctx.gpus and GPU_INFO_METRIC not in self.taken and GPU_INFO_METRIC not in self.families:
            fam = _Fam(GPU_INFO_METRIC, "gauge", "1 per GPU: its NVML index (gpu), UUID, PCI bus id, model, host "
                       "and driver, to join with any GPU series on UUID or gpu", "")
            rows = []
            for g in self.ctx.gpus:
                labels = dict(g)
                for k, v in self.ctx.identity:
                    labels.setdefault(k, v)
                labels = dict(sorted(labels.items()))
                spec = ("value", GPU_INFO_METRIC, labels, _label_str(labels), 1)
                rows.append(_Row(("", "gauge", repr(g).encode()), (g, self.ctx.identity), spec))
            out.append((fam, rows))
        if self.conflicts:
            fam = _Fam(CONFLICTS_METRIC, "gauge", "Series left out of /metrics because their Prometheus name or "
                       "labels were taken by another series", "")
            n = self.conflicts
            out.append((fam, [_Row(("", "gauge", b""), (n,), ("value", CONFLICTS_METRIC, {}, "", n))]))
        return out


def parts(s, layout, top):
    """[(fingerprint, spec)] of series s, one per family it feeds: the
    fingerprint is what the series shows (equal fingerprints write equal
    lines); spec: what _lines and _samples write."""
    type_, fam, conv, labels, lstr, tpl = layout[:6]
    stats = s["stats"]
    if type_ == "gauge" or type_ == "counter":
        v = stats.get("value" if type_ == "gauge" else "total")
        sname = fam.name if type_ == "gauge" else fam.name + "_total"
        return [(_value_fp(v), ("value", sname, labels, lstr, None if v is None else _conv(v, conv)))]
    if type_ == "profile":
        frames = stats.get("frames", ())
        if "frames_folded" in stats:  # the cut's (other): not a series on /metrics (shown() leaves it out too)
            frames = [f for f in frames if f["name"] != OTHER_FRAME]
        fp = tuple((f["name"], f["value"], f["samples"]) for f in frames[:top])
        extra = None
        if layout.kernels and fp:
            extra = [(n.display_name, n.category) for n in NAMES.describe_all([f[0] for f in fp])]
        values = [(f[0], _conv(f[1], conv)) for f in fp]
        counts = [(f[0], f[2]) for f in fp]
        vname = fam.name + "_total"
        out = [(fp, ("frames", vname, labels, tpl, values, extra, _frame_heads(layout.cache, vname, tpl, fp, extra)))]
        if fam.samples:
            cname = fam.samples + "_total"
            out.append((fp, ("frames", cname, labels, tpl, counts, extra,
                             _frame_heads(layout.cache, cname, tpl, fp, extra))))
        return out
    # cumulative: an unchanged count and sum is an unchanged histogram
    count, total = stats.get("count"), stats.get("sum")
    bins, counts = stats.get("bins"), stats.get("counts")
    bins = () if bins is None else bins
    counts = () if counts is None else counts
    fp = (count,) + _value_fp(total) + (len(bins),)
    total = None if total is None else _conv(total, conv)
    if type_ == "summary":
        return [(fp, ("summary", fam.name, labels, lstr, count, total))]
    pre = None
    if layout.is_engine:  # the engine's own buckets (None is +Inf)
        buckets, cum = [], 0
        for b, c in zip(bins, counts):
            cum += c
            if b is not None:
                buckets.append((floatToGoString(_conv(b, conv)), cum))
    else:
        got = _sub_octave(bins, counts)
        buckets = []
        if got is not None:
            d, lo, cum = got
            les = _grid_les(d, conv)[lo:lo + len(cum)]
            buckets = list(zip(les, cum))
            cache = layout.cache
            pre = cache.get((d, lo, len(cum)))
            if pre is None:  # the buckets grew (or first seen): their line heads
                if len(cache) > 8:
                    cache.clear()
                head = fam.name + "_bucket" + tpl
                pre = cache[(d, lo, len(cum))] = [head.format(le) + " " for le in les]
    return [(fp, ("hist", fam.name, labels, lstr, tpl, buckets, count, total, pre))]


def _value_fp(v):
    """A number's part of a fingerprint: the number, and for a float its
    sign too, since -0.0 == 0.0 == False compare equal but -0.0 is written
    "-0.0"."""
    return (v, math.copysign(1.0, v)) if type(v) is float else (v,)


def _frame_heads(cache, sname, tpl, fp, extra):
    """The line heads ("name{labels} ") of a profile's frames in one
    family, each rendered once and kept in the layout's cache while its
    frame stays among those shown (a cache of at most 4x MAX_TOP_FRAMES
    heads per series: cleared when it grows past that)."""
    out = []
    for i, f in enumerate(fp):
        key = (sname, f[0], extra[i] if extra else None)
        head = cache.get(key)
        if head is None:
            if len(cache) > 4 * MAX_TOP_FRAMES:
                cache.clear()
            vals = (_esc(f[0]),) + tuple(_esc(x) for x in extra[i]) if extra else (_esc(f[0]),)
            head = cache[key] = "%s%s " % (sname, tpl.format(*vals))
        out.append(head)
    return out


class Collector:
    """prometheus_client's collector protocol over series: collect()
    yields the Metric families of the module doc (the judge of what
    Exposition writes)."""

    def __init__(self, series, top_frames=DEFAULT_TOP_FRAMES, engine_keys=None, engine=False, ctx=EMPTY_CONTEXT):
        """series: the payload's metric dicts ({name, type, tags, stats}:
        shown() of a snapshot's views, or a /signals document's metrics);
        engine_keys: the set of (name, type, tags tuple) that came from the
        engine's endpoint; engine: export those too; ctx: context_of()."""
        self.series = series
        self.top_frames = top_frames
        self.engine_keys = engine_keys
        self.engine = engine
        self.ctx = ctx

    def collect(self):
        planner = _Planner(self.engine_keys, self.engine, self.top_frames, self.ctx)
        for s in self.series:
            planner.place(s)
        for fam, rows in planner.plan():
            m = fam.metric()
            for row in rows:
                m.samples.extend(_samples(row.spec))
            yield m


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
    """What the last render for one engine flag left: the series views in
    order, each with its layout and rows, the plan, the context."""

    def __init__(self):
        self.views = []
        self.entries = []  # per series: (key, layout, rows); layout None: not exported, False: not writable
        self.plan = []
        self.engine_keys = None
        self.ctx = None


class Exposition:
    """Renders /metrics for one store. engine_keys: callable -> set of
    series keys that came from the engine's endpoint (empty when there is
    none); top_frames: frames exported per profile (1..MAX_TOP_FRAMES);
    engine: re-export the engine's series (a scrape's ?engine= overrides
    it); identity: labels every series gets (service, tags). Settings come
    as these values (from_settings(): config.Settings')."""

    def __init__(self, store: MetricStore, engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None,
                 top_frames: int = DEFAULT_TOP_FRAMES, engine: bool = False,
                 identity: Optional[Mapping[str, str]] = None) -> None:
        if not 1 <= top_frames <= MAX_TOP_FRAMES:
            raise ValueError("top_frames must be between 1 and %d, not %r" % (MAX_TOP_FRAMES, top_frames))
        self.store = store
        self.engine_keys = engine_keys
        self.top_frames = top_frames
        self.engine = engine
        self.identity = dict(identity or {})
        self._lock = threading.Lock()
        self._states: Dict[bool, _State] = {}  # engine -> _State
        self.rendered_samples = 0  # sample lines written afresh in the last render
        self.replanned = False  # the last render laid out every series afresh

    @classmethod
    def from_settings(cls, store: MetricStore, settings: config.Settings,
                      engine_keys: Optional[Callable[[], Set[SeriesKey]]] = None) -> "Exposition":
        """An Exposition as the run's settings configure it
        (GRAPHSIGNAL_METRICS_TOP_FRAMES, GRAPHSIGNAL_METRICS_ENGINE, the
        run's identity labels)."""
        return cls(store, engine_keys, settings.metrics_top_frames, settings.metrics_engine,
                   config.identity_labels(settings))

    def _keys(self):
        return self.engine_keys() if self.engine_keys is not None else set()

    def collector(self, engine: Optional[bool] = None) -> Collector:
        """The plain collector over the store as it is now (no cache)."""
        snap = self.store.snapshot()
        series = [m for m in (shown(v, self.top_frames, snap.max_frames) for v in snap.series) if m is not None]
        return Collector(series, self.top_frames, self._keys(), self.engine if engine is None else engine,
                         context_of(snap, self.identity))

    def render(self, accept: Optional[str] = None, engine: Optional[bool] = None) -> Tuple[bytes, str]:
        """(body bytes, content type) for a scrape with this Accept header.
        engine: re-export engine metrics (None: as configured)."""
        _, content_type = choose_encoder(accept or "")
        om = content_type.startswith("application/openmetrics-text")
        engine = self.engine if engine is None else engine
        snap = self.store.snapshot()
        keys = self._keys()
        ctx = context_of(snap, self.identity)
        with self._lock:
            st = self._states.get(engine)
            if st is None:
                st = self._states[engine] = _State()
            return self._render(st, snap.series, snap.max_frames, keys, engine, ctx, om), content_type

    def _update(self, st, views, max_frames, keys, ctx):
        """Brings st's rows up to date with the views in place; False when
        the series or their layout changed (then everything is laid out
        anew)."""
        if len(views) != len(st.views) or keys != st.engine_keys or ctx != st.ctx:
            return False
        old = st.views
        for i, v in enumerate(views):
            o = old[i]
            if v is o:
                continue  # unchanged: the store hands out the same view until the series changes
            if v.tags is not o.tags and (v.name != o.name or v.type != o.type or v.tags != o.tags):
                return False  # another series (a series' views share its tags)
            key, layout, rows = st.entries[i]
            if layout is None:
                continue  # left out (the engine's, the table's, or a name clash) and still the same series
            if layout is not False and (layout.type == "gauge" or layout.type == "counter"):
                # one number: compared and written without the view's stats
                try:
                    val = _plain(v.state)
                except (TypeError, ValueError, OverflowError):
                    return False
                row = rows[0]
                fp = _value_fp(val)
                if fp != row.fingerprint:
                    spec = row.spec
                    row.fingerprint, row.lines = fp, None
                    row.spec = ("value", spec[1], spec[2], spec[3], None if val is None else _conv(val, layout.conv))
                continue
            if _same(_content(v), _content(o)):
                continue  # touched (set again to what it held): nothing to render
            if layout is False:
                return False  # a series that could not be written changed: maybe it can now
            s = shown(v, self.top_frames, max_frames)
            if s is None:
                return False
            if layout.type == "summary" and s["stats"].get("bins"):
                return False  # an engine summary that grew buckets: a histogram now
            for row, (fp, spec) in zip(rows, parts(s, layout, self.top_frames)):
                if fp != row.fingerprint:
                    row.fingerprint, row.spec, row.lines = fp, spec, None
        st.views = list(views)
        return True

    def _replan(self, st, views, max_frames, keys, engine, ctx):
        old = {}
        for fam, rows in st.plan:
            for row in rows:
                if row.lines is not None:
                    old[(fam.name, row.key)] = (row.fingerprint, row.spec, row.lines)
        planner = _Planner(keys, engine, self.top_frames, ctx)
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
                # same numbers, same labels: the same lines
                if hit is not None and hit[0] == row.fingerprint and hit[1] == row.spec:
                    row.lines = hit[2]
        st.views, st.entries, st.plan, st.engine_keys, st.ctx = list(views), entries, plan, set(keys), ctx

    def _render(self, st, views, max_frames, keys, engine, ctx, om):
        self.replanned = not self._update(st, views, max_frames, keys, ctx)
        if self.replanned:
            self._replan(st, views, max_frames, keys, engine, ctx)
        written = 0
        out = []
        for fam, rows in st.plan:
            out.append(fam.head(om))
            for row in rows:
                if row.lines is None:
                    row.lines = _lines(row.spec)
                    written += row.lines.count(b"\n")
            out.extend([row.lines for row in rows])
        if om:
            out.append(b"# EOF\n")
        self.rendered_samples = written
        return b"".join(out)


def reference(collector: Collector, om: bool = False) -> bytes:
    """What prometheus_client's own encoder writes for a collector (the
    judge Exposition.render is held to)."""
    if om:
        from prometheus_client.openmetrics.exposition import generate_latest as om_latest
        return om_latest(collector)  # type: ignore[arg-type]
    from prometheus_client.exposition import generate_latest
    return generate_latest(collector)  # type: ignore[arg-type]


__all__ = ["Collector", "Context", "Exposition", "context_of", "labels_of", "reference", "shown",
           "sub_octave_buckets"]
