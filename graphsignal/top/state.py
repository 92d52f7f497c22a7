"""The view model of graphsignal-top: one /signals payload (with its
window) turned into the sections the screen shows, plus the little history
the screen keeps itself (utilization and token throughput over time).

Everything here is plain data built by TopState.update() on the snapshot
thread; render.py only reads the latest Model, so drawing never waits on
the network, the demangler or the payload's size. The four tables
(kernels, graphs, memory, sync) are built by tables.py.
"""
import collections
import time
from typing import Any, Callable, DefaultDict, Deque, Dict, List, Mapping, Optional, Set, Tuple

from graphsignal import naming
from graphsignal.top import findings_view
from graphsignal.naming import Names
from graphsignal.top.tables import TABLES, Series, Sums, Table, TKey, build_table, stat, tkey

ByName = Mapping[str, List[Series]]
ByKey = Mapping[Tuple[str, TKey], Series]
Payload = Dict[str, Any]

# built-in families that also carry a process.pid tag (NVTX ranges have a section of their own)
_NOT_PROBES = ("gpu_", "cuda_", "rocm_", "process_", "host_", "graphsignal_", "nvtx_")
NVTX_HOST, NVTX_GPU = "nvtx_ranges_nanoseconds", "nvtx_range_gpu_nanoseconds"

# NVML clock event reasons (nvmlClocksEventReason*), for payloads that
# carry only the bitmask
THROTTLE_BITS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)

HISTORY = 240  # samples of utilization / throughput kept for sparklines (one a refresh)


class Model:
    """What one frame shows. `ok` is False while the endpoint is
    unreachable; the last good data stays (with its age) under the error."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.ok = False
        self.error: Optional[str] = None
        self.fetched_at: Optional[float] = None  # time.time() of the data shown
        self.attempt_at: Optional[float] = None
        self.context: Dict[str, Any] = {}
        self.version: Optional[str] = None
        self.uptime_s: Optional[float] = None
        self.window: Optional[Dict[str, Any]] = None  # {"seconds", "covered_seconds", "partial"} or None
        self.window_asked: Optional[int] = None
        self.window_note: Optional[str] = None
        self.host: Dict[str, Any] = {}
        self.processes: List[Dict[str, Any]] = []
        self.gpus: List[Dict[str, Any]] = []
        self.engine: Optional[Dict[str, Any]] = None
        # {"url", "up", "reason"}: where the engine's metrics are read, and why not
        self.engine_scrape: Optional[Dict[str, Any]] = None
        self.engine_tokens_hist: List[Any] = []
        self.probes: List[Dict[str, Any]] = []
        self.nvtx: List[NvtxRow] = []  # the largest in the window first
        self.errors: List[Dict[str, Any]] = []
        self.errors_total = 0
        self.tables = {t: Table(t) for t in TABLES}
        self.trace_mode: Optional[str] = None
        self.findings: List[Dict[str, Any]] = []  # the payload's (graphsignal.top.findings_view)
        self.findings_computed = False


# -- small helpers ------------------------------------------------------------------
def _index(metrics: Any) -> Tuple[DefaultDict[str, List[Series]], Dict[Tuple[str, TKey], Series]]:
    by_name: DefaultDict[str, List[Series]] = collections.defaultdict(list)
    by_key: Dict[Tuple[str, TKey], Series] = {}
    for m in metrics or ():
        by_name[m.get("name")].append(m)
        by_key[(m.get("name"), tkey(m.get("tags")))] = m
    return by_name, by_key


def _engine_from_module(payload: Payload, prev_payload: Optional[Payload] = None) -> Any:
    """The engine summary computed here from the payload's metrics, for a
    sidecar whose payload has no "engine" key (an older version); with the
    previous payload, its window (token rates, recent latency) spans the
    two."""
    try:
        from graphsignal import engine_summary as es
    except ImportError:
        return None
    fn = getattr(es, "summarize", None)
    if not callable(fn):
        return None
    prev, seconds = None, None
    if prev_payload is not None and prev_payload.get("payload_ns") and payload.get("payload_ns"):
        prev = prev_payload.get("metrics") or []
        seconds = (payload["payload_ns"] - prev_payload["payload_ns"]) / 1e9
    try:
        return fn(payload.get("metrics") or [], prev, seconds)
    except Exception:  # a summary is a nicety; the rest of the screen must still draw
        return None


def _num(v: Any) -> Optional[float]:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _latency(summary: Dict[str, Any], window: Any,
             concept: str) -> Tuple[Optional[float], Optional[float], Optional[bool]]:
    """(p50, p95, over the window?) for a latency concept: the window's
    quantiles when requests finished in it, else those since start."""
    key = concept + "_seconds"
    w = (window or {}).get(key) if isinstance(window, dict) else None
    if isinstance(w, dict) and (w.get("count") or 0) > 0 and w.get("p50") is not None:
        return _num(w.get("p50")), _num(w.get("p95")), True
    c = summary.get(key)
    if isinstance(c, dict) and (c.get("count") or 0) > 0:
        return _num(c.get("p50")), _num(c.get("p95")), False
    return None, None, None


def engine_view(summary: Any) -> Optional[Dict[str, Any]]:
    """What the engine block shows, from graphsignal.engine_summary's
    document (see its module doc); None without a summary."""
    if not isinstance(summary, dict) or not summary:
        return None
    window = summary.get("window") if isinstance(summary.get("window"), dict) else None
    v = {"name": summary.get("engine") if isinstance(summary.get("engine"), str) else None,
         "running": _num(summary.get("requests_running")), "waiting": _num(summary.get("requests_waiting")),
         "kv_percent": _num(summary.get("kv_cache_usage_percent")),
         "prompt_tps": _num((window or {}).get("prompt_tokens_per_second")),
         "gen_tps": _num((window or {}).get("generation_tokens_per_second")),
         "window_seconds": _num((window or {}).get("seconds"))}
    for concept in ("ttft", "itl", "tpot", "e2e"):
        p50, p95, windowed = _latency(summary, window, concept)
        v[concept + "_p50"], v[concept + "_p95"], v[concept + "_windowed"] = p50, p95, windowed
    # llama.cpp: a mean inter-token latency without quantiles, and what its counters derive
    # (engine_summary's module doc); the window's value where there is one
    for key, out in (("itl_seconds", "itl_mean"), ("prompt_seconds_per_token", "prompt_s_per_token"),
                     ("busy_slots_per_decode", "busy_slots"),
                     ("decode_tokens_per_second_per_request", "decode_tps_request")):
        w, c = (window or {}).get(key), summary.get(key)
        if key == "itl_seconds":
            w = w.get("mean") if isinstance(w, dict) else None
            c = c.get("mean") if isinstance(c, dict) else None
        v[out] = _num(w) if _num(w) is not None else _num(c)
    return v


class TopState:
    """Builds Models from payloads; keeps the histories sparklines need."""

    def __init__(self, endpoint: str = "", window: Optional[int] = 5, names: Optional[Names] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.endpoint = endpoint
        self.window_seconds = window
        self.names = names or naming.NAMES
        self.clock = clock
        self.util_hist: Dict[Any, Deque[Any]] = {}  # gpu key -> deque of utilization %
        self.tokens_hist: Deque[Any] = collections.deque(maxlen=HISTORY)
        self.prev_payload: Optional[Payload] = None  # for an engine window computed here (older sidecars)
        self.model = Model()
        self.model.endpoint = endpoint
        self.model.window_asked = window

    def update(self, payload: Optional[Payload] = None, error: Optional[str] = None,
               note: Optional[str] = None) -> Model:
        """A new frame from a payload, or the last one marked with `error`."""
        now = self.clock()
        if payload is None:
            prev = self.model
            m = Model()
            m.__dict__.update(prev.__dict__)
            m.ok, m.error, m.attempt_at = False, error or "no data", now
            self.model = m
            return m
        m = build_model(payload, self.names, self.window_seconds, self.util_hist, self.tokens_hist,
                        self.prev_payload)
        self.prev_payload = payload
        m.endpoint = self.endpoint
        m.ok, m.error, m.fetched_at, m.attempt_at = True, None, now, now
        m.window_note = note
        self.model = m
        return m


def build_model(payload: Payload, names: Names, window_seconds: Optional[int],
                util_hist: Optional[Dict[Any, Deque[Any]]] = None, tokens_hist: Optional[Deque[Any]] = None,
                prev_payload: Optional[Payload] = None) -> Model:
    m = Model()
    m.window_asked = window_seconds
    metrics = payload.get("metrics") or []
    by_name, by_key = _index(metrics)
    win = payload.get("window")
    w_by_key: Dict[Tuple[str, TKey], Series] = {}
    if isinstance(win, dict):
        m.window = {"seconds": win.get("seconds"), "covered_seconds": win.get("covered_seconds"),
                    "partial": win.get("partial")}
        _, w_by_key = _index(win.get("metrics"))
    m.context = payload.get("context") or {}
    m.version = (payload.get("profiler") or {}).get("version")
    if payload.get("payload_ns") and payload.get("start_ns"):
        m.uptime_s = (payload["payload_ns"] - payload["start_ns"]) / 1e9
    resources = payload.get("resources") or []
    _host(m, by_name, resources)
    _processes(m, by_name, resources)
    _gpus(m, by_name, w_by_key, resources, util_hist)
    _engine(m, payload, tokens_hist, prev_payload)
    m.engine_scrape = _engine_scrape(by_name, payload.get("errors") or [])
    _probes(m, metrics, w_by_key)
    m.nvtx = nvtx_rows(by_name, w_by_key)
    m.findings, m.findings_computed = findings_view.of_payload(payload)
    errs = payload.get("errors") or []
    m.errors = list(reversed(errs))  # newest first
    m.errors_total = sum(int(e.get("count") or 1) for e in errs)
    tm = by_name.get("cuda_graph_trace_mode")
    if tm:
        val = stat(tm[0], "value")
        m.trace_mode = {0: "graph", 1: "node"}.get(val)
    ctx = payload.get("context")
    if isinstance(ctx, dict) and ctx.get("cuda.trace") in ("off", "light"):
        # off: the CUDA tables are empty because nothing was collected;
        # light: counted without CUPTI (no kernel time, graph time estimated)
        m.trace_mode = ctx["cuda.trace"]
    for kind in TABLES:
        m.tables[kind] = build_table(kind, by_name, by_key, w_by_key, names)
    return m


def _host(m: Model, by_name: ByName, resources: List[Any]) -> None:
    h: Dict[str, Any] = {}
    for r in resources:
        if r.get("kind") == "host":
            attrs = r.get("attributes") or {}
            h["cpu_count"] = attrs.get("cpu.count")
    for field, name in (("cpu", "host_cpu_usage_percent"), ("cpu_busy", "host_cpu_busy_cores"),
                        ("mem_used", "host_memory_usage_bytes"),
                        ("mem_total", "host_memory_total_bytes")):
        s = by_name.get(name)
        h[field] = stat(s[0], "value") if s else None
    m.host = h


def _processes(m: Model, by_name: ByName, resources: List[Any]) -> None:
    cmd: Dict[str, str] = {}
    for r in resources:
        if r.get("kind") == "process":
            pid = (r.get("tags") or {}).get("process.pid")
            line = (r.get("attributes") or {}).get("process.command_line")
            if pid and line:
                cmd[pid] = line
    procs: Dict[str, Dict[str, Any]] = {}
    for name, field in (("process_cpu_usage_percent", "cpu"), ("process_memory_usage_bytes", "rss")):
        for s in by_name.get(name, ()):
            pid = (s.get("tags") or {}).get("process.pid")
            if pid:
                procs.setdefault(pid, {"pid": pid, "cpu": None, "rss": None, "cmd": cmd.get(pid, "")})[field] = \
                    stat(s, "value")
    m.processes = sorted(procs.values(), key=lambda p: (-(p["cpu"] or 0), int(p["pid"]) if p["pid"].isdigit() else 0))


def _gpu_key(tags: Mapping[str, Any]) -> Any:
    return tags.get("device.uuid") or tags.get("device.bus_id") or tags.get("device.index")


_GPU_GAUGES = {
    "gpu_utilization_percent": "util", "gpu_memory_used_bytes": "mem_used", "gpu_memory_total_bytes": "mem_total",
    "gpu_power_usage_watts": "power", "gpu_power_management_limit_watts": "power_limit",
    "gpu_temperature_celsius": "temp", "gpu_clock_sm_megahertz": "sm_clock",
    "gpu_max_clock_sm_megahertz": "sm_clock_max", "gpu_clock_mem_megahertz": "mem_clock",
    "gpu_pcie_link_generation": "pcie_gen", "gpu_pcie_link_width": "pcie_width",
    "gpu_pcie_throughput_rx_kilobytes_per_second": "pcie_rx_kbs",
    "gpu_pcie_throughput_tx_kilobytes_per_second": "pcie_tx_kbs",
    "gpu_clocks_throttle_reasons": "throttle_mask", "gpu_performance_state": "pstate",
    "gpu_memory_busy_percent": "mem_busy",
}


def _gpus(m: Model, by_name: ByName, w_by_key: ByKey, resources: List[Any],
          util_hist: Optional[Dict[Any, Deque[Any]]]) -> None:
    gpus: Dict[Any, Dict[str, Any]] = {}

    def gpu(tags: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
        k = _gpu_key(tags)
        if k is None:
            return None
        g = gpus.get(k)
        if g is None:
            g = gpus[k] = {"key": k, "index": tags.get("device.index"), "name": None, "xid": None,
                           "xid_window": None, "reasons": None, "util_window": None}
            g.update({f: None for f in _GPU_GAUGES.values()})
        return g

    for name, field in _GPU_GAUGES.items():
        for s in by_name.get(name, ()):
            g = gpu(s.get("tags") or {})
            if g is not None:
                g[field] = stat(s, "value")
                if field == "util":
                    w = w_by_key.get((name, tkey(s.get("tags"))))
                    g["util_window"] = stat(w, "mean")
    for s in by_name.get("gpu_xid_errors", ()):
        g = gpu(s.get("tags") or {})
        if g is not None:
            g["xid"] = stat(s, "total")
            g["xid_window"] = stat(w_by_key.get(("gpu_xid_errors", tkey(s.get("tags")))), "delta")
    for s in by_name.get("gpu_clocks_throttle_reason_active", ()):
        tags = s.get("tags") or {}
        g = gpu(tags)
        if g is not None and tags.get("reason"):
            if g["reasons"] is None:
                g["reasons"] = []
            if stat(s, "value"):
                g["reasons"].append(tags["reason"])
    for r in resources:
        if r.get("kind") == "device":
            g = gpus.get(_gpu_key(r.get("tags") or {}))
            if g is not None:
                g["name"] = (r.get("attributes") or {}).get("device.name")
    out = []
    for g in gpus.values():
        if g["reasons"] is None and isinstance(g["throttle_mask"], (int, float)):
            mask = int(g["throttle_mask"])
            g["reasons"] = [n for bit, n in THROTTLE_BITS if mask & bit]
        if util_hist is not None:
            h = util_hist.setdefault(g["key"], collections.deque(maxlen=HISTORY))
            h.append(g["util"])
            g["util_hist"] = list(h)
        else:
            g["util_hist"] = [g["util"]]
        out.append(g)

    def order(g: Dict[str, Any]) -> Tuple[int, Any]:
        idx = g["index"]
        return (0, int(idx)) if idx is not None and str(idx).isdigit() else (1, str(g["key"]))
    m.gpus = sorted(out, key=order)


def _engine(m: Model, payload: Payload, tokens_hist: Optional[Deque[Any]],
            prev_payload: Optional[Payload] = None) -> None:
    if "engine" in payload:
        summary = payload["engine"]  # null: the sidecar found no engine metrics
    else:
        summary = _engine_from_module(payload, prev_payload)
    v = engine_view(summary)
    if v is not None and tokens_hist is not None:
        tokens_hist.append(v.get("gen_tps"))
        m.engine_tokens_hist = list(tokens_hist)
    elif v is not None:
        m.engine_tokens_hist = [v.get("gen_tps")]
    m.engine = v


def _engine_scrape(by_name: ByName, errors: List[Any]) -> Optional[Dict[str, Any]]:
    """The engine's metrics endpoint (prometheus_scrape_up's url tag),
    whether its last scrape worked, and the newest unresolved entry the
    scraper made about it; None without a scrape."""
    for s in by_name.get("prometheus_scrape_up", ()):
        url = (s.get("tags") or {}).get("url")
        if not url:
            continue
        reason = None
        for e in reversed(errors):
            t = e.get("tags") or {}
            if t.get("source") == "prometheus" and t.get("url") == url and e.get("resolved_ns") is None:
                reason = e.get("message")
                break
        return {"url": url, "up": stat(s, "value") == 1, "reason": reason}
    return None


def is_probe_metric(name: Any, tags: Any) -> bool:
    """Probe series come from a process's ring, so the poller tags them
    with its pid; engine (Prometheus) and GPU series have no pid."""
    return bool(name) and "process.pid" in (tags or {}) and not name.startswith(_NOT_PROBES)


def _probes(m: Model, metrics: List[Series], w_by_key: ByKey) -> None:
    rows = []
    for s in metrics:
        name: Any = s.get("name")
        if not is_probe_metric(name, s.get("tags")):
            continue
        w = w_by_key.get((name, tkey(s.get("tags"))))
        rows.append({"name": name, "type": s.get("type"), "tags": s.get("tags") or {}, "stats": s.get("stats") or {},
                     "window": (w or {}).get("stats")})
    m.probes = rows


class NvtxRow(Sums):
    """One NVTX range path of one domain, summed over processes: host time
    and ranges (in the window and since start), and the GPU time of the
    kernels launched inside (--nvtx gpu; None without it)."""

    __slots__ = ("domain", "frame", "gpu_window", "gpu_total", "pids")

    def __init__(self, domain: str, frame: str) -> None:
        Sums.__init__(self)
        self.domain, self.frame = domain, frame
        self.gpu_window: Optional[float] = None
        self.gpu_total: Optional[float] = None
        self.pids: Set[str] = set()


def nvtx_rows(by_name: ByName, w_by_key: ByKey) -> List[NvtxRow]:
    rows: Dict[Tuple[str, str], NvtxRow] = {}
    for metric in (NVTX_HOST, NVTX_GPU):
        for s in by_name.get(metric, ()):
            if s.get("type") != "profile":
                continue
            tags = s.get("tags") or {}
            w = w_by_key.get((metric, tkey(tags)))
            frames = {f["name"]: f for f in (stat(s, "frames") or ())}
            wframes = {f["name"]: f for f in (stat(w, "frames") or ())}
            for name in list(frames) + [n for n in wframes if n not in frames]:
                key = (tags.get("nvtx.domain") or "default", name)
                r = rows.get(key)
                if r is None:
                    r = rows[key] = NvtxRow(*key)
                f, wf = frames.get(name) or {}, wframes.get(name) or {}
                if metric == NVTX_HOST:
                    r.total_value += f.get("value") or 0
                    r.total_samples += f.get("samples") or 0
                    r.window_value += wf.get("value") or 0
                    r.window_samples += wf.get("samples") or 0
                    if tags.get("process.pid"):
                        r.pids.add(tags["process.pid"])
                else:
                    r.gpu_total = (r.gpu_total or 0) + (f.get("value") or 0)
                    r.gpu_window = (r.gpu_window or 0) + (wf.get("value") or 0)
    return sorted(rows.values(), key=lambda r: (-r.window_value, -r.total_value, r.domain, r.frame))
