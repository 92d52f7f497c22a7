"""What changed between two /signals payloads: graphsignal-diff.

compare(before, after) takes two payloads (dicts, as GET /signals returns
them or GRAPHSIGNAL_SIGNALS_FILE saves them) and returns

    {"before": {...}, "after": {...},      # what each side covers
     "changes": [{"kind", "metric", "frame", "tags", "stat", "unit",
                  "before", "after", "delta", "ratio", ...}],
     "warnings": [...]}

Sides. A payload taken with ?window=N on both sides is compared over its
windows; otherwise over the cumulative metrics, each covering
payload_ns - start_ns. Rates are per second of that covered time, so runs
of different length compare fairly. Series are matched by their tags
without the ones that differ from run to run (process.pid,
process.root_pid, device.uuid, device.bus_id) and summed where several
match (processes of one device without ranks).

Changes, one per
- profile frame (kernels, CUDA graphs, copies by kind with their
  host_memory tag, memsets, syncs, probe profiles): stat
  "per_second" = frame value per second of covered time (ns/s for the
  _nanoseconds profiles: 1e9 is one second of GPU or host time per
  second), with `total`, `calls`, `per_call` (value per call) and `share`
  (of its profile) before and after; kernel frames add display_name and
  category;
- counter: "per_second", with `total`;
- histogram: "mean", with p50 and p95 (and count);
- engine summary concept (since start): generation/prompt tokens per
  second, and the mean, p50 and p95 of TTFT, ITL, TPOT and E2E latency.

`before`/`after` are null where the series or frame exists on one side
only (`only` then says which side has it), `delta` counts such a missing
side as zero, `ratio` is after / before (null when before is 0 or
missing). Within each kind (profiles, counters, histograms, engine, in
that order: their units differ) changes are sorted by absolute delta.

Time profiles taken in different CUDA graph trace modes measure different
things (whole graph replays versus kernels one by one): they are left out
with a warning.
"""
import math

from graphsignal import kernel_names

NS = 1_000_000_000
VOLATILE_TAGS = frozenset(("process.pid", "process.root_pid", "device.uuid", "device.bus_id"))
# profiles whose meaning --cuda-graph-trace changes: in node mode kernels
# (and copies) inside graphs are timed one by one instead of whole replays
TRACE_DEPENDENT = frozenset(("cuda_kernels_nanoseconds", "cuda_graphs_nanoseconds", "cuda_memcpy_nanoseconds",
                             "cuda_memset_nanoseconds"))
TRACE_MODES = {0: "graph", 1: "node"}
MAX_FRAMES = 250  # a profile lists its largest 250 frames
KINDS = ("profile", "counter", "histogram", "engine")
ENGINE_RATES = ("generation_tokens", "prompt_tokens")
ENGINE_LATENCIES = ("ttft", "itl", "tpot", "e2e")


class NotAPayload(ValueError):
    """The document is not a /signals payload; the message says why."""


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
        win = payload.get("window") if use_window else None
        self.source = "window" if isinstance(win, dict) else "cumulative"
        if self.source == "window":
            metrics = win.get("metrics") if isinstance(win.get("metrics"), list) else []
            self.seconds = _num(win.get("covered_seconds")) or 0.0
        else:
            metrics = payload["metrics"]
            self.seconds = self.cumulative_seconds
        self.trace_mode = _trace_mode(payload["metrics"])
        self.profiles = {}  # (metric, tkey) -> {frame: [value, samples]}
        self.truncated = set()  # profile keys whose series listed MAX_FRAMES frames (a cut)
        self.names = {}  # frame -> (display_name, category) the sidecar sent
        self.counters = {}  # (metric, tkey) -> total
        self.histograms = {}  # (metric, tkey) -> [series stats]
        self.tags = {}  # key -> tags as shown
        for m in metrics:
            if isinstance(m, dict):
                self._add(m)
        self.engine = _engine(payload)

    def _add(self, m):
        name, type_, st = m.get("name"), m.get("type"), m.get("stats")
        if not isinstance(name, str) or not isinstance(st, dict):
            return
        tags = m.get("tags") if isinstance(m.get("tags"), dict) else {}
        key = (name, _tkey(tags))
        self.tags.setdefault(key, {k: str(v) for k, v in tags.items() if k not in VOLATILE_TAGS})
        if type_ == "profile":
            frames = st.get("frames") if isinstance(st.get("frames"), list) else []
            prof = self.profiles.setdefault(key, {})
            if len(frames) >= MAX_FRAMES:
                self.truncated.add(key)
            for f in frames:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    continue
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

    def rate(self, value):
        return value / self.seconds if value is not None and self.seconds > 0 else None

    def describe(self):
        return {"label": self.label, "source": self.source, "covered_seconds": round(self.seconds, 6),
                "cuda_graph_trace_mode": self.trace_mode}


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


def compare(before, after, before_label="BEFORE", after_label="AFTER", use_window=None):
    """The comparison document (see the module doc). `use_window`: None
    compares windows when both payloads have one; False forces the
    cumulative metrics; True wants windows (a warning when one is missing)."""
    want = use_window
    both = all(isinstance(p, dict) and isinstance(p.get("window"), dict) for p in (before, after))
    warnings = []
    if want is None:
        want = both
    elif want and not both:
        warnings.append("a window was asked for but %s has none: comparing the cumulative metrics" % (
            " and ".join(lbl for lbl, p in ((before_label, before), (after_label, after))
                         if not (isinstance(p, dict) and isinstance(p.get("window"), dict)))))
        want = False
    B, A = Side(before, want, before_label), Side(after, want, after_label)
    for s in (B, A):
        if s.seconds <= 0:
            warnings.append("%s covers no time (a payload from the first second of a run?): its rates are null"
                            % s.label)
    changes = []
    changes += _profiles(B, A, warnings)
    changes += _counters(B, A)
    changes += _histograms(B, A)
    changes += _engines(B, A)
    order = {k: i for i, k in enumerate(KINDS)}
    changes.sort(key=lambda c: (order[c["kind"]], -abs(c["delta"] or 0), c["metric"], c["frame"] or "",
                                sorted(c["tags"].items())))
    return {"before": B.describe(), "after": A.describe(), "changes": changes, "warnings": warnings}


def _profiles(B, A, warnings):
    left_out = set()
    if B.trace_mode and A.trace_mode and B.trace_mode != A.trace_mode:
        left_out = {k for k in set(B.profiles) | set(A.profiles) if k[0] in TRACE_DEPENDENT}
        if left_out:
            warnings.append(
                "%s was taken in CUDA graph trace mode %s and %s in %s: %s are left out (graph mode times whole "
                "replays, node mode the kernels inside them; compare runs taken in the same mode)" % (
                    B.label, B.trace_mode, A.label, A.trace_mode,
                    ", ".join(sorted({k[0] for k in left_out}))))
    out = []
    cut = set()
    for key in sorted(set(B.profiles) | set(A.profiles)):
        if key in left_out:
            continue
        metric = key[0]
        pb, pa = B.profiles.get(key), A.profiles.get(key)
        tb = sum(v for v, _ in pb.values()) if pb is not None else None
        ta = sum(v for v, _ in pa.values()) if pa is not None else None
        unit = _unit(metric) + "/second"
        tags = B.tags.get(key) or A.tags.get(key) or {}
        for frame in sorted(set(pb or ()) | set(pa or ())):
            fb = (pb or {}).get(frame)
            fa = (pa or {}).get(frame)
            if (fb is None and key in B.truncated) or (fa is None and key in A.truncated):
                cut.add(metric)
            vb, sb = (fb if fb is not None else (None, None))
            va, sa = (fa if fa is not None else (None, None))
            extra = {
                "total": _pair(vb, va), "calls": _pair(sb, sa),
                "per_call": _pair(vb / sb if sb else None, va / sa if sa else None),
                "share": {"before": vb / tb if vb is not None and tb else None,
                          "after": va / ta if va is not None and ta else None},
            }
            if metric in kernel_names.KERNEL_PROFILES:
                n = A.names.get(frame) or B.names.get(frame)
                if n is None:
                    d = kernel_names.describe(frame)
                    n = (d.display_name, d.category)
                extra["display_name"], extra["category"] = n[0], n[1]
            out.append(_change("profile", metric, frame, tags, "per_second", unit, B.rate(vb), A.rate(va),
                               **extra))
    for metric in sorted(cut):
        warnings.append("%s lists only its %d largest frames on one side: a frame missing there may be below the "
                        "cut rather than absent" % (metric, MAX_FRAMES))
    return out


def _counters(B, A):
    out = []
    for key in sorted(set(B.counters) | set(A.counters)):
        vb, va = B.counters.get(key), A.counters.get(key)
        out.append(_change("counter", key[0], None, B.tags.get(key) or A.tags.get(key) or {}, "per_second",
                           _unit(key[0]) + "/second", B.rate(vb), A.rate(va), total=_pair(vb, va)))
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


def _histograms(B, A):
    out = []
    for key in sorted(set(B.histograms) | set(A.histograms)):
        hb = _hist_stats(B.histograms[key]) if key in B.histograms else (None, None, None, None)
        ha = _hist_stats(A.histograms[key]) if key in A.histograms else (None, None, None, None)
        out.append(_change("histogram", key[0], None, B.tags.get(key) or A.tags.get(key) or {}, "mean",
                           _unit(key[0]), hb[1], ha[1], p50=_pair(hb[2], ha[2]), p95=_pair(hb[3], ha[3]),
                           count=_pair(hb[0], ha[0])))
    return out


def _engines(B, A):
    eb, ea = B.engine, A.engine
    if not eb and not ea:
        return []
    eb, ea = eb or {}, ea or {}
    out = []
    # engine totals are since the engine started: per second of the
    # payload's cumulative time, whatever the other changes compare
    for concept in ENGINE_RATES:
        vb, va = _num(eb.get(concept + "_total")), _num(ea.get(concept + "_total"))
        if vb is None and va is None:
            continue
        rb = vb / B.cumulative_seconds if vb is not None and B.cumulative_seconds > 0 else None
        ra = va / A.cumulative_seconds if va is not None and A.cumulative_seconds > 0 else None
        out.append(_change("engine", "engine." + concept + "_per_second", None, {}, "per_second",
                           "tokens/second", rb, ra, total=_pair(vb, va)))
    for concept in ENGINE_LATENCIES:
        lb = eb.get(concept + "_seconds") if isinstance(eb.get(concept + "_seconds"), dict) else {}
        la = ea.get(concept + "_seconds") if isinstance(ea.get(concept + "_seconds"), dict) else {}
        if not lb and not la:
            continue
        out.append(_change("engine", "engine." + concept + "_seconds", None, {}, "mean", "seconds",
                           _num(lb.get("mean")), _num(la.get("mean")),
                           p50=_pair(_num(lb.get("p50")), _num(la.get("p50"))),
                           p95=_pair(_num(lb.get("p95")), _num(la.get("p95"))),
                           count=_pair(_num(lb.get("count")), _num(la.get("count")))))
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
          "cuda_sync_nanoseconds": "sync", "rocm_kernels_nanoseconds": "kernel"}


def _fmt(v, unit):
    if v is None:
        return "-"
    if unit.startswith("nanoseconds"):
        a = abs(v)
        if a >= 1e9:
            s = "%.2f s" % (v / 1e9)
        elif a >= 1e6:
            s = "%.2f ms" % (v / 1e6)
        elif a >= 1e3:
            s = "%.1f us" % (v / 1e3)
        else:
            s = "%.0f ns" % v
    elif unit.startswith("seconds"):
        return _fmt(v * 1e9, "nanoseconds" + unit[len("seconds"):])
    elif unit.startswith("bytes"):
        a, s = abs(v), None
        for div, u in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if a >= div:
                s = "%.1f %s" % (v / div, u)
                break
        s = s or "%.0f B" % v
    else:
        a = abs(v)
        s = ("%.3g" % v) if a < 1000 else ("%.1fk" % (v / 1e3) if a < 1e6 else "%.1fM" % (v / 1e6))
    return s + ("/s" if unit.endswith("/second") else "")


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
    if r is None:
        return "-"
    return "x%.2f" % r if r < 10 else "x%.0f" % r


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
    first change), naming what changed."""
    changes = doc["changes"]
    times = [c for c in changes if c["kind"] == "profile" and c["unit"].startswith("nanoseconds")]
    c = max(times, key=lambda c: abs(c["delta"] or 0)) if times else (changes[0] if changes else None)
    if c is None:
        return "no changes: neither payload has anything to compare"
    if not any(x["delta"] for x in changes):
        return "no change: every compared value is the same on both sides"
    what, name = _name(c, set())
    unit = c["unit"]
    rest = ": %s -> %s (%s, %s)" % (_fmt(c["before"], unit), _fmt(c["after"], unit), _fmt_delta(c, unit), _ratio(c))
    if c["kind"] == "profile" and c.get("category"):
        rest += " [%s]" % c["category"]
    return "largest change: %s %s%s" % (what, name, rest)


def to_text(doc, width=160):
    """The comparison for people: a headline, what each side covers, the
    warnings, then a table per kind sorted by absolute change."""
    lines = [headline(doc)]
    for side in ("before", "after"):
        d = doc[side]
        lines.append("  %-6s %s: %s, %.2f s covered, cuda graph trace %s" % (
            side, d["label"], d["source"], d["covered_seconds"], d["cuda_graph_trace_mode"] or "-"))
    for w in doc["warnings"]:
        lines.append("warning: " + w)
    by_kind = {}
    for c in doc["changes"]:
        by_kind.setdefault(c["kind"], []).append(c)
    left = doc.get("left_out") or {}
    titles = {"profile": "PROFILES: time (or value) per second of covered time, largest change first",
              "counter": "COUNTERS: per second of covered time",
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
                u, pu = c["unit"], c["unit"].replace("/second", "")
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
                tu = u.replace("/second", "")
                lines.append("  %12s %12s %12s %6s  %-23s %s" % (
                    _fmt(c["before"], u), _fmt(c["after"], u), _fmt_delta(c, u), _ratio(c),
                    "%s -> %s" % (_fmt(c["total"]["before"], tu), _fmt(c["total"]["after"], tu)), name))
        if left.get(kind):
            lines.append("  ... %d more (--top 0 lists all)" % left[kind])
    # the headline is never cut: it is the one line that names the change
    # (a long kernel name and its category); table rows fit the width
    return "\n".join([lines[0]] + [ln if len(ln) <= width else ln[:width - 1] + "\u2026" for ln in lines[1:]]) + "\n"
