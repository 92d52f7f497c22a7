"""The Prometheus text exposition an engine serves, parsed into samples
for graphsignal.sources.prometheus (which scrapes it and writes the store):
gauges and counters with their labels, histograms as count, sum and
cumulative buckets, summaries as count and sum with their quantiles as
gauges; prometheus_client's parser does the reading.

It guards against an endpoint that can answer anything: a malformed line
costs that line (a family that makes no sense without it, that family),
the text is parsed a family (or CHUNK samples) at a time so a deadline is
checked often, at most MAX_LINES sample lines are parsed and MAX_SERIES
series kept, a histogram without a total (an exposition cut inside it) is
left out rather than imported wrong, and what was left out is counted in a
ParseReport for the one line that says so; a line is quoted only cleaned
and cut short.
"""
import math
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from prometheus_client.parser import text_string_to_metric_families

from graphsignal.textsafe import clean

MAX_LINES = 10000  # sample lines parsed per scrape (a real engine has a few thousand at most)
MAX_SERIES = 2000  # series imported per scrape (the store holds 5000 of everything)

# (kind, name, tags, value): kind "gauge" / "counter" (value: a number) or "histogram" (value: (count, sum,
# le list, cumulative list))
Sample = Tuple[str, str, Dict[str, str], Any]


class ParseReport:
    """What parse_exposition left out: malformed lines (skipped, with the
    first as an example), lines beyond MAX_LINES and series beyond
    MAX_SERIES (cut), and the lines of histograms without a total
    (cut_histogram_lines; cut_histograms names them: family, labels)."""

    __slots__ = ("skipped", "first_bad", "cut_lines", "cut_series", "cut_histogram_lines", "cut_histograms")

    def __init__(self) -> None:
        self.skipped, self.cut_lines, self.cut_series = 0, 0, 0
        self.first_bad: Optional[str] = None
        self.cut_histogram_lines = 0
        self.cut_histograms: List[Tuple[str, Dict[str, str]]] = []

    @property
    def skipped_lines(self) -> int:
        """What prometheus_scrape_skipped_lines says: malformed lines and
        the lines of histograms without a total."""
        return self.skipped + self.cut_histogram_lines


def parse_exposition(text: str, report: Optional[ParseReport] = None, max_lines: Optional[int] = None,
                     max_series: Optional[int] = None, give_up: Optional[Callable[[], bool]] = None) -> List[Sample]:
    """Parses Prometheus text into a list of (kind, name, tags, value) with
    kind "gauge" / "counter" (value: a number) or "histogram" (value:
    (count, sum, le list, cumulative list)). A malformed line is skipped
    (counted in `report`, a ParseReport); raises ValueError only when the
    text has malformed lines and not one good sample (not an exposition).
    give_up: a callable checked between families; when it returns True the
    parse stops there (the caller then drops the partial result)."""
    report = report if report is not None else ParseReport()
    max_lines = MAX_LINES if max_lines is None else max_lines
    max_series = MAX_SERIES if max_series is None else max_series
    out: List[Sample] = []
    for block in _blocks(text, max_lines, report):
        if give_up is not None and give_up():
            break
        out.extend(_parse_block(block, report))
    if report.skipped and not out:
        raise ValueError("no line is a Prometheus sample (first: %s)" % quote(report.first_bad))
    if len(out) > max_series:
        report.cut_series = len(out) - max_series
        del out[max_series:]
    return out


CHUNK = 1000  # sample lines per parser call for families whose samples stand alone


def _blocks(text: str, max_lines: int, report: ParseReport) -> List[List[str]]:
    """The text as blocks of lines, one metric family each (a block starts
    at each # HELP / # TYPE of a new name; a gauge or counter family is cut
    into blocks of CHUNK samples, each with the family's # lines, so that a
    deadline is checked often), at most max_lines sample lines in all (the
    rest is counted in report.cut_lines)."""
    blocks: List[List[str]] = []
    cur: List[str] = []
    head: List[str] = []
    family: Optional[str] = None
    kind: Optional[str] = None
    n, samples = 0, 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            parts = s.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] != family:
                if cur:
                    blocks.append(cur)
                cur, head, family, kind, n = [], [], parts[2], None, 0
            if len(parts) >= 4 and parts[1] == "TYPE":
                kind = parts[3].strip()
            cur.append(line)
            head.append(line)
            continue
        if samples >= max_lines:
            report.cut_lines = sum(1 for x in lines[i:] if x.strip() and not x.lstrip().startswith("#"))
            break
        if n >= CHUNK and kind in (None, "gauge", "counter", "untyped", "unknown"):
            blocks.append(cur)
            cur, n = list(head), 0
        samples += 1
        n += 1
        cur.append(line)
    if cur:
        blocks.append(cur)
    return blocks


def _parse_block(lines: List[str], report: ParseReport) -> List[Sample]:
    try:
        return _convert("\n".join(lines) + "\n", report)
    except Exception:
        pass
    # Something in this family is malformed: keep the lines that parse on
    # their own (with the family's # lines), then parse those together.
    head = [x for x in lines if x.lstrip().startswith("#")]
    good = []
    for x in lines:
        if x.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families("\n".join(head + [x]) + "\n"))
        except Exception:
            report.skipped += 1
            if report.first_bad is None:
                report.first_bad = x
            continue
        good.append(x)
    if not good:
        return []
    try:
        return _convert("\n".join(head + good) + "\n", report)
    except Exception:
        report.skipped += len(good)
        if report.first_bad is None:
            report.first_bad = good[0]
        return []


def _convert(text: str, report: Optional[ParseReport] = None) -> List[Sample]:
    """The samples of `text`; histograms without a total go to `report`
    once the whole text has parsed (a text that fails counts nothing)."""
    out: List[Sample] = []
    cut: List[Tuple[str, Dict[str, str], int]] = []
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "gaugehistogram"):
            out.extend(_histograms(fam, cut))
        elif fam.type == "summary":
            out.extend(_summaries(fam))
        elif fam.type == "counter":
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                out.append(("counter", s.name, dict(s.labels), s.value))
        else:  # gauge, untyped ("unknown"), info, stateset
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue
                out.append(("gauge", s.name, dict(s.labels), s.value))
    if report is not None:
        for name, labels, lines in cut:
            report.cut_histogram_lines += lines
            if len(report.cut_histograms) < MAX_CUT_NAMED:
                report.cut_histograms.append((name, labels))
    return out


MAX_CUT_NAMED = 16  # histograms without a total named per scrape (all are counted)


def quote(line: Optional[str]) -> str:
    """A line of the exposition, safe and short enough for a log line."""
    if line is None:
        return "none"
    text = clean(line.strip())
    return repr(text[:120] + ("..." if len(text) > 120 else ""))


def _group(fam: Any, drop_label: str) -> Iterable[Dict[str, Any]]:
    """Samples of a family grouped by their labels without `drop_label`."""
    groups: Dict[Tuple[Tuple[str, str], ...], Dict[str, Any]] = {}
    for s in fam.samples:
        labels = {k: v for k, v in s.labels.items() if k != drop_label}
        key = tuple(sorted(labels.items()))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"labels": labels, "buckets": [], "count": None, "sum": None, "quantiles": [],
                               "lines": 0}
        suffix = s.name[len(fam.name):]
        g["lines"] += 1
        if suffix == "_bucket" and drop_label in s.labels:
            g["buckets"].append((_le(s.labels[drop_label]), s.value))
        elif suffix in ("_count", "_gcount"):
            g["count"] = s.value
        elif suffix in ("_sum", "_gsum"):
            g["sum"] = s.value
        elif suffix == "" and drop_label in s.labels:
            g["quantiles"].append((s.labels[drop_label], s.value))
    return groups.values()


def _le(raw: str) -> float:
    return float("inf") if raw in ("+Inf", "Inf", "inf") else float(raw)


def _histograms(fam: Any, cut: List[Tuple[str, Dict[str, str], int]]) -> List[Sample]:
    """The histograms of a family; cut gets (name, labels, lines) of each
    without a total."""
    out = []
    for g in _group(fam, "le"):
        buckets = sorted(g["buckets"])
        count = g["count"]
        if count is None and buckets and buckets[-1][0] == math.inf:
            count = buckets[-1][1]
        if count is None:
            # Neither _count nor the +Inf bucket: the exposition was cut and
            # the total is unknown; better no histogram than a wrong one, and
            # said (the payload's histograms always carry their count).
            cut.append((fam.name, g["labels"], g["lines"]))
            continue
        le = [b for b, _ in buckets]
        cum = [_num(c) for _, c in buckets]
        out.append(("histogram", fam.name, g["labels"],
                    (_num(count), g["sum"], le, cum)))
    return out


def _summaries(fam: Any) -> List[Sample]:
    out: List[Sample] = []
    for g in _group(fam, "quantile"):
        for q, v in g["quantiles"]:
            out.append(("gauge", fam.name, dict(g["labels"], quantile=q), v))
        if g["count"] is not None:
            out.append(("histogram", fam.name, g["labels"],
                        (_num(g["count"]), g["sum"], [], [])))
    return out


def _num(v: Any) -> Any:
    """Counts arrive as floats ("27.0"); integral ones become ints."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    return v
