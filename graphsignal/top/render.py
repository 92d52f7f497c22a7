"""Drawing a Model as lines of styled text, without curses.

render() returns a list of lines, each a list of (text, style) segments;
the curses screen and `--once` (plain or ANSI) both print these, so the
tests see exactly what a person sees. Styles are names (see STYLES);
the front end decides what each looks like, or ignores them (NO_COLOR).
Numbers in their units and lines clipped to the width are text.py's.
"""
import time

from graphsignal.top import findings_view
from graphsignal.top.tables import GRAPHS, KERNELS, MEMORY, SYNC, TABLES, who_cell
from graphsignal.top.text import (Glyphs, clip, fit, fmt_age, fmt_bytes, fmt_count, fmt_ns, fmt_num, fmt_pct, fmt_s,
                                  line, sparkline)

STYLES = ("title", "head", "dim", "ok", "warn", "bad", "sel", "bar", "key")
CATEGORY_STYLE = {"gemm": "ok", "attention": "bar", "communication": "warn", "memory": "key"}

TABLE_LABELS = {KERNELS: "kernels", GRAPHS: "graphs", MEMORY: "memory", SYNC: "sync"}
TABLE_KEYS = {KERNELS: "k", GRAPHS: "g", MEMORY: "m", SYNC: "s"}
ONCE_ROWS = 25


class UI:
    """What the person chose: table, selection, details, scroll."""

    def __init__(self, table=KERNELS):
        self.table = table
        self.selected = 0
        self.selected_key = None
        self.offset = 0
        self.details = False

    def clamp(self, n_rows):
        if n_rows == 0:
            self.selected, self.offset = 0, 0
            return
        self.selected = max(0, min(self.selected, n_rows - 1))


# -- sections ---------------------------------------------------------------------------
def _title(model, ui, now, g, once):
    ctx = model.context
    parts = [(" graphsignal-top ", "title")]
    info = []
    if ctx.get("host.name"):
        info.append("host " + str(ctx["host.name"]))
    if ctx.get("instance.id"):
        info.append("run " + str(ctx["instance.id"]))
    if model.uptime_s is not None:
        info.append("up " + fmt_age(model.uptime_s))
    info.append(model.endpoint)
    w = model.window
    if w and w.get("covered_seconds") is not None:
        win = "window %ss" % w.get("seconds")
        if w.get("partial") or abs((w.get("covered_seconds") or 0) - (w.get("seconds") or 0)) > 0.5:
            win += " (%.1fs covered)" % (w.get("covered_seconds") or 0)
        info.append(win)
    elif model.window_asked:
        info.append("window %ss (n/a)" % model.window_asked)
    info.append(time.strftime("%H:%M:%S", time.localtime(now)))
    parts.append((" " + "  ".join(info), None))
    lines = [parts]
    if not model.ok:
        err = str(model.error)
        if err.startswith("HTTP 404"):  # something answered: it is there, but it is not a profiler's endpoint
            msg = "not found at http://%s/signals (%s; is this graphsignal-run's --listen-port?)" % (
                model.endpoint, err)
        elif err.startswith("HTTP "):
            msg = "endpoint %s answered %s" % (model.endpoint, err)
        else:
            msg = "endpoint %s unreachable: %s" % (model.endpoint, err)
        msg += "" if once else "; retrying every second"
        if model.fetched_at:
            msg += " (data below is %s old)" % fmt_age(now - model.fetched_at)
        lines.append(line((" " + msg, "bad")))
    if model.window_note:
        lines.append(line((" " + model.window_note, "warn")))
    return lines


def _host_section(model, once, g):
    h = model.host
    if not any(v is not None for v in h.values()) and not model.processes:
        return [line((" HOST ", "head"), ("no host metrics", "dim"))]
    cpu = fmt_pct(h.get("cpu"))
    cores = h.get("cpu_count")
    mem = "%s / %s" % (fmt_bytes(h.get("mem_used")), fmt_bytes(h.get("mem_total")))
    busy = h.get("cpu_busy")
    of = (" of %d cores" % cores) if cores else ""
    if busy is not None:
        of += " (%.2f busy)" % busy
    # the host's figure is a share of all its cores; a process's below is top's (100% = one core)
    lines = [line((" HOST ", "head"), "cpu %s%s  mem %s  processes %d" % (cpu, of, mem, len(model.processes)))]
    limit = len(model.processes) if once else 4
    for p in model.processes[:limit]:
        lines.append(line("   pid %-7s cpu %6s  rss %10s  " % (p["pid"], fmt_pct(p["cpu"], 1), fmt_bytes(p["rss"])),
                           (p["cmd"] or "", "dim")))
    return lines


def _gpu_section(model, width, g):
    if not model.gpus:
        return [line((" GPU  ", "head"), ("no GPU telemetry (no NVML/AMD SMI data from this profiler)", "dim"))]
    lines = [line((" GPU", "head"))]
    spark_w = max(8, min(30, width - 120)) if width else 20
    for gp in model.gpus:
        util = gp["util"]
        ustyle = "ok" if (util or 0) >= 50 else None
        idx = gp["index"] if gp["index"] is not None else "?"
        name = gp["name"] or (gp["key"] or "")[:20]
        mem = "%s / %s" % (fmt_bytes(gp["mem_used"]), fmt_bytes(gp["mem_total"]))
        if gp["mem_used"] is not None and gp["mem_total"]:
            mem += " (%d%%)" % round(100.0 * gp["mem_used"] / gp["mem_total"])
        first = line(
            ("  %-3s" % idx, "head"), "%-18s " % clip(str(name), 18, g),
            "util ", ("%4s" % fmt_pct(util), ustyle), " ",
            (sparkline(gp["util_hist"], spark_w, g, vmax=100.0), "bar"),
            " avg %s  " % fmt_pct(gp["util_window"]) if gp["util_window"] is not None else "  ",
            "mem %s  power %s / %s W  temp %s C%s" % (
                mem, fmt_num(gp["power"], 0) if isinstance(gp["power"], float) else fmt_num(gp["power"]),
                fmt_num(gp["power_limit"], 0) if isinstance(gp["power_limit"], float) else fmt_num(gp["power_limit"]),
                fmt_num(gp["temp"]), ("  P%s" % gp["pstate"]) if gp["pstate"] is not None else ""))
        lines.append(first)
        pcie = "pcie"
        if gp["pcie_gen"] is not None:
            pcie += " gen%s x%s" % (gp["pcie_gen"], fmt_num(gp["pcie_width"]))
        pcie += " rx %s/s tx %s/s" % (
            fmt_bytes(gp["pcie_rx_kbs"] * 1024 if gp["pcie_rx_kbs"] is not None else None),
            fmt_bytes(gp["pcie_tx_kbs"] * 1024 if gp["pcie_tx_kbs"] is not None else None))
        xid = gp["xid"]
        reasons = [r for r in (gp["reasons"] or [])]
        throttled = [r for r in reasons if r not in ("gpu_idle", "applications_clocks_setting")]
        second = line(
            "      clocks sm %s / %s MHz  mem %s MHz  %s  " % (
                fmt_num(gp["sm_clock"]), fmt_num(gp["sm_clock_max"]), fmt_num(gp["mem_clock"]), pcie),
            ("xid %s" % fmt_num(xid), "bad" if xid else None),
            ("(+%s in window)" % gp["xid_window"] if gp["xid_window"] else "", "bad"),
            "  throttle ",
            (", ".join(reasons) if reasons else ("none" if gp["reasons"] is not None else "-"),
             "warn" if throttled else None))
        lines.append(second)
    return lines


def _engine_section(model, width, g):
    e = model.engine
    if not e:
        sc = model.engine_scrape
        if sc and not sc["up"]:  # where it looks, and what it got (a wrong --metrics-port shows here)
            return [line((" ENGINE ", "head"), ("no engine metrics from %s: " % sc["url"], "warn"),
                          (sc["reason"] or "no answer yet", "dim"))]
        return [line((" ENGINE ", "head"), ("no engine metrics (no inference engine's Prometheus metrics in /signals)",
                                             "dim"))]
    spark_w = max(8, min(24, width - 130)) if width else 16
    head = " ENGINE " + (e.get("name") + " " if e.get("name") else "")
    ws = e.get("window_seconds")
    first = line((head, "head"), "running %s  waiting %s  kv-cache %s  tokens/s%s prompt %s gen %s " % (
        fmt_num(e.get("running")), fmt_num(e.get("waiting")), fmt_pct(e.get("kv_percent"), 1),
        (" (last %ss)" % fmt_num(round(ws, 1))) if ws else "", fmt_count(e.get("prompt_tps")),
        fmt_count(e.get("gen_tps"))),
        (sparkline(model.engine_tokens_hist, spark_w, g), "bar"))
    parts = []
    for concept, label in (("ttft", "TTFT"), ("itl", "inter-token"), ("tpot", "TPOT"), ("e2e", "end-to-end")):
        p50, p95, windowed = e.get(concept + "_p50"), e.get(concept + "_p95"), e.get(concept + "_windowed")
        if concept == "tpot" and p50 is None and p95 is None and \
                (e.get("itl_p50") is not None or e.get("itl_mean") is not None):
            continue  # per-request TPOT adds little next to a measured inter-token latency
        if concept == "itl" and p50 is None and p95 is None and e.get("itl_mean") is not None:
            parts.append("%s mean %s" % (label, fmt_s(e["itl_mean"])))  # llama.cpp: no quantiles
            continue
        parts.append("%s p50 %s p95 %s%s" % (label, fmt_s(p50), fmt_s(p95),
                                             " (since start)" if windowed is False else ""))
    extra = []
    if e.get("prompt_s_per_token") is not None:
        extra.append("prompt %s/token" % fmt_s(e["prompt_s_per_token"]))
    if e.get("busy_slots") is not None:
        extra.append("busy slots/decode %s" % fmt_num(round(e["busy_slots"], 2), 2))
    if e.get("decode_tps_request") is not None:
        extra.append("decode %s tokens/s per request" % fmt_count(round(e["decode_tps_request"])))
    second = line("   " + "   ".join(parts + extra))
    return [first, second]


def _value_fmt(name):
    if name.endswith("_nanoseconds"):
        return fmt_ns
    if name.endswith("_seconds"):
        return fmt_s
    if name.endswith("_bytes"):
        return fmt_bytes
    return lambda v: fmt_count(v) if v is not None else "-"


def _probe_line(p, g):
    name, st, w = p["name"], p["stats"], p["window"] or {}
    tags = {k: v for k, v in p["tags"].items() if k not in ("process.pid",)}
    label = name + ("{%s}" % ",".join("%s=%s" % kv for kv in sorted(tags.items())) if tags else "")
    if p["tags"].get("process.pid"):
        label += " pid " + p["tags"]["process.pid"]
    vf = _value_fmt(name)
    t = p["type"]
    if t == "histogram":
        text = "count %s (%s/s)  p50 %s  p95 %s  window p50 %s p95 %s" % (
            fmt_count(st.get("count")), fmt_count(w.get("rate")), vf(st.get("p50")), vf(st.get("p95")),
            vf(w.get("p50")), vf(w.get("p95")))
    elif t == "counter":
        text = "total %s  rate %s/s" % (vf(st.get("total")), vf(w.get("rate")))
    elif t == "gauge":
        # with a window, its value: the one at the tick its min and max end on (the live value is
        # newer and may lie outside them)
        text = "value %s" % vf(w.get("value") if "value" in w else st.get("value"))
        if w.get("min") is not None:
            text += "  window min %s max %s" % (vf(w.get("min")), vf(w.get("max")))
    elif t == "profile":
        frames = (w.get("frames") if w.get("frames") else st.get("frames")) or []
        tot = sum(f.get("value") or 0 for f in frames) or 1
        text = "top " + ", ".join("%s %d%%" % (f["name"], round(100.0 * (f.get("value") or 0) / tot))
                                  for f in frames[:4]) if frames else "no frames"
    else:
        text = ""
    return line("   ", ("%-48s " % clip(label, 48, g), None), (text, None))


def _probes_section(model, once, g):
    if not model.probes:
        return [line((" PROBES ", "head"), ("no probe metrics", "dim"))]
    limit = len(model.probes) if once else 4
    lines = [line((" PROBES ", "head"), ("%d series" % len(model.probes), "dim"))]
    for p in model.probes[:limit]:
        lines.append(_probe_line(p, g))
    if len(model.probes) > limit:
        lines.append(line(("   ... %d more (graphsignal-top --once lists all)" % (len(model.probes) - limit), "dim")))
    return lines


def _nvtx_section(model, once, g):
    """NVTX ranges as stages: the workload's own annotations, the largest
    in the window first (totals since start when the window is empty)."""
    rows = model.nvtx
    if not rows:
        return []
    limit = min(len(rows), ONCE_ROWS) if once else 4
    gpu = any(r.gpu_total is not None for r in rows)
    windowed = any(r.window_value for r in rows)
    domains = {r.domain for r in rows}
    head = "%d paths%s" % (len(rows), "" if windowed else ", nothing in the window: totals since start")
    cols = "   %10s %9s %10s" + (" %10s" if gpu else "%s") + "  %s"
    lines = [line((" NVTX RANGES ", "head"), (head, "dim")),
             line((cols % ("TIME", "RANGES", "AVG", "GPU" if gpu else "", "NAME"), "dim"))]
    for r in rows[:limit]:
        value, samples = (r.window_value, r.window_samples) if windowed else (r.total_value, r.total_samples)
        gpu_ns = (r.gpu_window if windowed else r.gpu_total) if gpu else None
        name = r.frame if domains == {"default"} else "%s: %s" % (r.domain, r.frame)
        lines.append(line(cols % (fmt_ns(value), fmt_count(samples), fmt_ns(value / samples if samples else None),
                                   fmt_ns(gpu_ns) if gpu else "", clip(name, 200, g))))
    if len(rows) > limit:
        lines.append(line(("   ... %d more (graphsignal-top --once lists %d)" % (len(rows) - limit, ONCE_ROWS),
                            "dim")))
    return lines


def _errors_section(model, once, now, g):
    if not model.errors:
        return [line((" ERRORS ", "head"), ("none", "dim"))]
    lines = [line((" ERRORS ", "head"), ("%d (newest first)" % model.errors_total, "dim"))]
    limit = 10 if once else 2
    for e in model.errors[:limit]:
        ts = e.get("last_ns") or e.get("timestamp_ns")
        when = time.strftime("%H:%M:%S", time.localtime(ts / 1e9)) if ts else "--:--:--"
        level = e.get("level") or "?"
        cnt = e.get("count") or 1
        msg = (e.get("message") or "").replace("\n", " ")
        resolved = e.get("resolved_ns")
        if resolved:
            # the condition has cleared (e.g. the engine's endpoint answers again): history, not news
            lines.append(line(("   %s %-7s %s%s (resolved %s)" % (
                when, level, msg, " (x%d)" % cnt if cnt > 1 else "",
                time.strftime("%H:%M:%S", time.localtime(resolved / 1e9))), "dim")))
            continue
        lines.append(line("   %s " % when, ("%-7s" % level, "bad" if level in ("error", "critical") else "warn"),
                           " " + msg + (" (x%d)" % cnt if cnt > 1 else "")))
    return lines


# -- the table --------------------------------------------------------------------------
def _tabs(model, ui):
    segs = [(" ", None)]
    for kind in TABLES:
        label = "[%s]%s" % (TABLE_KEYS[kind], TABLE_LABELS[kind][1:] if TABLE_LABELS[kind][0] == TABLE_KEYS[kind]
                            else " " + TABLE_LABELS[kind])
        segs.append((label, "sel" if kind == ui.table else "key"))
        segs.append(("  ", None))
    w = model.window
    if w and w.get("covered_seconds") is not None:
        segs.append(("last %.1f s" % w["covered_seconds"], "dim"))
    else:
        segs.append(("totals since start (no window from the endpoint)", "dim"))
    if model.trace_mode == "off":
        segs.append(("   cuda trace: off", "dim"))
    elif model.trace_mode == "light":
        segs.append(("   cuda trace: light (counts exact, graph time sampled, no kernel time)", "dim"))
    elif model.trace_mode:
        segs.append(("   cuda graph trace: %s" % model.trace_mode, "dim"))
    return segs


WHO_WIDTH = 8


def _columns(kind, who=None):
    # (header, width) ; the name column takes the rest
    # window columns first (share, busy time per second, calls per second,
    # average), then totals since start; with several processes, whose
    # row it is (PID or RANK) right before the name
    if kind == MEMORY:
        cols = [("%TIME", 6), ("TIME/S", 10), ("COPIES/S", 9), ("AVG", 10), ("BYTES/S", 11), ("TOTAL", 10),
                ("BYTES", 10)]
    else:
        calls = "REPLAYS" if kind == GRAPHS else "CALLS"
        cols = [("%TIME", 6), ("TIME/S", 10), (calls + "/S", 10), ("AVG", 10), ("TOTAL", 10), (calls, 9)]
        if kind == KERNELS:
            cols.append(("CATEGORY", 13))
    if who:
        cols.append((who, WHO_WIDTH))
    return cols


def _row_cells(kind, r, table, covered):
    share = (100.0 * r.window_value / table.window_value) if table.window_value else None
    rate = (r.window_value / covered) if covered else None
    avg = (r.window_value / r.window_samples) if r.window_samples else (
        (r.total_value / r.total_samples) if r.total_samples else None)
    calls = (r.window_samples / covered) if covered else None
    if table.untimed:  # counted, not timed (--cuda-trace light)
        share = rate = avg = None
    total = "-" if table.untimed else fmt_ns(r.total_value)
    cells = [fmt_pct(share, 1) if share is not None else "-", fmt_ns(rate) if rate is not None else "-",
             fmt_count(round(calls, 1)) if calls is not None else "-", fmt_ns(avg) if avg is not None else "-"]
    if kind == MEMORY:
        bps = (r.window_bytes / covered) if (covered and r.window_bytes is not None) else None
        cells += [fmt_bytes(bps), total, fmt_bytes(r.total_bytes)]
    else:
        cells += [total, fmt_count(r.total_samples)]
        if kind == KERNELS:
            cells.append(r.category)
    if table.who:
        cells.append(who_cell(r, table.who, WHO_WIDTH))
    return cells


_EMPTY = {
    KERNELS: "no CUDA kernel profile (no CUPTI data: not a CUDA workload, or the injection is off)",
    GRAPHS: "no CUDA graph profile (no CUPTI data)",
    MEMORY: "no memory transfer profile (no CUPTI data)",
    SYNC: "no synchronization profile (no CUPTI data)",
}
_NONE_YET = {
    KERNELS: "no kernels launched yet", GRAPHS: "no CUDA graph replays yet", MEMORY: "no memory transfers yet",
    SYNC: "no host synchronization yet",
}


def _table_lines(model, ui, width, max_rows, g):
    """(header lines, row lines, index of the first row line shown)."""
    t = model.tables[ui.table]
    covered = (model.window or {}).get("covered_seconds")
    all_cols = _columns(ui.table, t.who)
    keep = list(range(len(all_cols)))
    if width:
        # a narrow terminal gives up totals first, then the average: the
        # name, whose it is and what happened in the window matter most
        drop_order = [i for i, (h, _) in enumerate(all_cols) if h in ("TOTAL", "CALLS", "REPLAYS", "BYTES")]
        drop_order += [i for i, (h, _) in enumerate(all_cols) if h in ("AVG", "CATEGORY")]
        while drop_order and width - sum(all_cols[i][1] + 1 for i in keep) - 2 < 30:
            keep.remove(drop_order.pop(0))
    cols = [all_cols[i] for i in keep]
    head = " " + " ".join(("%*s" % (w, h)) if h != "CATEGORY" else ("%-*s" % (w, h)) for h, w in cols) + " NAME"
    header = [_tabs(model, ui), line((head, "head"))]
    if ui.table == GRAPHS and model.trace_mode == "node":
        header.append(line(("   node mode: kernels inside graphs are timed one by one in the kernel table", "dim")))
    if not t.rows:
        empty = (_NONE_YET if t.measured else _EMPTY)[ui.table]
        if model.trace_mode == "off":
            empty = "CUDA tracing is off (--cuda-trace off): no CUDA activity is collected"
        header.append(line(("   " + empty, "dim")))
        return header, []
    if t.measured and not t.window_value and model.window and not t.untimed:
        header.append(line(("   nothing in the last %s s; sorted by totals since start"
                             % fmt_num((model.window or {}).get("seconds")), "dim")))
    rows = []
    for i, r in enumerate(t.rows):
        cells = _row_cells(ui.table, r, t, covered)
        cells = [cells[i] for i in keep]
        text = " " + " ".join(("%*s" % (w, c)) if h != "CATEGORY" else ("%-*s" % (w, c))
                              for (h, w), c in zip(cols, cells)) + " " + r.short
        style = "sel" if (i == ui.selected and max_rows is not None) else None
        if style is None and ui.table == KERNELS:
            rows.append([(text[:len(text) - len(r.short)], None), (r.short, CATEGORY_STYLE.get(r.category))])
        else:
            rows.append([(text, style)])
    return header, rows


def _details(model, ui, width, g):
    t = model.tables[ui.table]
    if not t.rows:
        return [line((" DETAILS ", "head"), ("nothing selected", "dim"))]
    r = t.rows[min(ui.selected, len(t.rows) - 1)]
    covered = (model.window or {}).get("covered_seconds")
    lines = [line((" DETAILS ", "head"), (" %s " % TABLE_LABELS[ui.table], "sel"), "  ", (r.short, "head"),
                   ("   (Enter or Esc: back)", "dim"))]
    if r.category:
        lines.append(line("   category   ", (r.category, CATEGORY_STYLE.get(r.category))))

    def wrapped(label, text):
        room = max(20, (width or 200) - 14)
        out = []
        for i in range(0, max(1, len(text)), room):
            out.append(line(("   %-10s " % (label if i == 0 else ""), None), (text[i:i + room], None)))
        return out

    lines += wrapped("symbol", r.name)
    if r.full and r.full != r.name:
        lines += wrapped("demangled", r.full)
    rate = (r.window_value / covered) if covered else None
    lines.append(line("   last %s s  time %s (%s/s)  calls %s  avg %s%s" % (
        fmt_num(round(covered, 1)) if covered else "-", fmt_ns(r.window_value), fmt_ns(rate),
        fmt_count(r.window_samples), fmt_ns(r.window_value / r.window_samples if r.window_samples else None),
        ("  bytes %s" % fmt_bytes(r.window_bytes)) if r.window_bytes is not None else "")))
    lines.append(line("   since start  time %s  calls %s  avg %s%s" % (
        fmt_ns(r.total_value), fmt_count(r.total_samples),
        fmt_ns(r.total_value / r.total_samples if r.total_samples else None),
        ("  bytes %s" % fmt_bytes(r.total_bytes)) if r.total_bytes is not None else "")))
    lines.append(line(("   per process", "head")))
    lines.append(line(("     %-28s %12s %9s %12s %10s" % ("PROCESS", "TIME (WIN)", "CALLS", "TIME (ALL)", "CALLS"),
                        "dim")))
    for p in r.procs:
        lines.append(line("     %-28s %12s %9s %12s %10s" % (
            clip(p.label, 28, g), fmt_ns(p.window_value), fmt_count(p.window_samples), fmt_ns(p.total_value),
            fmt_count(p.total_samples))))
    return lines


def _footer(model, ui, now, g):
    age = ("refreshed %s ago" % fmt_age(now - model.fetched_at)) if model.fetched_at else "waiting for data"
    keys = "q quit  %s select  Enter details  k/g/m/s tables" % g.up_down
    return line((" " + keys + "   ", "key"), (age, "dim"))


# -- the frame --------------------------------------------------------------------------
def render(model, ui, width=None, height=None, now=None, unicode=True):
    """Lines for one frame. height None: the whole page (--once), table
    cut at ONCE_ROWS; otherwise exactly fits width x height, dropping the
    least important sections first when the terminal is small."""
    g = Glyphs(unicode)
    now = time.time() if now is None else now
    once = height is None
    W = width or 160
    sections = [  # (priority: higher goes first when space is short, lines)
        (0, _title(model, ui, now, g, once)),
        (1, findings_view.section(model, once, line)),
        (2, _host_section(model, once, g)),
        (1, _gpu_section(model, W, g)),
        (1, _engine_section(model, W, g)),
        (4, _probes_section(model, once, g)),
        (4, _nvtx_section(model, once, g)),
        (3, _errors_section(model, once, now, g)),
    ]
    if once:
        top = [ln for _, lines in sections for ln in lines]
        if ui.details:
            body = _details(model, ui, W, g)
        else:
            header, rows = _table_lines(model, ui, W, None, g)
            body = header + rows[:ONCE_ROWS]
            if len(rows) > ONCE_ROWS:
                body.append(line(("   ... %d more rows" % (len(rows) - ONCE_ROWS), "dim")))
        out = top + body
        return [fit(ln, W, g) for ln in out] if width else out
    # interactive: fit the screen
    footer = _footer(model, ui, now, g)
    n_rows = len(model.tables[ui.table].rows)
    min_table = 2 + max(2, min(8, n_rows))  # tabs, column header and a few rows before any top section
    budget = max(1, height - 1 - min_table)
    while sum(len(lines) for _, lines in sections) > budget and len(sections) > 1:
        worst = max(range(1, len(sections)), key=lambda i: sections[i][0])
        pr, lines = sections[worst]
        if len(lines) > 1:
            sections[worst] = (pr, lines[:-1])  # first shorten, then drop
        else:
            sections.pop(worst)
    top = [ln for _, lines in sections for ln in lines][:max(0, height - 1)]
    room = height - 1 - len(top)
    if ui.details:
        body = _details(model, ui, W, g)[:max(0, room)]
    else:
        header, rows = _table_lines(model, ui, W, room, g)
        header = header[:max(0, room)]
        n = max(0, room - len(header))
        if ui.selected < ui.offset:
            ui.offset = ui.selected
        elif n and ui.selected >= ui.offset + n:
            ui.offset = ui.selected - n + 1
        ui.offset = max(0, min(ui.offset, max(0, len(rows) - n)))
        body = header + rows[ui.offset:ui.offset + n]
    out = top + body
    out += [[]] * max(0, height - 1 - len(out))
    out.append(footer)
    return [fit(ln, W, g) for ln in out[:height]]
