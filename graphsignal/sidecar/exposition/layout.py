"""/metrics' layout planner: which family each series feeds, under which
labels, and what its rows write (their specs, graphsignal.sidecar.
exposition.lines).

A series is read straight from its view (graphsignal.signals_model.
SeriesViewLike): a gauge's or counter's state, a histogram's state (its
log-linear bins or an engine's buckets), a profile's frames(top), which
the view names (display name and category) once. read() turns that into
the numbers /metrics writes, as /signals writes them and a JSON parser
reads them back (NaN and infinities null, integers beyond 64 bits
floats), so /metrics says what /signals says. Planner.place() then lays
the series out, one at a time, in /signals order; parts() gives a row's
fingerprint (what it shows: equal fingerprints write equal lines) and
spec.

It guards against a page a scraper refuses or misreads: a family name
that another family's samples already use (a probe gauge `x_count` beside
a histogram `x`; OpenMetrics parsers refuse both), a name two series of
other types claim, two series whose tags give one label set: each is
exported once, for the first in /signals order, the rest counted in
graphsignal_metrics_conflicting_series. A series with a value JSON cannot
hold is left out (read() returns None), as /signals leaves it out. Engine
series are left out unless asked for (the engine serves them itself).
"""
import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, cast

import numpy as np
import orjson
from prometheus_client.utils import floatToGoString

from graphsignal import histo
from graphsignal.jsonsafe import dumps
from graphsignal.naming import KERNEL_PROFILES
from graphsignal.naming.metrics import Family, prometheus_name
from graphsignal.signals_model import Frame, SeriesKey, SeriesViewLike
from graphsignal.sidecar.exposition.buckets import grid_les, sub_octave
from graphsignal.sidecar.exposition.labels import (EMPTY_CONTEXT, FRAME_LABELS, KERNEL_LABELS, OWN_LABELS, Context,
                                                   Conv, Labels, conv, conv_of, label_str, labels_of, template)
from graphsignal.sidecar.exposition.lines import Fam, FramesSpec, HistSpec, Spec, bucket_heads, frame_heads

__all__ = ["CONFLICTS_METRIC", "GPU_INFO_METRIC", "Reading", "read", "plain", "value_fp", "row_key", "Row", "Layout",
           "Planner", "parts"]

CONFLICTS_METRIC = "graphsignal_metrics_conflicting_series"
GPU_INFO_METRIC = "graphsignal_gpu_info"
# the sample names each family type writes (OpenMetrics), to find clashes
_SUFFIXES = {"gauge": ("",), "counter": ("_total", "_created"),
             "histogram": ("_bucket", "_count", "_sum", "_created"),
             "summary": ("", "_count", "_sum", "_created")}

RowKey = Tuple[str, str, bytes]  # (name, type, tags as JSON): a row's identity across plans


# -- reading a view --------------------------------------------------------------
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integers
_NO_BINS = np.zeros(0, dtype=np.uint64)
_INF = float("inf")


def plain(x: Any) -> Any:
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


def _plain_list(xs: Sequence[Any]) -> List[Any]:
    return [x if type(x) is int and _INT_MIN <= x <= _INT_MAX else plain(x) for x in xs]


class Reading(NamedTuple):
    """What /metrics shows of a series view, in plain numbers (plain()):
    value (gauge, counter; None: not measured); frames (a profile's
    shown frames as (name, value, samples)) with their views (named);
    count, total, bins (upper bounds, ascending; an engine's +Inf None),
    counts and loglinear (bins are our log-linear bins, not an engine's
    buckets) of a histogram."""
    value: Any = None
    frames: Tuple[Tuple[str, Any, Any], ...] = ()
    named: Sequence[Frame] = ()
    count: Any = None
    total: Any = None
    bins: Any = ()
    counts: Any = ()
    loglinear: bool = False


def read(v: SeriesViewLike, top: int) -> Optional[Reading]:
    """What /metrics shows of a series view (top: frames per profile), or
    None when a value cannot be written (the series is left out, as
    /signals leaves it out)."""
    type_ = v.type
    try:
        if type_ == "gauge" or type_ == "counter":
            return Reading(value=plain(v.state))
        if type_ == "profile":
            named = v.frames(top)
            return Reading(frames=tuple((f["name"], plain(f["value"]), plain(f["samples"])) for f in named),
                           named=named)
        # a histogram's state (HistogramState; read without cast() calls: this runs per changed series)
        count, total, b = v.state  # type: ignore[misc]
        if b is None:
            return Reading(count=plain(count), total=plain(total), bins=_NO_BINS, counts=_NO_BINS)
        if isinstance(b, tuple):  # an engine's buckets
            le, counts = b
            return Reading(count=plain(count), total=plain(total),
                           bins=_plain_list([None if x == _INF else x for x in le]), counts=_plain_list(list(counts)))
        idx, cnt = b.nonzero()  # type: ignore[union-attr]  # our bins (LogBins): no quantiles, no lists
        return Reading(count=plain(count), total=plain(total), bins=histo.BIN_UPPER[idx], counts=cnt, loglinear=True)
    except (TypeError, ValueError, OverflowError):  # orjson.JSONEncodeError is a TypeError
        return None


def value_fp(v: Any) -> Tuple[Any, ...]:
    """A number's part of a fingerprint: the number, and for a float its
    sign too, since -0.0 == 0.0 == False compare equal but -0.0 is written
    "-0.0"."""
    return (v, math.copysign(1.0, v)) if type(v) is float else (v,)


def row_key(v: SeriesViewLike) -> RowKey:
    """A row's identity across plans: (name, type, tags as JSON)."""
    return v.name, v.type, dumps(v.tags)


# -- the plan --------------------------------------------------------------------
Fingerprint = Tuple[Any, ...]


class Row:
    """One series' part of one family: the series' identity, what it shows
    (fingerprint), what to write (spec), and its rendered lines (None:
    not written yet)."""

    __slots__ = ("key", "fingerprint", "spec", "lines")

    def __init__(self, key: RowKey, fingerprint: Fingerprint, spec: Spec) -> None:
        self.key, self.fingerprint, self.spec = key, fingerprint, spec
        self.lines: Optional[bytes] = None


class Layout(NamedTuple):
    type: str  # gauge, counter, profile, histogram, summary
    family: Family
    conv: Conv
    labels: Labels
    lstr: str  # the labels, rendered ("" or "{...}")
    tpl: str  # the labels with the family's own ones as {0}, {1}, ...
    is_engine: bool
    kernels: bool  # a kernel profile (frames also carry kernel and category)
    cache: Dict[Any, Any]  # rendered line heads of this series, by what they stand for


Plan = List[Tuple[Fam, List[Row]]]
_Slot = Tuple[Fam, List[Row], Tuple[str, str]]  # a family, its rows, the (name, type) of its series


class Planner:
    """Assigns series to families in exposition order, one at a time.
    engine_keys: the keys of the series that came from the engine's
    endpoint; engine: export those too; top_frames: frames per profile;
    ctx: labels_of's context."""

    def __init__(self, engine_keys: Optional[Set[SeriesKey]], engine: bool, top_frames: int,
                 ctx: Context = EMPTY_CONTEXT) -> None:
        self.engine_keys = engine_keys or set()
        self.engine_names = {k[0] for k in self.engine_keys}
        self.engine = engine
        self.top = top_frames
        self.ctx = ctx
        self.families: Dict[str, _Slot] = {}
        self.taken: Dict[str, str] = {}  # sample names some family writes -> family name
        self.labelsets: Set[Tuple[str, Tuple[Tuple[str, str], ...]]] = set()  # (family, labels) exported so far
        self.conflicts = 0

    def _slot(self, n: str, t: str, help_: str, unit: str, source: Tuple[str, str]) -> Optional[_Slot]:
        """The family n of type t for series of `source`; None when the
        name is taken."""
        slot = self.families.get(n)
        if slot is None:
            # its samples must not be another family's samples, nor
            # another family's name (OpenMetrics parsers refuse both)
            if n in self.taken or any(n + suf in self.taken or n + suf in self.families for suf in _SUFFIXES[t]):
                return None
            slot = self.families[n] = (Fam(n, t, help_, unit), [], source)
            for suf in _SUFFIXES[t]:
                self.taken[n + suf] = n
        elif slot[2] != source:
            return None
        return slot

    def place(self, v: SeriesViewLike, r: Reading) -> Optional[Tuple[Layout, List[Row]]]:
        """(layout, rows) for series view v, read as r, rows also appended
        to their families; None when v is not exported (engine, left out by
        the table, or a name clash)."""
        name, type_, tags = v.name, v.type, v.tags
        is_engine = name in self.engine_names and (name, type_, tuple(sorted(tags.items()))) in self.engine_keys
        if is_engine and not self.engine:
            return None
        if type_ == "histogram" and is_engine and not len(r.bins):
            type_ = "summary"
        fam = prometheus_name(name, type_, is_engine)
        if fam is None:
            return None
        source = (name, v.type)
        if type_ == "profile":
            kinds: Tuple[Tuple[str, str, str, str], ...] = ((fam.name, "counter", fam.help, fam.unit),)
            if fam.samples:  # a count profile (--cuda-trace light's) has its counts as its value only
                kinds += ((fam.samples, "counter", cast(str, fam.samples_help), ""),)
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
        own = KERNEL_LABELS if kernels else FRAME_LABELS if type_ == "profile" else OWN_LABELS.get(type_, ())
        labels = labels_of(tags, own, self.ctx)
        ident = (fam.name, tuple(labels.items()))
        if ident in self.labelsets:  # tags that sanitize alike ("a.b" and "a_b"): one series only
            self.conflicts += 1
            return None
        self.labelsets.add(ident)
        tpl = template(labels, own) if own else ""
        layout = Layout(type_, fam, conv_of(fam.scale), labels, label_str(labels), tpl, is_engine, kernels, {})
        key = row_key(v)
        rows = [Row(key, fp, spec) for fp, spec in parts(r, layout)]
        for slot, row in zip(slots, rows):
            slot[1].append(row)
        return layout, rows

    def plan(self) -> Plan:
        """The families in order, each with its rows; then the GPUs' info
        and the count of series left out for a conflict."""
        out: Plan = [(slot[0], slot[1]) for slot in self.families.values()]
        if self.ctx.gpus and GPU_INFO_METRIC not in self.taken and GPU_INFO_METRIC not in self.families:
            fam = Fam(GPU_INFO_METRIC, "gauge", "1 per GPU: its NVML index (gpu), UUID, PCI bus id, model, host "
                      "and driver, to join with any GPU series on UUID or gpu", "")
            rows = []
            for g in self.ctx.gpus:
                labels = dict(g)
                for k, x in self.ctx.identity:
                    labels.setdefault(k, x)
                labels = dict(sorted(labels.items()))
                rows.append(Row(("", "gauge", repr(g).encode()), (g, self.ctx.identity),
                                ("value", GPU_INFO_METRIC, labels, label_str(labels), 1)))
            out.append((fam, rows))
        if self.conflicts:
            fam = Fam(CONFLICTS_METRIC, "gauge", "Series left out of /metrics because their Prometheus name or "
                      "labels were taken by another series", "")
            n = self.conflicts
            out.append((fam, [Row(("", "gauge", b""), (n,), ("value", CONFLICTS_METRIC, {}, "", n))]))
        return out


def parts(r: Reading, layout: Layout) -> List[Tuple[Fingerprint, Spec]]:
    """[(fingerprint, spec)] of a series read as r, one per family it
    feeds: the fingerprint is what the series shows (equal fingerprints
    write equal lines); spec: what lines() and samples() write."""
    type_, fam, c, labels, lstr, tpl = layout[:6]
    if type_ == "gauge" or type_ == "counter":
        v = r.value
        sname = fam.name if type_ == "gauge" else fam.name + "_total"
        return [(value_fp(v), ("value", sname, labels, lstr, None if v is None else conv(v, c)))]
    if type_ == "profile":
        fp = r.frames
        extra = None
        if layout.kernels and fp:
            try:
                extra = [(f["display_name"], f["category"]) for f in r.named]
            except KeyError:  # a store without names (annotate=None): its kernels unnamed
                extra = [(f.get("display_name", ""), f.get("category", "")) for f in r.named]
        values = [(f[0], conv(f[1], c)) for f in fp]
        counts = [(f[0], f[2]) for f in fp]
        vname = fam.name + "_total"
        heads = frame_heads(layout.cache, vname, tpl, fp, extra)
        spec: FramesSpec = ("frames", vname, labels, tpl, values, extra, heads)
        out: List[Tuple[Fingerprint, Spec]] = [(fp, spec)]
        if fam.samples:
            cname = fam.samples + "_total"
            out.append((fp, ("frames", cname, labels, tpl, counts, extra,
                             frame_heads(layout.cache, cname, tpl, fp, extra))))
        return out
    # cumulative: an unchanged count and sum is an unchanged histogram
    count, total, bins, counts_ = r.count, r.total, r.bins, r.counts
    hfp = (count,) + value_fp(total) + (len(bins),)
    total = None if total is None else conv(total, c)
    if type_ == "summary":
        return [(hfp, ("summary", fam.name, labels, lstr, count, total))]
    pre = None
    buckets: List[Tuple[str, Any]] = []
    if not r.loglinear:  # an engine's own buckets (None is +Inf)
        cum = 0
        for b, n in zip(bins, counts_):
            cum += n
            if b is not None:
                buckets.append((floatToGoString(conv(b, c)), cum))
    else:
        got = sub_octave(bins, counts_)
        if got is not None:
            d, lo, cums = got
            les = grid_les(d, c)[lo:lo + len(cums)]
            buckets = list(zip(les, cums))
            pre = bucket_heads(layout.cache, fam.name, tpl, d, lo, les)
    hspec: HistSpec = ("hist", fam.name, labels, lstr, tpl, buckets, count, total, pre)
    return [(hfp, hspec)]
