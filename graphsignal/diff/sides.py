"""One side of a comparison: a /signals payload reduced to what
graphsignal-diff compares (profiles by frame, counters, histograms, the
engine summary, how each was taken), matched across runs by their tags
without the ones that differ from run to run.

It guards against payloads that are not what they claim: a document
without a metrics list is refused (NotAPayload), and every field is
checked for its type and every number for being finite before it is
used, so a foreign or truncated payload costs the series it spoils, never
the comparison."""
import math
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from graphsignal.config import MAX_TOP_FRAMES  # what a profile lists: its largest frames
from graphsignal.signals_model import OTHER_FRAME

NS = 1_000_000_000
VOLATILE_TAGS = frozenset(("process.pid", "process.root_pid", "device.uuid", "device.bus_id", "duration", "count"))
TRACE_MODES = {0: "graph", 1: "node"}
KINDS = ("profile", "counter", "histogram", "engine")  # the kinds of change, in the order they are listed

TKey = Tuple[Tuple[str, str], ...]  # a series' tags without the volatile ones, sorted
Key = Tuple[str, TKey]  # (metric, TKey): how series of two runs are matched
Payload = Dict[str, Any]


class NotAPayload(ValueError):
    """The document is not a /signals payload; the message says why."""


def tkey(tags: Optional[Mapping[Any, Any]]) -> TKey:
    return tuple(sorted((str(k), str(v)) for k, v in (tags or {}).items() if k not in VOLATILE_TAGS))


def num(v: Any) -> Optional[float]:
    """v when it is a finite number (not a bool), else None."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


class Side:
    """One payload, reduced to what compare() needs."""

    def __init__(self, payload: Any, use_window: bool, label: str = "") -> None:
        if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), list):
            raise NotAPayload("not a /signals payload (no metrics list)")
        self.label = label
        self.payload: Payload = payload
        start, end = num(payload.get("start_ns")), num(payload.get("payload_ns"))
        self.cumulative_seconds = (end - start) / NS if start is not None and end is not None and end > start else 0.0
        self.ended = num(payload.get("ended_ns")) is not None
        win = payload.get("window") if use_window else None
        self.source = "window" if isinstance(win, dict) else "cumulative"
        metrics: List[Any]
        if isinstance(win, dict):
            listed = win.get("metrics")
            metrics = listed if isinstance(listed, list) else []
            self.seconds: float = num(win.get("covered_seconds")) or 0.0
        else:
            metrics = payload["metrics"]
            self.seconds = self.cumulative_seconds
        context = payload.get("context")
        trace = context.get("cuda.trace") if isinstance(context, dict) else None
        self.cuda_trace: str = trace if trace in ("off", "light") else "on"  # how CUDA was collected
        self.trace_mode = _trace_mode(payload["metrics"]) if self.cuda_trace == "on" else None
        self.profiles: Dict[Key, Dict[str, List[float]]] = {}  # (metric, tkey) -> {frame: [value, samples]}
        # profile keys whose series were cut (MAX_TOP_FRAMES frames listed, or an "(other)")
        self.truncated: Set[Key] = set()
        # profile key -> [value, samples] of its "(other)" frame: what a cap folded, a different set of
        # names on each side, so never compared as a frame (it is no kernel that appeared or went away);
        # it still counts in the profile's total (shares) and calls (--per)
        self.folded: Dict[Key, List[float]] = {}
        self.folded_names: Dict[Key, float] = {}  # profile key -> frames_folded: distinct names inside its "(other)"
        self.names: Dict[str, Tuple[str, Any]] = {}  # frame -> (display_name, category) the sidecar sent
        self.counters: Dict[Key, float] = {}  # (metric, tkey) -> total
        self.histograms: Dict[Key, List[Dict[str, Any]]] = {}  # (metric, tkey) -> [series stats]
        self.tags: Dict[Key, Dict[str, str]] = {}  # key -> tags as shown
        # profile key -> {"sampled" (an estimated time), "exact"}: how its frames were timed
        self.sampled: Dict[Key, Set[str]] = {}
        # key -> {"estimated", "exact"}: how its counts (calls, bytes) were taken
        self.counted: Dict[Key, Set[str]] = {}
        # (profile key, frame) -> {"time", "count"}: what of the frame is (partly) estimated
        self.estimated: Dict[Tuple[Key, str], Set[str]] = {}
        self.metrics: List[Dict[str, Any]] = [m for m in metrics if isinstance(m, dict)]
        for m in self.metrics:
            self._add(m)
        self.engine = _engine(payload)

    def _add(self, m: Dict[str, Any]) -> None:
        name, type_, st = m.get("name"), m.get("type"), m.get("stats")
        if not isinstance(name, str) or not isinstance(st, dict):
            return
        got = m.get("tags")
        tags: Dict[Any, Any] = got if isinstance(got, dict) else {}
        key = (name, tkey(tags))
        self.tags.setdefault(key, {k: str(v) for k, v in tags.items() if k not in VOLATILE_TAGS})
        est_time, est_count = tags.get("duration") == "sampled", tags.get("count") == "estimated"
        if type_ == "profile" and st.get("frames"):  # how its time was measured, where it has any
            kinds = self.sampled.setdefault(key, set())
            kinds.add("sampled" if est_time else "exact")
        if type_ in ("profile", "counter") and (st.get("frames") or type_ == "counter"):
            self.counted.setdefault(key, set()).add("estimated" if est_count else "exact")
        if type_ == "profile":
            listed = st.get("frames")
            frames: List[Any] = listed if isinstance(listed, list) else []
            prof = self.profiles.setdefault(key, {})
            folded_names = num(st.get("frames_folded"))
            if len(frames) >= MAX_TOP_FRAMES or folded_names:
                self.truncated.add(key)
            if folded_names:
                self.folded_names[key] = self.folded_names.get(key, 0) + folded_names
            for f in frames:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    continue
                if f["name"] == OTHER_FRAME:
                    acc = self.folded.setdefault(key, [0, 0])
                    acc[0] += num(f.get("value")) or 0
                    acc[1] += num(f.get("samples")) or 0
                    self.truncated.add(key)  # a frame missing here may be inside it
                    continue
                if est_time or est_count:
                    e = self.estimated.setdefault((key, f["name"]), set())
                    e.update(("time",) * est_time + ("count",) * est_count)
                v, s = num(f.get("value")) or 0, num(f.get("samples")) or 0
                acc = prof.setdefault(f["name"], [0, 0])
                acc[0] += v
                acc[1] += s
                if isinstance(f.get("display_name"), str):
                    self.names.setdefault(f["name"], (f["display_name"], f.get("category")))
        elif type_ == "counter":
            total = num(st.get("delta" if self.source == "window" else "total"))
            if total is not None:
                self.counters[key] = self.counters.get(key, 0) + total
        elif type_ == "histogram":
            self.histograms.setdefault(key, []).append(st)

    def count_of(self, name: str) -> Optional[float]:
        """How many of NAME this side did: a counter's total, a histogram's
        count or a profile's calls, summed over its series; None when it
        has no metric of that name."""
        found = False
        n: float = 0  # stays an int while every count is one (the divisors are shown)
        for (metric, _), total in self.counters.items():
            if metric == name:
                found, n = True, n + total
        for (metric, _), series in self.histograms.items():
            if metric == name:
                found, n = True, n + sum(num(s.get("count")) or 0 for s in series)
        for key, frames in self.profiles.items():
            if key[0] == name:
                found, n = True, n + sum(s for _, s in frames.values()) + self.folded.get(key, [0, 0])[1]
        return n if found else None

    def tokens(self) -> Optional[float]:
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
        return num((e or {}).get("generation_tokens_total"))

    def describe(self) -> Dict[str, Any]:
        return {"label": self.label, "source": self.source, "covered_seconds": round(self.seconds, 6),
                "cuda_graph_trace_mode": self.trace_mode, "cuda_trace": self.cuda_trace,
                "ended": self.ended}


def _trace_mode(metrics: List[Any]) -> Optional[str]:
    modes = set()
    for m in metrics:
        if isinstance(m, dict) and m.get("name") == "cuda_graph_trace_mode":
            v = num((m.get("stats") or {}).get("value") if isinstance(m.get("stats"), dict) else None)
            if v is not None:
                modes.add(TRACE_MODES.get(int(v), str(v)))
    if not modes:
        return None
    return modes.pop() if len(modes) == 1 else "mixed"


def _engine(payload: Payload) -> Optional[Dict[str, Any]]:
    if "engine" in payload:
        e: Any = payload["engine"]
        return e if isinstance(e, dict) else None
    try:
        from graphsignal import engine_summary

        return engine_summary.summarize(payload["metrics"])
    except Exception:  # an engine summary of a foreign payload is a nicety
        return None
