"""What the rules read: one /signals document (graphsignal.signals_model.Signals)
as the few sums and shares every rule family needs, over one span.

The span is the window when the document has one (a ?window=N read: what
is happening now), else the run since the workload's launch (to ended_ns
for a finished run's file, to payload_ns for a live one). A window's
series are read in the cumulative shape: a counter's `delta` as its total,
a profile's window frames as its frames, a gauge's value with the
window's mean and max. A cumulative document's gauges have only their last
reading, unless the document has a `history` block (the file --output
writes), whose per-second points then give the mean and max.

Nothing here raises on a document that lacks something: a missing series
is None or 0, and a rule that needs it does not fire.
"""
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from graphsignal.signals_model import (Finding, FindingChange, FindingConfirm, FindingEvidence, FindingImpact,
                                       Signals)

KERNELS = "cuda_kernels_nanoseconds"
KERNEL_LAUNCHES = "cuda_kernel_launches"  # --cuda-trace light: launches counted per kernel, not timed
GRAPHS = "cuda_graphs_nanoseconds"
MEMCPY = "cuda_memcpy_nanoseconds"
MEMCPY_CALLS = "cuda_memcpy_calls"  # --cuda-trace light: copies counted per kind, not timed
MEMCPY_BYTES = "cuda_memcpy_bytes"
MEMSET = "cuda_memset_nanoseconds"
MEMSET_BYTES = "cuda_memset_bytes"
MEMSET_CALLS = "cuda_memset_calls"  # --cuda-trace light: memsets counted, not timed
SYNC = "cuda_sync_nanoseconds"
CAPTURES = "cuda_graph_captures"
TRACE_MODE = "cuda_graph_trace_mode"
GPU_BUSY = "gpu_busy_time_nanoseconds"
CPU_TIME = "process_cpu_time_nanoseconds"
NS = 1e9


def evidence(series: str, stat: str, value: Optional[float], op: str = "", threshold: Optional[float] = None,
             unit: str = "", tags: Optional[Mapping[str, str]] = None) -> FindingEvidence:
    """One evidence entry (graphsignal.signals_model.FindingEvidence)."""
    v = None if value is None else float(round(value, 6))
    t = None if threshold is None else float(threshold)
    return {"series": series, "tags": dict(tags or {}), "stat": stat, "value": v, "op": op,  # type: ignore[typeddict-item]
            "threshold": t, "unit": unit}


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return float(v)


class Series:
    """One series in the cumulative shape: name, type, tags, and by type
    total (counter), value/mean/max (gauge), frames [(name, value,
    samples, category, display_name)] (profile)."""

    __slots__ = ("name", "type", "tags", "total", "value", "mean", "max", "frames")

    def __init__(self, name: str, type_: str, tags: Mapping[str, str]) -> None:
        self.name, self.type, self.tags = name, type_, dict(tags)
        self.total: Optional[float] = None
        self.value: Optional[float] = None
        self.mean: Optional[float] = None
        self.max: Optional[float] = None
        self.frames: List[Tuple[str, float, float, str, str]] = []

    def time(self) -> float:
        return sum(f[1] for f in self.frames)

    def samples(self) -> float:
        return sum(f[2] for f in self.frames)


def _frames(stats: Mapping[str, Any]) -> List[Tuple[str, float, float, str, str]]:
    """A profile's frames as tuples; a frame without a name or numbers is
    left out. One pass, no call per field: a payload may carry 250 frames
    for each of many processes, and /signals computes this on every read."""
    out: List[Tuple[str, float, float, str, str]] = []
    frames = stats.get("frames")
    if not isinstance(frames, list):
        return out
    for f in frames:
        try:
            name = f["name"]
            out.append((name, float(f["value"]), float(f["samples"]), f.get("category") or "",
                        f.get("display_name") or name))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return out


def _series(m: Any, windowed: bool) -> Optional[Series]:
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not isinstance(m.get("stats"), dict):
        return None
    tags: Dict[str, Any] = m["tags"] if isinstance(m.get("tags"), dict) else {}
    s = Series(m["name"], str(m.get("type")), {str(k): str(v) for k, v in tags.items()})
    st = m["stats"]
    if s.type == "counter":
        s.total = _num(st.get("delta" if windowed else "total"))
    elif s.type == "gauge":
        s.value = _num(st.get("value"))
        s.mean = _num(st.get("mean")) if windowed else s.value
        s.max = _num(st.get("max")) if windowed else s.value
    elif s.type == "profile":
        s.frames = _frames(st)
    return s


class Facts:
    """A document read for the rules (see the module doc)."""

    def __init__(self, doc: Signals) -> None:
        window = doc.get("window") if isinstance(doc, dict) else None
        self.windowed = isinstance(window, dict) and isinstance(window.get("metrics"), list)
        raw = window["metrics"] if self.windowed and window is not None else doc.get("metrics") or []
        self.series: List[Series] = [s for s in (_series(m, self.windowed) for m in raw) if s is not None]
        self.by_name: Dict[str, List[Series]] = {}
        for s in self.series:
            self.by_name.setdefault(s.name, []).append(s)
        engine = doc.get("engine")
        self.engine: Dict[str, Any] = engine if isinstance(engine, dict) else {}
        self.engine_name: Optional[str] = self.engine.get("engine") if isinstance(self.engine.get("engine"), str) \
            else None
        if self.windowed and window is not None:
            self.seconds = _num(window.get("covered_seconds")) or 0.0
            w_engine = window.get("engine")
            self.work = w_engine.get("work_per_token") if isinstance(w_engine, dict) else None
            self.tokens = _num(w_engine.get("generation_tokens")) if isinstance(w_engine, dict) else None
        else:
            start, end = _num(doc.get("start_ns")), _num(doc.get("ended_ns")) or _num(doc.get("payload_ns"))
            self.seconds = (end - start) / NS if start is not None and end is not None and end > start else 0.0
            self.work = self.engine.get("work_per_token")
            self.tokens = _num(self.engine.get("generation_tokens_total"))
        if not isinstance(self.work, dict):
            self.work = None
        self.span = "window" if self.windowed else "run"
        self.errors = [e for e in doc.get("errors") or [] if isinstance(e, dict)]
        self.history = doc.get("history") if not self.windowed and isinstance(doc.get("history"), dict) else None
        self.resources = [r for r in doc.get("resources") or [] if isinstance(r, dict)]

    # -- sums ------------------------------------------------------------------------
    def named(self, name: str, where: Optional[Callable[[Mapping[str, str]], bool]] = None) -> List[Series]:
        return [s for s in self.by_name.get(name, []) if where is None or where(s.tags)]

    def has(self, name: str) -> bool:
        return name in self.by_name

    def total(self, name: str, where: Optional[Callable[[Mapping[str, str]], bool]] = None) -> Optional[float]:
        """A counter summed over its series (None: no such series, or none measured)."""
        vals = [s.total for s in self.named(name, where) if s.total is not None]
        return sum(vals) if vals else None

    def profile_time(self, name: str, where: Optional[Callable[[Mapping[str, str]], bool]] = None) -> float:
        return sum(s.time() for s in self.named(name, where))

    def profile_samples(self, name: str, where: Optional[Callable[[Mapping[str, str]], bool]] = None) -> float:
        return sum(s.samples() for s in self.named(name, where))

    def frames(self, name: str, where: Optional[Callable[[Mapping[str, str]], bool]] = None
               ) -> Dict[str, List[float]]:
        """{frame: [value, samples]} summed over the profile's series."""
        out: Dict[str, List[float]] = {}
        for s in self.named(name, where):
            for fname, value, samples, _, _ in s.frames:
                acc = out.setdefault(fname, [0.0, 0.0])
                acc[0] += value
                acc[1] += samples
        return out

    def kernel_frames(self, counted: bool = False) -> List[Tuple[str, float, float, str, str]]:
        """The eager kernels' frames; counted: --cuda-trace light's launch
        counts stand in where no kernel was timed (value = launches)."""
        timed = [f for s in self.named(KERNELS) for f in s.frames]
        if timed or not counted:
            return timed
        return [f for s in self.named(KERNEL_LAUNCHES) for f in s.frames]

    def gauge(self, name: str) -> Tuple[Optional[float], Optional[float], Optional[float]]:
        """(last, mean, max) of a gauge summed over its series; mean and max
        from the window or the history block where there is one."""
        ss = self.named(name)
        if not ss:
            return None, None, None
        last = _sum(s.value for s in ss)
        if self.windowed:
            return last, _sum(s.mean for s in ss), _sum(s.max for s in ss)
        points = self.history_values(name)
        if points:
            return last, sum(points) / len(points), max(points)
        return last, last, last

    def history_values(self, name: str) -> List[float]:
        """A gauge's per-second values in the history block, summed over its
        series per point (points where none was measured left out)."""
        if not self.history:
            return []
        per: Dict[int, float] = {}
        for hs in self.history.get("series") or []:
            if not isinstance(hs, dict) or hs.get("name") != name or not isinstance(hs.get("values"), list):
                continue
            for i, v in enumerate(hs["values"]):
                n = _num(v)
                if n is not None:
                    per[i] = per.get(i, 0.0) + n
        return [per[i] for i in sorted(per)]

    def history_pairs(self, a: str, b: str) -> List[Tuple[float, float]]:
        """(a, b) per history point where both were measured."""
        if not self.history:
            return []
        out: Dict[str, Dict[int, float]] = {a: {}, b: {}}
        for hs in self.history.get("series") or []:
            if isinstance(hs, dict) and hs.get("name") in out and isinstance(hs.get("values"), list):
                for i, v in enumerate(hs["values"]):
                    n = _num(v)
                    if n is not None:
                        out[hs["name"]][i] = out[hs["name"]].get(i, 0.0) + n
        return [(out[a][i], out[b][i]) for i in sorted(out[a]) if i in out[b]]

    # -- what most rules need ----------------------------------------------------------
    def graph_mode(self) -> bool:
        """True unless the run traced graphs per node (cuda_graph_trace_mode 1):
        then kernels inside graphs are in the kernel profile too."""
        modes = [s.value for s in self.named(TRACE_MODE) if s.value is not None]
        return not any(m >= 1 for m in modes)

    def gpu_busy_share(self) -> Optional[float]:
        """The GPUs' busy time over the span, as a fraction of one GPU
        (the busiest GPU's), None without GPU telemetry."""
        if self.seconds <= 0:
            return None
        per = [s.total for s in self.named(GPU_BUSY) if s.total is not None]
        return max(per) / NS / self.seconds if per else None

    def cpu_cores(self) -> Optional[float]:
        """The workload's CPU (the process tree, else the processes summed) in cores over the span."""
        if self.seconds <= 0:
            return None
        tree = self.total(CPU_TIME, lambda t: t.get("scope") == "process_tree")
        if tree is None:
            tree = self.total(CPU_TIME, lambda t: "process.pid" in t)
        return None if tree is None else tree / NS / self.seconds

    def gpu_time(self) -> float:
        """GPU time of kernels, graph replays, copies and memsets (ns)."""
        return sum(self.profile_time(n) for n in (KERNELS, GRAPHS, MEMCPY, MEMSET))

    def launches(self) -> Tuple[float, float]:
        """(eager kernel launches, graph replays) over the span: timed by CUPTI
        or counted by --cuda-trace light (one of the two is in a payload)."""
        return self.profile_samples(KERNELS) + self.profile_samples(KERNEL_LAUNCHES), self.profile_samples(GRAPHS)

    def timed_or_counted(self, timed: str, counted: str) -> str:
        """The series to read: CUPTI's timed profile, or --cuda-trace light's
        count profile (value = calls, no time) where only that is here."""
        return counted if self.has(counted) and not self.has(timed) else timed

    def launch_series(self) -> str:
        """The series the eager launches come from (for evidence)."""
        return self.timed_or_counted(KERNELS, KERNEL_LAUNCHES)

    def captures(self) -> float:
        return self.total(CAPTURES) or 0.0

    def steps(self) -> float:
        """The workload's steps over the span, as the GPU work shows them: the
        most frequent kernel or graph (a loop launches it once a step)."""
        counts = [f[2] for n in (KERNELS, KERNEL_LAUNCHES, GRAPHS) for s in self.named(n) for f in s.frames]
        return max(counts) if counts else 0.0

    def engine_counter(self, name: str) -> Optional[float]:
        return self.total(name)

    def share(self, ns: float) -> float:
        """ns as a fraction of the span."""
        return ns / NS / self.seconds if self.seconds > 0 else 0.0


def _sum(values: Iterable[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def finding(f: Facts, id_: str, family: str, title: str, evidence_: List[FindingEvidence], of: str, share: float,
            how: str, confidence: str, change: List[Tuple[str, str]], confirm: List[Tuple[Any, ...]]) -> Finding:
    """A Finding (graphsignal.signals_model.Finding) over f's span. change:
    [(target, text)]; confirm: [(series, direction)] or [(series, direction, tags)]."""
    impact: FindingImpact = {"of": of, "share": float(round(min(max(share, 0.0), 1.0), 4)),  # type: ignore[typeddict-item]
                             "text": how}
    changes: List[FindingChange] = [{"target": t, "text": x} for t, x in change]
    confirms: List[FindingConfirm] = [{"series": c[0], "tags": dict(c[2]) if len(c) > 2 else {},
                                       "direction": c[1]} for c in confirm]
    return {"id": id_, "family": family, "title": title, "span": f.span,  # type: ignore[typeddict-item]
            "span_seconds": float(round(f.seconds, 3)), "evidence": evidence_, "impact": impact,
            "confidence": confidence,  # type: ignore[typeddict-item]
            "change": changes, "confirm": confirms}
