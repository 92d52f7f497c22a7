"""/metrics' lines: what one row of the plan writes, in both formats, and
the pieces of lines kept so a scrape writes only what changed.

A row's spec (graphsignal.sidecar.exposition.layout makes them) says what
to write: a value, a profile's frames, a histogram's buckets, a summary's
count and sum. lines() writes its sample lines as bytes, the same in the
text format and OpenMetrics (only the family headers differ: Fam.head);
samples() gives the same as prometheus_client Samples, for the judge
(the Collector): the tests hold lines() to what prometheus_client's own
encoders write for samples().

Cost: a line head ("name{labels} ") is rendered once and kept: a
profile's frame heads and a histogram's bucket heads in their layout's
cache, while they stay shown. Guards: those caches are bounded (a
profile whose frames churn clears its heads past 4x MAX_TOP_FRAMES, a
histogram's bucket heads past 8 layouts), and numbers are written as
floatToGoString writes them, with a fast path only where Go and Python
print alike (a small int, a finite float below 1e6).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from graphsignal import config
from graphsignal.sidecar.exposition.labels import FRAME_LABELS, KERNEL_LABELS, Labels, esc

__all__ = ["MAX_TOP_FRAMES", "ValueSpec", "FramesSpec", "HistSpec", "SummarySpec", "Spec", "Fam", "fg", "lines",
           "samples", "frame_heads", "bucket_heads"]

MAX_TOP_FRAMES = config.MAX_TOP_FRAMES  # what /signals itself lists per profile

# The specs, by their first item:
#   ("value", sample name, labels, label string, value or None: no sample)
#   ("frames", sample name, labels, label template, [(frame, value)], [(kernel, category)] or None, line heads)
#   ("hist", family name, labels, label string, label template, [(le string, cumulative count)], count or None,
#    sum or None, bucket line heads or None)
#   ("summary", family name, labels, label string, count, sum)
ValueSpec = Tuple[str, str, Labels, str, Any]
FramesSpec = Tuple[str, str, Labels, str, List[Tuple[str, Any]], Optional[List[Tuple[str, str]]], List[str]]
HistSpec = Tuple[str, str, Labels, str, str, List[Tuple[str, Any]], Any, Any, Optional[List[str]]]
SummarySpec = Tuple[str, str, Labels, str, Any, Any]
Spec = Union[ValueSpec, FramesSpec, HistSpec, SummarySpec]


class Fam:
    """One family of the exposition: name, type, help, unit, and its two
    headers (rendered when first asked for)."""

    __slots__ = ("name", "type", "help", "unit", "_text", "_om")

    def __init__(self, name: str, type_: str, help_: str, unit: str) -> None:
        self.name, self.type, self.help = name, type_, help_
        self.unit = unit if unit and name.endswith("_" + unit) else ""
        self._text: Optional[bytes] = None
        self._om: Optional[bytes] = None

    def head(self, om: bool) -> bytes:
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

    def metric(self) -> Metric:
        return Metric(self.name, self.help, self.type, self.unit)


_INF = float("inf")


def fg(v: Any) -> str:
    """floatToGoString(v), without its cost for the usual numbers: a small
    int, or a finite float below 1e6 (where Go and Python write alike)."""
    t = type(v)
    if t is int:
        if -1000000 < v < 1000000:
            return "%d.0" % v
    elif t is float and -_INF < v < 1e6:
        return repr(v)
    s: str = floatToGoString(v)
    return s


def lines(spec: Spec) -> bytes:
    """The sample lines of a row's spec."""
    kind = spec[0]
    if kind == "value":
        _, sname, _, lstr, v = spec  # type: ignore[misc]  # a ValueSpec (no cast() on the hot path)
        return b"" if v is None else ("%s%s %s\n" % (sname, lstr, fg(v))).encode("utf-8")
    if kind == "frames":
        fs = cast(FramesSpec, spec)
        pre, frames = fs[6], fs[4]  # each frame's line head, kept by the layout (frame_heads)
        return "".join(["%s%s\n" % (p, fg(v)) for p, (_, v) in zip(pre, frames)]).encode("utf-8")
    if kind == "hist":
        _, fname, _, lstr, tpl, buckets, count, total, bpre = cast(HistSpec, spec)
        if count is None:
            return b""
        b = fname + "_bucket" + tpl
        if bpre is None:
            out = ["%s %s\n" % (b.format(le), fg(c)) for le, c in buckets]
        elif buckets and buckets[-1][1] < 1000000:  # cumulative: all small ints
            out = ["%s%d.0\n" % (p, c) for p, (_, c) in zip(bpre, buckets)]
        else:
            out = ["%s%s\n" % (p, fg(c)) for p, (_, c) in zip(bpre, buckets)]
        out.append("%s %s\n" % (b.format("+Inf"), fg(count)))
        if total is not None:
            out.append("%s_count%s %s\n%s_sum%s %s\n" % (fname, lstr, fg(count), fname, lstr, fg(total)))
        return "".join(out).encode("utf-8")
    _, fname, _, lstr, count, total = cast(SummarySpec, spec)
    if count is None or total is None:
        return b""
    return ("%s_count%s %s\n%s_sum%s %s\n" % (fname, lstr, fg(count), fname, lstr, fg(total))).encode("utf-8")


def samples(spec: Spec) -> List[Sample]:
    """prometheus_client Samples of a row's spec (the judge's path)."""
    kind = spec[0]
    if kind == "value":
        _, sname, labels, _, v = cast(ValueSpec, spec)
        return [] if v is None else [Sample(sname, dict(labels), v)]
    if kind == "frames":
        _, sname, labels, _, frames, extra, _ = cast(FramesSpec, spec)
        names = KERNEL_LABELS if extra else FRAME_LABELS
        out = []
        for i, (frame, v) in enumerate(frames):
            fl = dict(labels)
            for n, x in zip(names, (frame,) + (tuple(extra[i]) if extra else ())):
                fl[n] = x
            out.append(Sample(sname, fl, v))
        return out
    if kind == "hist":
        _, fname, labels, _, _, buckets, count, total, _ = cast(HistSpec, spec)
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
    _, fname, labels, _, count, total = cast(SummarySpec, spec)
    if count is None or total is None:
        return []
    return [Sample(fname + "_count", dict(labels), count), Sample(fname + "_sum", dict(labels), total)]


def frame_heads(cache: Dict[Any, Any], sname: str, tpl: str, fp: Sequence[Tuple[str, Any, Any]],
                extra: Optional[Sequence[Tuple[str, str]]]) -> List[str]:
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
            vals = (esc(f[0]),) + tuple(esc(x) for x in extra[i]) if extra else (esc(f[0]),)
            head = cache[key] = "%s%s " % (sname, tpl.format(*vals))
        out.append(head)
    return out


def bucket_heads(cache: Dict[Any, Any], fname: str, tpl: str, d: int, lo: int, les: Sequence[str]) -> List[str]:
    """The line heads of a histogram's buckets (grid d, from its edge lo),
    kept in the layout's cache until the buckets grow (at most 8 sets)."""
    key = (d, lo, len(les))
    pre: Optional[List[str]] = cache.get(key)
    if pre is None:  # the buckets grew (or first seen): their line heads
        if len(cache) > 8:
            cache.clear()
        head = fname + "_bucket" + tpl
        pre = cache[key] = [head.format(le) + " " for le in les]
    return pre
