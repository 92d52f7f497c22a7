"""graphsignal-diff's comparison for people: the headline, what each side
covers, the warnings, and a table per kind of change, numbers in their
units (ns to s, bytes to GiB, counts to k and M).

It guards against a table that cannot be read: a long name or a --per
unit never pushes the columns apart (rows are cut to the width, the
unit said once in the title), while the headline, what was compared and
the warnings, what a reader acts on, are never cut."""
from typing import Any, Dict, List, Optional, Set, Tuple

from graphsignal.diff.sides import KINDS

Change = Dict[str, Any]

_SHORT = {"cuda_kernels_nanoseconds": "kernel", "cuda_graphs_nanoseconds": "graph",
          "cuda_memcpy_nanoseconds": "memcpy", "cuda_memset_nanoseconds": "memset",
          "cuda_sync_nanoseconds": "sync", "rocm_kernels_nanoseconds": "kernel",
          "nvtx_ranges_nanoseconds": "nvtx", "nvtx_range_gpu_nanoseconds": "nvtx gpu"}


def fmt(v: Optional[float], unit: str) -> str:
    """A value in its unit ("nanoseconds", "bytes/token", ...), for people."""
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
        return fmt(v * 1e9, "nanoseconds" + unit[len("seconds"):])
    elif base == "bytes":
        a = abs(v)
        got: Optional[str] = None
        for div, u in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if a >= div:
                got = "%.1f %s" % (v / div, u)
                break
        s = got or "%.0f B" % v
    else:
        a = abs(v)
        s = ("%.3g" % v) if a < 1000 else ("%.1fk" % (v / 1e3) if a < 1e6 else "%.1fM" % (v / 1e6))
    return s + ("/s" if per == "second" else "/" + per if per else "")


def pct(v: Optional[float]) -> str:
    return "-" if v is None else "%.0f%%" % (100 * v)


def _cell_unit(unit: str) -> str:
    """A table cell's unit: a --per NAME is said once in the table's title,
    not in every cell (it would push the columns apart); /s and /token
    stay."""
    base, _, per = unit.partition("/")
    return base if len(per) > 6 else unit


def _fmt_delta(c: Change, unit: str) -> str:
    d = c.get("delta")
    if d is None:
        return "-"
    s = fmt(d, unit)
    return ("+" + s) if d > 0 else s


def _ratio(c: Change) -> str:
    if c.get("only") == "after":
        return "new"
    if c.get("only") == "before":
        return "gone"
    r = c.get("ratio")
    mark = "~" if c.get("significant") is False else ""  # inside the run-to-run spread
    if r is None:
        return mark + "-"
    return mark + ("x%.2f" % r if r < 10 else "x%.0f" % r)


def _name(c: Change, varying: Set[str]) -> Tuple[str, str]:
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


def _varying(changes: List[Change]) -> Set[str]:
    """Tag keys worth showing in a table: those that tell rows of one
    metric apart (two or more values, or set on some rows only)."""
    by_metric: Dict[str, List[Dict[str, str]]] = {}
    for c in changes:
        by_metric.setdefault(c["metric"], []).append(c["tags"])
    out = set()
    for rows in by_metric.values():
        for k in {k for t in rows for k in t}:
            if len({t.get(k) for t in rows}) > 1:
                out.add(k)
    return out


def headline(doc: Dict[str, Any]) -> str:
    """One line: the largest change of time (or, without profiles, the
    first change), naming what changed; with several runs a side, the
    largest outside the run-to-run spread."""
    changes: List[Change] = doc["changes"]
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
    rest = ": %s -> %s (%s, %s)" % (fmt(c["before"], unit), fmt(c["after"], unit), _fmt_delta(c, unit), _ratio(c))
    if c["kind"] == "profile" and c.get("category"):
        rest += " [%s]" % c["category"]
    if noisy:
        return "no change outside the run-to-run spread; the largest inside it: %s %s%s" % (what, name, rest)
    return "largest change: %s %s%s" % (what, name, rest)


_PER_TITLE = {"second": "per second of covered time", "run": "totals of each run",
              "per generated token": "per generated token"}


def to_text(doc: Dict[str, Any], width: int = 160) -> str:
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
    by_kind: Dict[str, List[Change]] = {}
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
                u, pu = _cell_unit(c["unit"]), c["unit"].partition("/")[0]
                pc = c["per_call"]
                lines.append("  %12s %12s %12s %6s  %-23s %-12s %-6s %s" % (
                    fmt(c["before"], u), fmt(c["after"], u), _fmt_delta(c, u), _ratio(c),
                    "%s -> %s" % (fmt(pc["before"], pu), fmt(pc["after"], pu)),
                    "%s -> %s" % (pct(c["share"]["before"]), pct(c["share"]["after"])), what, name))
        elif kind in ("histogram", "engine"):
            lines.append("  %12s %12s %12s %6s  %-23s %-23s %s" % (
                "BEFORE", "AFTER", "CHANGE", "RATIO", "P50", "P95", "NAME"))
            for c in rows:
                _, name = _name(c, varying)
                u = _cell_unit(c["unit"])
                q = [("%s -> %s" % (fmt(c[p]["before"], u), fmt(c[p]["after"], u))) if p in c else ""
                     for p in ("p50", "p95")]
                lines.append("  %12s %12s %12s %6s  %-23s %-23s %s" % (
                    fmt(c["before"], u), fmt(c["after"], u), _fmt_delta(c, u), _ratio(c), q[0], q[1], name))
        else:
            lines.append("  %12s %12s %12s %6s  %-23s %s" % ("BEFORE", "AFTER", "CHANGE", "RATIO", "TOTAL", "NAME"))
            for c in rows:
                _, name = _name(c, varying)
                u = _cell_unit(c["unit"])
                tu = u.partition("/")[0]
                lines.append("  %12s %12s %12s %6s  %-23s %s" % (
                    fmt(c["before"], u), fmt(c["after"], u), _fmt_delta(c, u), _ratio(c),
                    "%s -> %s" % (fmt(c["total"]["before"], tu), fmt(c["total"]["after"], tu)), name))
        if left.get(kind):
            lines.append("  ... %d more (--top 0 lists all)" % left[kind])
    # the headline, what was compared and the warnings are never cut: they
    # are what a reader acts on (a long kernel name and its category, what
    # to pass next); table rows fit the width
    whole = ("  compared: ", "warning: ")
    return "\n".join([lines[0]] + [ln if len(ln) <= width or ln.startswith(whole) else ln[:width - 1] + "\u2026"
                                    for ln in lines[1:]]) + "\n"
