"""The comparison itself: what the values are per (decided once for the
pair), the sides paired series by series and frame by frame, each change
with its run-to-run spread, ranked (see graphsignal.diff for the
document).

It guards against comparisons that would mislead: profiles taken in
different CUDA graph trace modes are left out, a frame missing on a side
whose profile was cut is said to be maybe below the cut, an "(other)"
frame is never ranked as a frame, totals of runs that did not do the same
work, and times or counts estimated on one side only, are warned about,
and --per NAME missing on a run refuses the comparison (CannotCompare)
rather than dividing by nothing."""
import operator
import statistics
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

from graphsignal import naming
from graphsignal.diff import collections
from graphsignal.config import MAX_TOP_FRAMES
from graphsignal.diff.sides import KINDS, Key, Side, num
from graphsignal.diff.text import fmt, pct

# profiles whose meaning --cuda-graph-trace changes: in node mode kernels
# (and copies) inside graphs are timed one by one instead of whole replays
TRACE_DEPENDENT = frozenset(("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
                             "cuda_memset_nanoseconds"))
ENGINE_RATES = ("generation_tokens", "prompt_tokens")
ENGINE_LATENCIES = ("ttft", "itl", "tpot", "e2e")
SAME_WORK = 0.02  # call counts within 2% (median over frames): the runs did the same work
MIN_CALLS = 10  # frames with fewer calls on a side say nothing about the work done

Value = Optional[float]
Change = Dict[str, Any]
T = TypeVar("T")


class CannotCompare(ValueError):
    """The payloads cannot be compared as asked (--per NAME missing)."""


# -- what the values are per ----------------------------------------------------------
class Norm:
    """What profile and counter values are divided by, per run."""

    def __init__(self, name: str, stat: str, per: Optional[str], why: str, divisors: Dict[int, Any]) -> None:
        self.name, self.stat, self.per, self.why = name, stat, per, why
        self.divisors = divisors  # {id(side): divisor}

    def of(self, side: Side, value: Value) -> Value:
        d = self.divisors.get(id(side))
        return value / d if value is not None and d else None

    def unit(self, base: str) -> str:
        return base + ("/" + self.per if self.per else "")

    def describe(self, B: List[Side], A: List[Side]) -> Dict[str, Any]:
        return {"name": self.name, "stat": self.stat, "why": self.why,
                "before": [self.divisors.get(id(s)) for s in B], "after": [self.divisors.get(id(s)) for s in A]}


def _normalization(B: List[Side], A: List[Side], per: Optional[str]) -> Norm:
    runs = B + A
    if per:
        counts = {id(s): s.count_of(per) for s in runs}
        missing = [s.label for s in runs if not counts[id(s)]]
        if missing:
            raise CannotCompare("--per %s: %s %s no counter, histogram or profile of that name, or it is 0" % (
                per, " and ".join(missing), "has" if len(missing) == 1 else "have"))
        return Norm("per " + per, "per_" + per, per, "per unit of %s (--per)" % per, counts)
    tokens = {id(s): s.tokens() for s in runs}
    if all(tokens.values()):
        return Norm("per generated token", "per_token", "token",
                    "per generated token (every run has an engine summary with tokens)", tokens)
    if all(s.source == "cumulative" and s.ended for s in runs):
        return Norm("run", "total", None, "totals of each run (every run ended: a fixed amount of work is assumed; "
                    "--per NAME to name the work)", {id(s): 1 for s in runs})
    open_ended = [s.label for s in runs if not s.ended or s.source == "window"]
    return Norm("second", "per_second", "second", "per second of covered time (%s: open-ended)" % (
        "windows" if any(s.source == "window" for s in runs) else ", ".join(open_ended[:3])),
        {id(s): s.seconds for s in runs})


# -- comparing ------------------------------------------------------------------------
def _pair(b: Value, a: Value) -> Dict[str, Value]:
    """{before, after, delta, ratio}; a missing side counts as 0 in delta."""
    delta = None
    if b is not None or a is not None:
        delta = (a or 0) - (b or 0)
    ratio = (a / b) if (a is not None and b) else None
    return {"before": b, "after": a, "delta": delta, "ratio": ratio}


def _change(kind: str, metric: str, frame: Optional[str], tags: Dict[str, str], stat: str, unit: str, b: Value,
            a: Value, **extra: Any) -> Change:
    c: Change = {"kind": kind, "metric": metric, "frame": frame, "tags": tags, "stat": stat, "unit": unit}
    c.update(_pair(b, a))
    if b is None and a is not None:
        c["only"] = "after"
    elif a is None and b is not None:
        c["only"] = "before"
    c.update(extra)
    return c


def _unit(metric: str) -> str:
    for suffix, unit in (("_nanoseconds", "nanoseconds"), ("_seconds", "seconds"), ("_bytes", "bytes"),
                         ("_joules", "joules")):
        if metric.endswith(suffix):
            return unit
    return "count"


def _median(values: Iterable[Value]) -> Value:
    """The median of the runs' values (None where a side has none)."""
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


class _Runs:
    """One value per run of each side, and what they make together."""

    def __init__(self, before: List[Value], after: List[Value]) -> None:
        self.before, self.after = before, after

    def pair(self) -> Tuple[Value, Value]:
        return _median(self.before), _median(self.after)

    def noise(self) -> Dict[str, Any]:
        """{spread, significant} with several runs on a side; {} else."""
        b = [v for v in self.before if v is not None]
        a = [v for v in self.after if v is not None]
        if len(self.before) < 2 and len(self.after) < 2:
            return {}
        out: Dict[str, Any] = {"spread": {"before": [min(b), max(b)] if b else None,
                                          "after": [min(a), max(a)] if a else None}}
        if b and a:
            out["significant"] = max(a) < min(b) or min(a) > max(b)
        else:
            out["significant"] = True  # on one side only: appeared or went away
        return out


def compare(before: Any, after: Any, before_label: Any = "BEFORE", after_label: Any = "AFTER",
            use_window: Optional[bool] = None, per: Optional[str] = None) -> Dict[str, Any]:
    """The comparison document (see graphsignal.diff). before, after: a
    payload or a list of payloads (runs); labels likewise. `use_window`:
    None compares windows when every payload has one; False forces the
    cumulative metrics; True wants windows (a warning when one is
    missing). per: a metric name to normalize by (see graphsignal.diff)."""
    before, after = _runs(before), _runs(after)
    before_label, after_label = _labels(before_label, len(before)), _labels(after_label, len(after))
    want = use_window
    every = before + after
    both = all(isinstance(p, dict) and isinstance(p.get("window"), dict) for p in every)
    warnings: List[str] = []
    if want is None:
        want = both
    elif want and not both:
        warnings.append("a window was asked for but %s has none: comparing the cumulative metrics" % (
            " and ".join(lbl for lbl, p in zip(before_label + after_label, every)
                         if not (isinstance(p, dict) and isinstance(p.get("window"), dict)))))
        want = False
    B = [Side(p, want, lbl) for p, lbl in zip(before, before_label)]
    A = [Side(p, want, lbl) for p, lbl in zip(after, after_label)]
    norm = _normalization(B, A, per)
    for s in B + A:
        if norm.name == "second" and s.seconds <= 0:
            warnings.append("%s covers no time (a payload from the first second of a run?): its rates are null"
                            % s.label)
    collections.align(B, A, warnings)
    changes: List[Change] = []
    changes += _profiles(B, A, norm, warnings)
    changes += _counters(B, A, norm)
    changes += _histograms(B, A)
    changes += _engines(B, A)
    if norm.name == "run":
        _check_same_work(B, A, warnings)
    _check_estimates(B, A, warnings)
    order = {k: i for i, k in enumerate(KINDS)}
    changes.sort(key=lambda c: (order[c["kind"]], c.get("significant") is False, -abs(c["delta"] or 0),
                                c["metric"], c["frame"] or "", sorted(c["tags"].items())))
    from graphsignal.findings import compare as findings_compare  # the rules, only when two runs are compared

    return {"before": _describe(B), "after": _describe(A), "normalized_by": norm.describe(B, A),
            "changes": changes, "warnings": warnings, "findings": findings_compare.between(before, after)}


def top(doc: Dict[str, Any], n: Optional[int]) -> Dict[str, Any]:
    """The document with at most n changes of each kind (n <= 0: all)."""
    if not n or n <= 0:
        return doc
    seen: Dict[str, int] = {}
    kept = []
    for c in doc["changes"]:
        seen[c["kind"]] = seen.get(c["kind"], 0) + 1
        if seen[c["kind"]] <= n:
            kept.append(c)
    out = dict(doc)
    out["changes"] = kept
    out["left_out"] = {k: v - n for k, v in seen.items() if v > n}
    return out


def _runs(p: Any) -> List[Any]:
    return list(p) if isinstance(p, (list, tuple)) else [p]


def _labels(label: Any, n: int) -> List[str]:
    if isinstance(label, (list, tuple)):
        return list(label)
    return [label] if n == 1 else ["%s#%d" % (label, i + 1) for i in range(n)]


def _describe(sides: List[Side]) -> Dict[str, Any]:
    if len(sides) == 1:
        return sides[0].describe()
    d = sides[0].describe()
    d.update(label=", ".join(s.label for s in sides), runs=len(sides),
             covered_seconds=round(statistics.median([s.seconds for s in sides]), 6),
             ended=all(s.ended for s in sides),
             source=sides[0].source if len({s.source for s in sides}) == 1 else "mixed",
             cuda_graph_trace_mode=_one_mode(sides),
             cuda_trace=_one({s.cuda_trace for s in sides}))
    return d


def _one_mode(sides: List[Side]) -> Optional[str]:
    return _one({s.trace_mode for s in sides if s.cuda_trace == "on"} or {None})


def _one(values: Set[Optional[str]]) -> Optional[str]:
    return values.pop() if len(values) == 1 else "mixed"


def _check_same_work(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    """Totals compare equal work only: the median ratio of call counts over
    the frames both sides call often says whether the runs did the same."""
    ratios = []
    for key in set().union(*(s.profiles for s in B)) & set().union(*(s.profiles for s in A)):
        frames: Set[str] = set().union(*(s.profiles.get(key, {}) for s in B + A))
        for f in frames:
            nb = _median([s.profiles.get(key, {}).get(f, [0, 0])[1] for s in B])
            na = _median([s.profiles.get(key, {}).get(f, [0, 0])[1] for s in A])
            if nb and na and nb >= MIN_CALLS and na >= MIN_CALLS:
                ratios.append(na / nb)
    if ratios:
        r = statistics.median(ratios)
        if abs(r - 1) > SAME_WORK:
            warnings.append("the runs did not do the same work (calls x%.2f after, the median over %d frames): "
                            "totals compare unequal work; name the work with --per NAME (a probe counter of steps "
                            "or requests)" % (r, len(ratios)))


def _how(kinds: Set[str], estimate: str) -> str:
    """'exact', 'an estimate' or 'partly an estimate' (exact and estimated
    series together: a frame counted exactly until estimates took over)."""
    if estimate not in kinds:
        return "exact"
    return "an estimate" if len(kinds) == 1 else "partly an estimate"


def _check_estimates(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    """One warning per metric whose time, or whose counts, were taken
    differently on the two sides (the series still match: VOLATILE_TAGS)."""
    checks = (
        ("time", "sampled", "sampled",
         "%s: the time is %s in BEFORE and %s in AFTER (duration: sampled is an estimate from sampling windows): "
         "compare its counts and bytes, not its time"),
        ("count", "estimated", "counted",
         "%s: the counts are %s in BEFORE and %s in AFTER (count: estimated: per CUDA graph replay as sampling "
         "windows saw it): small differences in its calls may be the estimate's"))
    said = set()
    for what, estimate, attr, line in checks:  # attr: the Side's {key: how it was taken}
        taken: Callable[[Side], Dict[Key, Set[str]]] = operator.attrgetter(attr)
        keys: Set[Key] = set().union(*(taken(s) for s in B)) & set().union(*(taken(s) for s in A))
        for key in sorted(keys):
            hb = _how(set().union(*(taken(s).get(key, set()) for s in B)), estimate)
            ha = _how(set().union(*(taken(s).get(key, set()) for s in A)), estimate)
            if hb != ha and (what, key[0]) not in said:
                said.add((what, key[0]))
                warnings.append(line % (key[0], hb, ha))


def _profiles(B: List[Side], A: List[Side], norm: Norm, warnings: List[str]) -> List[Change]:
    left_out: Set[Key] = set()
    mb, ma = _one_mode(B), _one_mode(A)
    if mb and ma and (mb != ma or "mixed" in (mb, ma)):
        left_out = {k for s in B + A for k in s.profiles if k[0] in TRACE_DEPENDENT}
        if left_out:
            warnings.append(
                "%s was taken in CUDA graph trace mode %s and %s in %s: %s are left out (graph mode times whole "
                "replays, node mode the kernels inside them; compare runs taken in the same mode)" % (
                    _describe(B)["label"], mb, _describe(A)["label"], ma,
                    ", ".join(sorted({k[0] for k in left_out}))))
    out = []
    cut = set()
    keys: Set[Key] = set().union(*(s.profiles for s in B + A))
    for key in sorted(keys):
        if key in left_out:
            continue
        metric = key[0]
        unit = norm.unit(_unit(metric))
        tags = _first(s.tags.get(key) for s in B + A) or {}
        frames: List[str] = sorted(set().union(*(s.profiles.get(key, {}) for s in B + A)))
        tot = {id(s): sum(v for v, _ in s.profiles[key].values()) + s.folded.get(key, [0, 0])[0]
               for s in B + A if key in s.profiles}
        for frame in frames:
            cols = {}
            for side, runs in (("before", B), ("after", A)):
                vals: List[Value] = []
                calls: List[Value] = []
                per_call: List[Value] = []
                share: List[Value] = []
                normed: List[Value] = []
                present = any(key in s.profiles and frame in s.profiles[key] for s in runs)
                for s in runs:
                    f = s.profiles.get(key, {}).get(frame)
                    if f is None and key in s.truncated:
                        cut.add(metric)
                    v, n = (f if f is not None else (0, 0)) if present else (None, None)
                    vals.append(v)
                    calls.append(n)
                    per_call.append(v / n if v is not None and n else None)
                    share.append(v / tot[id(s)] if v is not None and tot.get(id(s)) else None)
                    normed.append(norm.of(s, v))
                cols[side] = (vals, calls, per_call, share, normed)
            (vb, cb, pb, shb, nb), (va, ca, pa, sha, na) = cols["before"], cols["after"]
            pair = _Runs(nb, na)
            extra: Dict[str, Any] = {"total": _pair(_median(vb), _median(va)),
                                     "calls": _pair(_median(cb), _median(ca)),
                                     "per_call": _pair(_median(pb), _median(pa)),
                                     "share": {"before": _median(shb), "after": _median(sha)}}
            extra.update(pair.noise())
            est = {side: sorted(set().union(*(s.estimated.get((key, frame), set()) for s in runs_)))
                   for side, runs_ in (("before", B), ("after", A))}
            if est["before"] or est["after"]:
                extra["estimated"] = est
            if metric in naming.KERNEL_PROFILES:
                name = _first(s.names.get(frame) for s in A + B)
                if name is None:
                    d = naming.describe(frame)
                    name = (d.display_name, d.category)
                extra["display_name"], extra["category"] = name[0], name[1]
            b, a = pair.pair()
            out.append(_change("profile", metric, frame, tags, norm.stat, unit, b, a, **extra))
    for metric in sorted(cut):
        warnings.append("%s lists only its %d largest frames on one side: a frame missing there may be below the "
                        "cut rather than absent" % (metric, MAX_TOP_FRAMES))
    _folded_warnings(B, A, norm, left_out, warnings)
    return out


def _folded_warnings(B: List[Side], A: List[Side], norm: Norm, left_out: Set[Key], warnings: List[str]) -> None:
    """One warning per cut profile: what its "(other)" frame holds on each
    side (never ranked as a frame: its members differ from run to run), so
    a change inside it is not silent."""
    keys: Set[Key] = set().union(*(s.folded for s in B + A))
    for key in sorted(keys):
        if key in left_out:
            continue
        vals, shares, names = {}, {}, {}
        for side, runs in (("before", B), ("after", A)):
            v: List[Value] = []
            sh: List[Value] = []
            n: List[Value] = []
            for s in runs:
                if key not in s.profiles and key not in s.folded:
                    continue
                f = s.folded.get(key, [0, 0])[0]
                whole = sum(x for x, _ in s.profiles.get(key, {}).values()) + f
                v.append(norm.of(s, f))
                sh.append(f / whole if whole else None)
                n.append(s.folded_names.get(key, 0))
            vals[side], shares[side], names[side] = _median(v), _median(sh), _median(n)
        unit = norm.unit(_unit(key[0]))
        tags = _first(s.tags.get(key) for s in B + A) or {}
        label = key[0] + (" {%s}" % ", ".join("%s=%s" % kv for kv in sorted(tags.items())) if tags else "")
        nb, na = names["before"], names["after"]
        count = "%d" % (nb or na or 0) if nb == na or not (nb and na) else "%d -> %d" % (nb, na)
        warnings.append("%s: its (other) frame (%s names past the %d listed) holds %s -> %s (%s -> %s of the "
                        "profile); what changed inside it is not ranked" % (
                            label, count, MAX_TOP_FRAMES - 1, fmt(vals["before"], unit), fmt(vals["after"], unit),
                            pct(shares["before"]), pct(shares["after"])))


def _first(items: Iterable[Optional[T]]) -> Optional[T]:
    for x in items:
        if x is not None:
            return x
    return None


def _counters(B: List[Side], A: List[Side], norm: Norm) -> List[Change]:
    out = []
    keys: Set[Key] = set().union(*(s.counters for s in B + A))
    for key in sorted(keys):
        present_b = any(key in s.counters for s in B)
        present_a = any(key in s.counters for s in A)
        tb = [s.counters.get(key, 0) if present_b else None for s in B]
        ta = [s.counters.get(key, 0) if present_a else None for s in A]
        runs = _Runs([norm.of(s, v) for s, v in zip(B, tb)], [norm.of(s, v) for s, v in zip(A, ta)])
        b, a = runs.pair()
        out.append(_change("counter", key[0], None, _first(s.tags.get(key) for s in B + A) or {}, norm.stat,
                           norm.unit(_unit(key[0])), b, a, total=_pair(_median(tb), _median(ta)), **runs.noise()))
    return out


HistStats = Tuple[Value, Value, Value, Value]


def _hist_stats(series: Sequence[Dict[str, Any]]) -> HistStats:
    """(count, mean, p50, p95) of one or more series of a histogram; the
    quantiles of several series are merged from their buckets."""
    count = sum(num(s.get("count")) or 0 for s in series)
    total = sum(num(s.get("sum")) or 0 for s in series)
    mean = total / count if count else None
    if len(series) == 1:
        return count, mean, num(series[0].get("p50")), num(series[0].get("p95"))
    buckets: Dict[float, Any] = {}
    for s in series:
        bins, counts = s.get("bins"), s.get("counts")
        if not isinstance(bins, list) or not isinstance(counts, list) or len(bins) != len(counts):
            return count, mean, None, None  # window stats carry no buckets: no merged quantiles
        for b, c in zip(bins, counts):
            le = float("inf") if b is None else num(b)
            if le is None or num(c) is None:
                return count, mean, None, None
            buckets[le] = buckets.get(le, 0) + c
    if not buckets:
        return count, mean, None, None
    from graphsignal import histo

    les = sorted(buckets)
    q = histo.quantiles_buckets(les, [buckets[b] for b in les], (0.5, 0.95))
    return count, mean, q[0], q[1]


_NO_STATS: HistStats = (None, None, None, None)


def _column(runs: List[HistStats], i: int) -> List[Value]:
    return [r[i] for r in runs]


def _histograms(B: List[Side], A: List[Side]) -> List[Change]:
    out = []
    keys: Set[Key] = set().union(*(s.histograms for s in B + A))
    for key in sorted(keys):
        hb = [_hist_stats(s.histograms[key]) if key in s.histograms else _NO_STATS for s in B]
        ha = [_hist_stats(s.histograms[key]) if key in s.histograms else _NO_STATS for s in A]
        runs = _Runs(_column(hb, 1), _column(ha, 1))
        b, a = runs.pair()
        out.append(_change("histogram", key[0], None, _first(s.tags.get(key) for s in B + A) or {}, "mean",
                           _unit(key[0]), b, a, p50=_pair(_median(_column(hb, 2)), _median(_column(ha, 2))),
                           p95=_pair(_median(_column(hb, 3)), _median(_column(ha, 3))),
                           count=_pair(_median(_column(hb, 0)), _median(_column(ha, 0))), **runs.noise()))
    return out


def _latency(s: Side, concept: str, stat: str) -> Value:
    d = (s.engine or {}).get(concept + "_seconds")
    return num(d.get(stat)) if isinstance(d, dict) else None


def _engines(B: List[Side], A: List[Side]) -> List[Change]:
    if not any(s.engine for s in B + A):
        return []
    out = []
    # engine totals are since the engine started: per second of the
    # payload's cumulative time, whatever the other changes compare
    for concept in ENGINE_RATES:
        vb = [num((s.engine or {}).get(concept + "_total")) for s in B]
        va = [num((s.engine or {}).get(concept + "_total")) for s in A]
        if all(v is None for v in vb + va):
            continue
        runs = _Runs([v / s.cumulative_seconds if v is not None and s.cumulative_seconds > 0 else None
                      for s, v in zip(B, vb)],
                     [v / s.cumulative_seconds if v is not None and s.cumulative_seconds > 0 else None
                      for s, v in zip(A, va)])
        b, a = runs.pair()
        out.append(_change("engine", "engine." + concept + "_per_second", None, {}, "per_second",
                           "tokens/second", b, a, total=_pair(_median(vb), _median(va)), **runs.noise()))
    for concept in ENGINE_LATENCIES:
        if all(_latency(s, concept, "mean") is None and _latency(s, concept, "count") is None for s in B + A) \
                and not any(isinstance((s.engine or {}).get(concept + "_seconds"), dict) for s in B + A):
            continue
        runs = _Runs([_latency(s, concept, "mean") for s in B], [_latency(s, concept, "mean") for s in A])
        b, a = runs.pair()

        def both(stat: str, concept: str = concept) -> Dict[str, Value]:
            return _pair(_median([_latency(s, concept, stat) for s in B]),
                         _median([_latency(s, concept, stat) for s in A]))

        out.append(_change("engine", "engine." + concept + "_seconds", None, {}, "mean", "seconds", b, a,
                           p50=both("p50"), p95=both("p95"), count=both("count"), **runs.noise()))
    return out
