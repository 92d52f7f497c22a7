"""What changed between two /signals payloads, or two sets of runs:
graphsignal-diff.

compare(before, after) takes two payloads (dicts, as GET /signals returns
them or GRAPHSIGNAL_SIGNALS_FILE saves them), or two lists of payloads
(several runs of each side), and returns

    {"before": {...}, "after": {...},      # what each side covers
     "normalized_by": {...},               # what the values are per
     "changes": [{"kind", "metric", "frame", "tags", "stat", "unit",
                  "before", "after", "delta", "ratio", ...}],
     "warnings": [...]}

Sides. Payloads taken with ?window=N on both sides are compared over their
windows; otherwise over the cumulative metrics, each covering
payload_ns - start_ns (start_ns: the workload's launch). Series are matched
by their tags without the ones that differ from run to run (process.pid,
process.root_pid, device.uuid, device.bus_id) or with how the numbers were
taken (duration: sampled, count: estimated), and summed where several match
(processes of one device without ranks; a frame's exact and estimated
parts).

What a value is per (normalized_by), decided once for the pair:
- per unit of NAME, with per=NAME (--per): each run's count of NAME (a
  counter's total, a histogram's count, a profile's calls);
- per generated token, when every run has an engine summary with tokens;
- the run's total, when every run ended (ended_ns: the final payload of a
  run of a fixed amount of work, the usual benchmark) and the metrics are
  cumulative; a warning says when the runs' call counts show that they did
  not do the same work;
- per second of covered time otherwise (a live service, windows).
A faster fixed-work run covers less time, so per second an unchanged stage
would seem to grow: totals (or a unit of work) name the stage that changed.

Changes, one per
- profile frame (kernels, CUDA graphs, copies by kind with their
  host_memory tag, memsets, syncs, NVTX ranges by nesting path and their
  GPU time, probe profiles): stat "total",
  "per_second", "per_token" or "per_<NAME>": the frame's value so
  normalized (ns for the _nanoseconds profiles), with `total`, `calls`,
  `per_call` (value per call) and `share` (of its profile) before and
  after; kernel frames add display_name and category;
- counter: the same stat, with `total`;
- histogram: "mean", with p50 and p95 (and count);
- engine summary concept (since start): generation/prompt tokens per
  second, and the mean, p50 and p95 of TTFT, ITL, TPOT and E2E latency.

`before`/`after` are null where the series or frame exists on one side
only (`only` then says which side has it), `delta` counts such a missing
side as zero, `ratio` is after / before (null when before is 0 or
missing). With several runs on a side, its value is the median of its
runs, `spread` gives each side's [min, max], and `significant` says
whether the sides' ranges are apart (false: the change is inside the
run-to-run noise). Within each kind (profiles, counters, histograms,
engine, in that order: their units differ) changes are sorted by absolute
delta, significant ones first.

Time profiles taken in different CUDA graph trace modes measure different
things (whole graph replays versus kernels one by one): they are left out
with a warning. A series whose time is an estimate (tag duration: sampled)
or whose counts are (count: estimated) on one side, wholly or in part, and
not on the other is compared with a warning, and its changes say which
side is estimated in what (`estimated`: {"before": [...], "after": [...]},
of "time" and "count").
"""
import math
import statistics

from graphsignal import diff_collections, naming
from graphsignal.signals_model import OTHER_FRAME

NS = 1_000_000_000
VOLATILE_TAGS = frozenset(("process.pid", "process.root_pid", "device.uuid", "device.bus_id", "duration", "count"))
# profiles whose meaning --cuda-graph-trace changes: in node mode kernels
# (and copies) inside graphs are timed one by one instead of whole replays
TRACE_DEPENDENT = frozenset(("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
                             "cuda_memset_nanoseconds"))
TRACE_MODES = {0: "graph", 1: "node"}
MAX_FRAMES = 250  # a profile lists its largest 250 frames
KINDS = ("profile", "counter", "histogram", "engine")
ENGINE_RATES = ("generation_tokens", "prompt_tokens")
ENGINE_LATENCIES = ("ttft", "itl", "tpot", "e2e")
SAME_WORK = 0.02  # call counts within 2% (median over frames): the runs did the same work
MIN_CALLS = 10  # frames with fewer calls on a side say nothing about the work done


class NotAPayload(ValueError):
    """The document is not a /signals payload; the message says why."""


class CannotCompare(ValueError):
    """The payloads cannot be compared as asked (--per NAME missing)."""


def _tkey(tags):
    return tuple(sorted((str(k), str(v)) for k, v in (tags or {}).items() if k not in VOLATILE_TAGS))


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


class Side:
    """One payload, reduced to what compare() needs."""

    def __init__(self, payload, use_window, label=""):
        if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), list):
            raise NotAPayload("not a /signals payload (no metrics list)")
        self.label = label
        self.payload = payload
        start, end = _num(payload.get("start_ns")), _num(payload.get("payload_ns"))
        self.cumulative_seconds = (end - start) / NS if start is not None and end is not None and end > start else 0.0
        self.ended = _num(payload.get("ended_ns")) is not None
        win = payload.get("window") if use_window else None
        self.source = "window" if isinstance(win, dict) else "cumulative"
        if self.source == "window":
            metrics = win.get("metrics") if isinstance(win.get("metrics"), list) else []
            self.seconds = _num(win.get("covered_seconds")) or 0.0
        else:
            metrics = payload["metrics"]
            self.seconds = self.cumulative_seconds
        context = payload.get("context") if isinstance(payload.get("context"), dict) else {}
        trace = context.get("cuda.trace")
        self.cuda_trace = trace if trace in ("off", "light") else "on"  # how CUDA was collected
        self.trace_mode = _trace_mode(payload["metrics"]) if self.cuda_trace == "on" else None
        self.profiles = {}  # (metric, tkey) -> {frame: [value, samples]}
        self.truncated = set()  # profile keys whose series were cut (MAX_FRAMES frames listed, or an "(other)")
        # profile key -> [value, samples] of its "(other)" frame: what a cap folded, a different set of
        # names on each side, so never compared as a frame (it is no kernel that appeared or went away);
        # it still counts in the profile's total (shares) and calls (--per)
        self.folded = {}
        self.folded_names = {}  # profile key -> frames_folded: distinct names inside its "(other)"
        self.names = {}  # frame -> (display_name, category) the sidecar sent
        self.counters = {}  # (metric, tkey) -> total
        self.histograms = {}  # (metric, tkey) -> [series stats]
        self.tags = {}  # key -> tags as shown
        self.sampled = {}  # profile key -> {"sampled" (an estimated time), "exact"}: how its frames were timed
        self.counted = {}  # key -> {"estimated", "exact"}: how its counts (calls, bytes) were taken
        self.estimated = {}  # (profile key, frame) -> {"time", "count"}: what of the frame is (partly) estimated
        self.metrics = [m for m in metrics if isinstance(m, dict)]
        for m in self.metrics:
            self._add(m)
        self.engine = _engine(payload)

    def _add(self, m):
        name, type_, st = m.get("name"), m.get("type"), m.get("stats")
        if not isinstance(name, str) or not isinstance(st, dict):
            return
        tags = m.get("tags") if isinstance(m.get("tags"), dict) else {}
        key = (name, _tkey(tags))
        self.tags.setdefault(key, {k: str(v) for k, v in tags.items() if k not in VOLATILE_TAGS})
        est_time, est_count = tags.get("duration") == "sampled", tags.get("count") == "estimated"
        if type_ == "profile" and st.get("frames"):  # how its time was measured, where it has any
            kinds = self.sampled.setdefault(key, set())
            kinds.add("sampled" if est_time else "exact")
        if type_ in ("profile", "counter") and (st.get("frames") or type_ == "counter"):
            self.counted.setdefault(key, set()).add("estimated" if est_count else "exact")
        if type_ == "profile":
            frames = st.get("frames") if isinstance(st.get("frames"), list) else []
            prof = self.profiles.setdefault(key, {})
            if len(frames) >= MAX_FRAMES or _num(st.get("frames_folded")):
                self.truncated.add(key)
            if _num(st.get("frames_folded")):
                self.folded_names[key] = self.folded_names.get(key, 0) + _num(st.get("frames_folded"))
            for f in frames:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    continue
                if f["name"] == OTHER_FRAME:
                    acc = self.folded.setdefault(key, [0, 0])
                    acc[0] += _num(f.get("value")) or 0
                    acc[1] += _num(f.get("samples")) or 0
                    self.truncated.add(key)  # a frame missing here may be inside it
                    continue
                if est_time or est_count:
                    e = self.estimated.setdefault((key, f["name"]), set())
                    e.update(("time",) * est_time + ("count",) * est_count)
                v, s = _num(f.get("value")) or 0, _num(f.get("samples")) or 0
                acc = prof.setdefault(f["name"], [0, 0])
                acc[0] += v
                acc[1] += s
                if isinstance(f.get("display_name"), str):
                    self.names.setdefault(f["name"], (f["display_name"], f.get("category")))
        elif type_ == "counter":
            total = _num(st.get("delta" if self.source == "window" else "total"))
            if total is not None:
                self.counters[key] = self.counters.get(key, 0) + total
        elif type_ == "histogram":
            self.histograms.setdefault(key, []).append(st)

    def count_of(self, name):
        """How many of NAME this side did: a counter's total, a histogram's
        count or a profile's calls, summed over its series; None when it
        has no metric of that name."""
        found, n = False, 0
        for (metric, _), total in self.counters.items():
            if metric == name:
                found, n = True, n + total
        for (metric, _), series in self.histograms.items():
            if metric == name:
                found, n = True, n + sum(_num(s.get("count")) or 0 for s in series)
        for key, frames in self.profiles.items():
            if key[0] == name:
                found, n = True, n + sum(s for _, s in frames.values()) + self.folded.get(key, (0, 0))[1]
        return n if found else None

    def tokens(self):
        """Generated tokens over what this side covers (the engine's
        counter since start, or its difference over the window), or None."""
        if self.source == "window":
            try:
                from graphsignal import engine_summary

                as_totals = [dict(m, stats={"total": (m.get("stats") or {}).get("delta")})
                             if m.get("type") == "counter" else m for m in self.metrics]
                e = engine_summary.summarize(as_totals)
            except Exception:  # a foreign window's metrics: no per-token figures
                return None
        else:
            e = self.engine
        return _num((e or {}).get("generation_tokens_total"))

    def describe(self):
        return {"label": self.label, "source": self.source, "covered_seconds": round(self.seconds, 6),
                "cuda_graph_trace_mode": self.trace_mode, "cuda_trace": self.cuda_trace,
                "ended": self.ended}


def _trace_mode(metrics):
    modes = set()
    for m in metrics:
        if isinstance(m, dict) and m.get("name") == "cuda_graph_trace_mode":
            v = _num((m.get("stats") or {}).get("value") if isinstance(m.get("stats"), dict) else None)
            if v is not None:
                modes.add(TRACE_MODES.get(int(v), str(v)))
    if not modes:
        return None
    return modes.pop() if len(modes) == 1 else "mixed"


def _engine(payload):
    if "engine" in payload:
        e = payload["engine"]
        return e if isinstance(e, dict) else None
    try:
        from graphsignal import engine_summary

        return engine_summary.summarize(payload["metrics"])
    except Exception:  # an engine summary of a foreign payload is a nicety
        return None


# -- what the values are per ----------------------------------------------------------
class Norm:
    """What profile and counter values are divided by, per run."""

    def __init__(self, name, stat, per, why, divisors):
        self.name, self.stat, self.per, self.why = name, stat, per, why
        self.divisors = divisors  # {id(side): divisor}

    def of(self, side, value):
        d = self.divisors.get(id(side))
        return value / d if value is not None and d else None

    def unit(self, base):
        return base + ("/" + self.per if self.per else "")

    def describe(self, B, A):
        return {"name": self.name, "stat": self.stat, "why": self.why,
                "before": [self.divisors.get(id(s)) for s in B], "after": [self.divisors.get(id(s)) for s in A]}


def _normalization(B, A, per):
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
def _pair(b, a):
    """{before, after, delta, ratio}; a missing side counts as 0 in delta."""
    delta = None
    if b is not None or a is not None:
        delta = (a or 0) - (b or 0)
    ratio = (a / b) if (a is not None and b) else None
    return {"before": b, "after": a, "delta": delta, "ratio": ratio}


def _change(kind, metric, frame, tags, stat, unit, b, a, **extra):
    c = {"kind": kind, "metric": metric, "frame": frame, "tags": tags, "stat": stat, "unit": unit}
    c.update(_pair(b, a))
    if b is None and a is not None:
        c["only"] = "after"
    elif a is None and b is not None:
        c["only"] = "before"
    c.update(extra)
    return c


def _unit(metric):
    for suffix, unit in (("_nanoseconds", "nanoseconds"), ("_seconds", "seconds"), ("_bytes", "bytes"),
                         ("_joules", "joules")):
        if metric.endswith(suffix):
            return unit
    return "count"


def _median(values):
    """The median of the runs' values (None where a side has none)."""
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


class _Runs:
    """One value per run of each side, and what they make together."""

    def __init__(self, before, after):
        self.before, self.after = before, after

    def pair(self):
        return _median(self.before), _median(self.after)

    def noise(self):
        """{spread, significant} with several runs on a side; {} else."""
        b = [v for v in self.before if v is not None]
        a = [v for v in self.after if v is not None]
        if len(self.before) < 2 and len(self.after) < 2:
            return {}
        out = {"spread": {"before": [min(b), max(b)] if b else None, "after": [min(a), max(a)] if a else None}}
        if b and a:
            out["significant"] = max(a) < min(b) or min(a) > max(b)
        else:
            out["significant"] = True  # on one side only: appeared or went away
        return out


def compare(before, after, before_label="BEFORE", after_label="AFTER", use_window=None, per=None):
    """The comparison document (see the module doc). before, after: a
    payload or a list of payloads (runs); labels likewise. `use_window`:
    None compares windows when every payload has one; False forces the
    cumulative metrics; True wants windows (a warning when one is
    missing). per: a metric name to normalize by (see the module doc)."""
    before, after = _runs(before), _runs(after)
    before_label, after_label = _labels(before_label, len(before)), _labels(after_label, len(after))
    want = use_window
    every = before + after
    both = all(isinstance(p, dict) and isinstance(p.get("window"), dict) for p in every)
    warnings = []
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
    diff_collections.align(B, A, warnings)
    changes = []
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


def _runs(p):
    return list(p) if isinstance(p, (list, tuple)) else [p]


def _labels(label, n):
    if isinstance(label, (list, tuple)):
        return list(label)
    return [label] if n == 1 else ["%s#%d" % (label, i + 1) for i in range(n)]


def _describe(sides):
    if len(sides) == 1:
        return sides[0].describe()
    d = sides[0].describe()
    d.update(label=", ".join(s.label for s in sides), runs=len(sides),
             covered_seconds=round(_median([s.seconds for s in sides]), 6),
             ended=all(s.ended for s in sides),
             source=sides[0].source if len({s.source for s in sides}) == 1 else "mixed",
             cuda_graph_trace_mode=_one_mode(sides),
             cuda_trace=_one({s.cuda_trace for s in sides}))
    return d


def _one_mode(sides):
    return _one({s.trace_mode for s in sides if s.cuda_trace == "on"} or {None})


def _one(values):
    return values.pop() if len(values) == 1 else "mixed"


def _check_same_work(B, A, warnings):
    """Totals compare equal work only: the median ratio of call counts over
    the frames both sides call often says whether the runs did the same."""
    ratios = []
    for key in set().union(*(s.profiles for s in B)) & set().union(*(s.profiles for s in A)):
        frames = set().union(*(s.profiles.get(key, {}) for s in B + A))
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


def _how(kinds, estimate):
    """'exact', 'an estimate' or 'partly an estimate' (exact and estimated
    series together: a frame counted exactly until estimates took over)."""
    if estimate not in kinds:
        return "exact"
    return "an estimate" if len(kinds) == 1 else "partly an estimate"


def _check_estimates(B, A, warnings):
    """One warning per metric whose time, or whose counts, were taken
    differently on the two sides (the series still match: VOLATILE_TAGS)."""
    said = set()
    for key in sorted(set().union(*(s.sampled for s in B)) & set().union(*(s.sampled for s in A))):
        hb = _how(set().union(*(s.sampled.get(key, set()) for s in B)), "sampled")
        ha = _how(set().union(*(s.sampled.get(key, set()) for s in A)), "sampled")
        if hb != ha and ("time", key[0]) not in said:
            said.add(("time", key[0]))
            warnings.append("%s: the time is %s in BEFORE and %s in AFTER (duration: sampled is an estimate from "
                            "sampling windows): compare its counts and bytes, not its time" % (key[0], hb, ha))
    for key in sorted(set().union(*(s.counted for s in B)) & set().union(*(s.counted for s in A))):
        hb = _how(set().union(*(s.counted.get(key, set()) for s in B)), "estimated")
        ha = _how(set().union(*(s.counted.get(key, set()) for s in A)), "estimated")
        if hb != ha and ("count", key[0]) not in said:
            said.add(("count", key[0]))
            warnings.append("%s: the counts are %s in BEFORE and %s in AFTER (count: estimated: per CUDA graph "
                            "replay as sampling windows saw it): small differences in its calls may be the "
                            "estimate's" % (key[0], hb, ha))


def _profiles(B, A, norm, warnings):
    left_out = set()
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
    for key in sorted(set().union(*(s.profiles for s in B + A))):
        if key in left_out:
            continue
        metric = key[0]
        unit = norm.unit(_unit(metric))
        tags = _first(s.tags.get(key) for s in B + A) or {}
        frames = sorted(set().union(*(s.profiles.get(key, {}) for s in B + A)))
        tot = {id(s): sum(v for v, _ in s.profiles[key].values()) + s.folded.get(key, (0, 0))[0]
               for s in B + A if key in s.profiles}
        for frame in frames:
            cols = {}
            for side, runs in (("before", B), ("after", A)):
                vals, calls, per_call, share, normed = [], [], [], [], []
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
            runs = _Runs(nb, na)
            extra = {"total": _pair(_median(vb), _median(va)), "calls": _pair(_median(cb), _median(ca)),
                     "per_call": _pair(_median(pb), _median(pa)),
                     "share": {"before": _median(shb), "after": _median(sha)}}
            extra.update(runs.noise())
            est = {side: sorted(set().union(*(s.estimated.get((key, frame), set()) for s in runs_)))
                   for side, runs_ in (("before", B), ("after", A))}
            if est["before"] or est["after"]:
                extra["estimated"] = est
            if metric in naming.KERNEL_PROFILES:
                n = _first(s.names.get(frame) for s in A + B)
                if n is None:
                    d = naming.describe(frame)
                    n = (d.display_name, d.category)
                extra["display_name"], extra["category"] = n[0], n[1]
            b, a = runs.pair()
            out.append(_change("profile", metric, frame, tags, norm.stat, unit, b, a, **extra))
    for metric in sorted(cut):
        warnings.append("%s lists only its %d largest frames on one side: a frame missing there may be below the "
                        "cut rather than absent" % (metric, MAX_FRAMES))
    _folded_warnings(B, A, norm, left_out, warnings)
    return out


def _folded_warnings(B, A, norm, left_out, warnings):
    """One warning per cut profile: what its "(other)" frame holds on each
    side (never ranked as a frame: its members differ from run to run), so
    a change inside it is not silent."""
    for key in sorted(set().union(*(s.folded for s in B + A))):
        if key in left_out:
            continue
        vals, shares, names = {}, {}, {}
        for side, runs in (("before", B), ("after", A)):
            v, sh, n = [], [], []
            for s in runs:
                if key not in s.profiles and key not in s.folded:
                    continue
                f = s.folded.get(key, (0, 0))[0]
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
                            label, count, MAX_FRAMES - 1, _fmt(vals["before"], unit), _fmt(vals["after"], unit),
                            _pct(shares["before"]), _pct(shares["after"])))


def _first(items):
    for x in items:
        if x is not None:
            return x
    return None


def _counters(B, A, norm):
    out = []
    for key in sorted(set().union(*(s.counters for s in B + A))):
        present_b = any(key in s.counters for s in B)
        present_a = any(key in s.counters for s in A)
        tb = [s.counters.get(key, 0) if present_b else None for s in B]
        ta = [s.counters.get(key, 0) if present_a else None for s in A]
        runs = _Runs([norm.of(s, v) for s, v in zip(B, tb)], [norm.of(s, v) for s, v in zip(A, ta)])
        b, a = runs.pair()
        out.append(_change("counter", key[0], None, _first(s.tags.get(key) for s in B + A) or {}, norm.stat,
                           norm.unit(_unit(key[0])), b, a, total=_pair(_median(tb), _median(ta)), **runs.noise()))
    return out


def _hist_stats(series):
    """(count, mean, p50, p95) of one or more series of a histogram; the
    quantiles of several series are merged from their buckets."""
    count = sum(_num(s.get("count")) or 0 for s in series)
    total = sum(_num(s.get("sum")) or 0 for s in series)
    mean = total / count if count else None
    if len(series) == 1:
        return count, mean, _num(series[0].get("p50")), _num(series[0].get("p95"))
    buckets = {}
    for s in series:
        bins, counts = s.get("bins"), s.get("counts")
        if not isinstance(bins, list) or not isinstance(counts, list) or len(bins) != len(counts):
            return count, mean, None, None  # window stats carry no buckets: no merged quantiles
        for b, c in zip(bins, counts):
            b = float("inf") if b is None else _num(b)
            if b is None or _num(c) is None:
                return count, mean, None, None
            buckets[b] = buckets.get(b, 0) + c
    if not buckets:
        return count, mean, None, None
    from graphsignal import histo

    le = sorted(buckets)
    q = histo.quantiles_buckets(le, [buckets[b] for b in le], (0.5, 0.95))
    return count, mean, q[0], q[1]


_NO_STATS = (None, None, None, None)


def _histograms(B, A):
    out = []
    for key in sorted(set().union(*(s.histograms for s in B + A))):
        hb = [_hist_stats(s.histograms[key]) if key in s.histograms else _NO_STATS for s in B]
        ha = [_hist_stats(s.histograms[key]) if key in s.histograms else _NO_STATS for s in A]
        col = lambda runs, i: [r[i] for r in runs]  # noqa: E731
        runs = _Runs(col(hb, 1), col(ha, 1))
        b, a = runs.pair()
        out.append(_change("histogram", key[0], None, _first(s.tags.get(key) for s in B + A) or {}, "mean",
                           _unit(key[0]), b, a, p50=_pair(_median(col(hb, 2)), _median(col(ha, 2))),
                           p95=_pair(_median(col(hb, 3)), _median(col(ha, 3))),
                           count=_pair(_median(col(hb, 0)), _median(col(ha, 0))), **runs.noise()))
    return out


def _engines(B, A):
    if not any(s.engine for s in B + A):
        return []
    out = []
    # engine totals are since the engine started: per second of the
    # payload's cumulative time, whatever the other changes compare
    for concept in ENGINE_RATES:
        vb = [_num((s.engine or {}).get(concept + "_total")) for s in B]
        va = [_num((s.engine or {}).get(concept + "_total")) for s in A]
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
        def lat(s, stat):
            d = (s.engine or {}).get(concept + "_seconds")
            return _num(d.get(stat)) if isinstance(d, dict) else None

        if all(lat(s, "mean") is None and lat(s, "count") is None for s in B + A) and not any(
                isinstance((s.engine or {}).get(concept + "_seconds"), dict) for s in B + A):
            continue
        runs = _Runs([lat(s, "mean") for s in B], [lat(s, "mean") for s in A])
        b, a = runs.pair()
        out.append(_change("engine", "engine." + concept + "_seconds", None, {}, "mean", "seconds", b, a,
                           p50=_pair(_median([lat(s, "p50") for s in B]), _median([lat(s, "p50") for s in A])),
                           p95=_pair(_median([lat(s, "p95") for s in B]), _median([lat(s, "p95") for s in A])),
                           count=_pair(_median([lat(s, "count") for s in B]), _median([lat(s, "count") for s in A])),
                           **runs.noise()))
    return out


def top(doc, n):
    """The document with at most n changes of each kind (n <= 0: all)."""
    if not n or n <= 0:
        return doc
    seen = {}
    kept = []
    for c in doc["changes"]:
        seen[c["kind"]] = seen.get(c["kind"], 0) + 1
        if seen[c["kind"]] <= n:
            kept.append(c)
    out = dict(doc)
    out["changes"] = kept
    out["left_out"] = {k: v - n for k, v in seen.items() if v > n}
    return out


# -- text for people ------------------------------------------------------------------
_SHORT = {"cuda_kernels_nanoseconds": "kernel", "cuda_graphs_nanoseconds": "graph",
          "cuda_memcpy_nanoseconds": "memcpy", "cuda_memset_nanoseconds": "memset",
          "cuda_sync_nanoseconds": "sync", "rocm_kernels_nanoseconds": "kernel",
          "nvtx_ranges_nanoseconds": "nvtx", "nvtx_range_gpu_nanoseconds": "nvtx gpu"}


def _fmt(v, unit):
    if v is None:
        return "-"
    base, _, per = unit.partition("/")
    if base == "nanoseconds":
        a = abs(v)
        if a >= 1e9:
            s = "%.2f s" % (v / 1e9)
        elif a >= 1e6:
            s = "%.2f ms" % (v / 1e6)
        elif a >= 1e3:
            s = "%.1f us" % (v / 1e3)
        else:
            s = "%.0f ns" % v
    elif base == "seconds":
        return _fmt(v * 1e9, "nanoseconds" + unit[len("seconds"):])
    elif base == "bytes":
        a, s = abs(v), None
        for div, u in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if a >= div:
                s = "%.1f %s" % (v / div, u)
                break
        s = s or "%.0f B" % v
    else:
        a = abs(v)
        s = ("%.3g" % v) if a < 1000 else ("%.1fk" % (v / 1e3) if a < 1e6 else "%.1fM" % (v / 1e6))
    return s + ("/s" if per == "second" else "/" + per if per else "")


def _fmt_delta(c, unit):
    d = c.get("delta")
    if d is None:
        return "-"
    s = _fmt(d, unit)
    return ("+" + s) if d > 0 else s


def _ratio(c):
    if c.get("only") == "after":
        return "new"
    if c.get("only") == "before":
        return "gone"
    r = c.get("ratio")
    mark = "~" if c.get("significant") is False else ""  # inside the run-to-run spread
    if r is None:
        return mark + "-"
    return mark + ("x%.2f" % r if r < 10 else "x%.0f" % r)


def _pct(v):
    return "-" if v is None else "%.0f%%" % (100 * v)


def _name(c, varying):
    if c["kind"] == "profile":
        name = c.get("display_name") or c["frame"]
        what = _SHORT.get(c["metric"])
        if what is None:  # a probe profile: its own name says what the frame is
            what, name = "probe", "%s %s" % (c["metric"], name)
        if c["tags"].get("host_memory"):
            name += " (%s)" % c["tags"]["host_memory"]  # a pageable copy is the slow kind
    else:
        name, what = c["metric"], c["kind"]
    shown = {k: v for k, v in c["tags"].items() if k in varying and k != "host_memory"}
    if shown:
        name += " {%s}" % ",".join("%s=%s" % kv for kv in sorted(shown.items()))
    est = c.get("estimated")
    if est:  # what of the numbers is an estimate, on which side
        name += " [estimated %s]" % "; ".join("%s: %s" % (side, "+".join(est[side])) for side in ("before", "after")
                                               if est[side])
    return what, name


def _varying(changes):
    """Tag keys worth showing in a table: those that tell rows of one
    metric apart (two or more values, or set on some rows only)."""
    by_metric = {}
    for c in changes:
        by_metric.setdefault(c["metric"], []).append(c["tags"])
    out = set()
    for rows in by_metric.values():
        for k in {k for t in rows for k in t}:
            if len({t.get(k) for t in rows}) > 1:
                out.add(k)
    return out


def headline(doc):
    """One line: the largest change of time (or, without profiles, the
    first change), naming what changed; with several runs a side, the
    largest outside the run-to-run spread."""
    changes = doc["changes"]
    times = [c for c in changes if c["kind"] == "profile" and c["unit"].startswith("nanoseconds")]
    real = [c for c in times if c.get("significant") is not False]
    noisy = bool(times) and not real
    pool = real or times
    c = max(pool, key=lambda c: abs(c["delta"] or 0)) if pool else (changes[0] if changes else None)
    if c is None:
        return "no changes: neither payload has anything to compare"
    if not any(x["delta"] for x in changes):
        return "no change: every compared value is the same on both sides"
    what, name = _name(c, set())
    unit = c["unit"]
    rest = ": %s -> %s (%s, %s)" % (_fmt(c["before"], unit), _fmt(c["after"], unit), _fmt_delta(c, unit), _ratio(c))
    if c["kind"] == "profile" and c.get("category"):
        rest += " [%s]" % c["category"]
    if noisy:
        return "no change outside the run-to-run spread; the largest inside it: %s %s%s" % (what, name, rest)
    return "largest change: %s %s%s" % (what, name, rest)


_PER_TITLE = {"second": "per second of covered time", "run": "totals of each run",
              "per generated token": "per generated token"}


def to_text(doc, width=160):
    """The comparison for people: a headline, what each side covers, the
    warnings, then a table per kind sorted by absolute change."""
    from graphsignal.findings import compare as findings_compare

    lines = [headline(doc)] + findings_compare.lines(doc.get("findings") or {})
    norm = doc.get("normalized_by") or {"name": "second", "why": "per second of covered time"}
    for side in ("before", "after"):
        d = doc[side]
        trace = "cuda trace off" if d.get("cuda_trace") == "off" else "cuda graph trace %s" % (
            d["cuda_graph_trace_mode"] or "-")
        lines.append("  %-6s %s: %s, %.2f s covered%s, %s%s" % (
            side, d["label"], d["source"], d["covered_seconds"], " (median)" if d.get("runs") else "", trace,
            ", ended" if d.get("ended") else ""))
    lines.append("  compared: " + norm["why"])
    multi = any("significant" in c for c in doc["changes"])
    if multi:
        lines.append("  values are medians of the runs; ~ marks a change inside the run-to-run spread")
    for w in doc["warnings"]:
        lines.append("warning: " + w)
    by_kind = {}
    for c in doc["changes"]:
        by_kind.setdefault(c["kind"], []).append(c)
    left = doc.get("left_out") or {}
    per = _PER_TITLE.get(norm["name"], norm["name"])
    titles = {"profile": "PROFILES: time (or value)%s %s, largest change first" % (
                  "" if norm["name"] == "second" else ",", per),
              "counter": "COUNTERS: %s" % per,
              "histogram": "HISTOGRAMS: mean, p50, p95",
              "engine": "ENGINE (since start)"}
    for kind in KINDS:
        rows = by_kind.get(kind)
        if not rows:
            continue
        lines.append("")
        lines.append(titles[kind])
        varying = _varying(rows)
        if kind == "profile":
            lines.append("  %12s %12s %12s %6s  %-23s %-12s %-6s %s" % (
                "BEFORE", "AFTER", "CHANGE", "RATIO", "PER CALL", "SHARE", "WHAT", "NAME"))
            for c in rows:
                what, name = _name(c, varying)
                u, pu = c["unit"], c["unit"].partition("/")[0]
                pc = c["per_call"]
                lines.append("  %12s %12s %12s %6s  %-23s %-12s %-6s %s" % (
                    _fmt(c["before"], u), _fmt(c["after"], u), _fmt_delta(c, u), _ratio(c),
                    "%s -> %s" % (_fmt(pc["before"], pu), _fmt(pc["after"], pu)),
                    "%s -> %s" % (_pct(c["share"]["before"]), _pct(c["share"]["after"])), what, name))
        elif kind in ("histogram", "engine"):
            lines.append("  %12s %12s %12s %6s  %-23s %-23s %s" % (
                "BEFORE", "AFTER", "CHANGE", "RATIO", "P50", "P95", "NAME"))
            for c in rows:
                _, name = _name(c, varying)
                u = c["unit"]
                q = [("%s -> %s" % (_fmt(c[p]["before"], u), _fmt(c[p]["after"], u))) if p in c else ""
                     for p in ("p50", "p95")]
                lines.append("  %12s %12s %12s %6s  %-23s %-23s %s" % (
                    _fmt(c["before"], u), _fmt(c["after"], u), _fmt_delta(c, u), _ratio(c), q[0], q[1], name))
        else:
            lines.append("  %12s %12s %12s %6s  %-23s %s" % ("BEFORE", "AFTER", "CHANGE", "RATIO", "TOTAL", "NAME"))
            for c in rows:
                _, name = _name(c, varying)
                u = c["unit"]
                tu = u.partition("/")[0]
                lines.append("  %12s %12s %12s %6s  %-23s %s" % (
                    _fmt(c["before"], u), _fmt(c["after"], u), _fmt_delta(c, u), _ratio(c),
                    "%s -> %s" % (_fmt(c["total"]["before"], tu), _fmt(c["total"]["after"], tu)), name))
        if left.get(kind):
            lines.append("  ... %d more (--top 0 lists all)" % left[kind])
    # the headline, what was compared and the warnings are never cut: they
    # are what a reader acts on (a long kernel name and its category, what
    # to pass next); table rows fit the width
    whole = ("  compared: ", "warning: ")
    return "\n".join([lines[0]] + [ln if len(ln) <= width or ln.startswith(whole) else ln[:width - 1] + "\u2026"
                                    for ln in lines[1:]]) + "\n"
