"""The `history` block: the recent values of a few series, one point per
snapshot, for charts and traces (graphsignal-export's Chrome trace, the
fleet page). The sidecar builds it from its per-second history
(GET /signals?history=N, and the payload --output writes);
graphsignal-server from its per-minute rollups (GET /api/v1/history).
Both give this module cumulative states at a few points in time, in
graphsignal.windowmath's forms; nothing here reads a store or a database.

    {"seconds": N,                         # asked for
     "interval_seconds": 1,                # the nominal spacing of the points (60 on the server)
     "start_ns": ..., "end_ns": ...,       # first and last point (epoch ns)
     "times_ns": [t0, t1, ...],            # every point, oldest first
     "series": [{"name", "type", "tags", "values": [...]},             # gauges, counters
                {"name", "type", "tags", "group", "frames": {g: [...]}},   # profiles
                {"name", "type", "tags", "rates": [...],                   # histograms
                 "quantiles": {"p50": [...], "p95": [...], "p99": [...]}}],
     "series_omitted": 0}                  # selected series beyond MAX_SERIES, left out

Each list has one entry per point (times_ns). A gauge's entry is its
reading at that point; a counter's, and each profile group's, is its
increase per second over the interval that ends at that point (the first
entry is null; a profile group whose total went down counts 0); a
histogram's, its observations per second (`rates`) and the quantiles of
the values observed in that interval (null where none was). null: not
measured then. Profiles are grouped: kernel
time by `category` (graphsignal.naming), NVTX ranges, CUDA graphs, copies
and syncs by `frame` (the MAX_GROUPS largest over the span, the rest in
"(other)"), memsets as one `total`.

The series kept: those SELECTED names (GPU telemetry, process and host
CPU and memory, CUPTI time and bytes, NVTX ranges and marks, and the
engine's token counters and request gauges: graphsignal.engine_summary's
names), and the workload's own (own(): probes, a process's series under
a name the profiler does not define), their profiles grouped by frame.
Bounds: at most MAX_SERIES series, the workload's own at most MAX_OWN of
them (after the profiler's), and the points given (the sidecar keeps
600 s, the server 15 minutes a second, 24 h a minute and 7 days an hour)."""
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from graphsignal import engine_summary, naming, windowmath
from graphsignal.naming.metrics import BY_NAME, PREFIX
from graphsignal.windowmath import COUNTER, GAUGE, HISTOGRAM, NS, PROFILE

MAX_SERIES = 200
MAX_OWN = 100  # of the workload's own series
MAX_GROUPS = 12
OTHER = "(other)"

GAUGES = ("gpu_utilization_percent", "gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_power_usage_watts",
          "gpu_temperature_celsius", "gpu_clock_sm_megahertz", "host_cpu_usage_percent", "host_memory_usage_bytes",
          "process_cpu_usage_percent", "process_memory_usage_bytes")
COUNTERS = ("gpu_busy_time_nanoseconds", "process_cpu_time_nanoseconds", "cuda_memcpy_bytes", "cuda_memset_bytes",
            "nvtx_marks")
# profile -> how its frames are grouped
PROFILES = {"cuda_kernels_nanoseconds": "category", "rocm_kernels_nanoseconds": "category",
            "cuda_graphs_nanoseconds": "frame", "cuda_memcpy_nanoseconds": "frame",
            "cuda_memset_nanoseconds": "total", "cuda_sync_nanoseconds": "frame",
            "nvtx_ranges_nanoseconds": "frame", "nvtx_range_gpu_nanoseconds": "frame"}
ENGINE_GAUGES = tuple(n for c in ("requests_running", "requests_waiting", "kv_cache_usage")
                      for names in engine_summary.NAMES[c].values() for n in names)
ENGINE_COUNTERS = tuple(n for c in ("prompt_tokens", "generation_tokens")
                        for names in engine_summary.NAMES[c].values() for n in names)
SELECTED: Dict[str, str] = {**{n: GAUGE for n in GAUGES + ENGINE_GAUGES},
                            **{n: COUNTER for n in COUNTERS + ENGINE_COUNTERS},
                            **{n: PROFILE for n in PROFILES}}

Tags = Mapping[str, str]
Meta = Tuple[Any, str, str, Tags]  # (key, name, type, tags)


def own(name: str, type_: str, tags: Optional[Tags]) -> bool:
    """Whether a series is the workload's own: a probe's (it carries the
    process.pid of the process that recorded it), under a name the
    profiler's table (graphsignal.naming.metrics) does not define."""
    return (type_ in (GAUGE, COUNTER, HISTOGRAM, PROFILE) and bool(tags) and "process.pid" in tags  # type: ignore
            and name not in BY_NAME and not name.startswith(PREFIX))


def selected(name: str, type_: str, tags: Optional[Tags] = None) -> bool:
    """Whether a series of this name, type and tags goes into the block."""
    return SELECTED.get(name) == type_ or own(name, type_, tags)


def _num(x: Any) -> Optional[float]:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x in (float("inf"), float("-inf")):
        return None
    return x


def _rate(cur_state: Any, prev_state: Any, seconds: float) -> Optional[float]:
    cur, prev = _num(cur_state), _num(prev_state)
    if cur is None or prev is None or seconds <= 0:
        return None
    delta = cur - prev if cur >= prev else cur  # a counter that went down restarted from zero
    return round(delta / seconds, 6)


def _category(frame: str) -> str:
    return naming.describe(frame).category


def _profile_groups(name: str, states: Sequence[Any], seconds: Sequence[float]) -> Dict[str, List[Optional[float]]]:
    """{group: [rate per second at each point]} of one profile's states."""
    how = PROFILES.get(name, "frame")
    n = len(states)
    group_of: Callable[[str], str]
    if how == "category":
        group_of = _category
    elif how == "frame":
        totals: Dict[str, float] = {}
        first = next((s for s in states if s), None) or {}
        last = next((s for s in reversed(states) if s), None) or {}
        for f, pair in last.items():
            v0 = first.get(f, (0, 0))[0] if first is not last else 0
            totals[f] = (_num(pair[0]) or 0) - (_num(v0) or 0)
        top = set(sorted(totals, key=lambda f: (-totals[f], f))[:MAX_GROUPS])

        def group_of(f: str) -> str:
            return f if f in top else OTHER
    else:
        def group_of(f: str) -> str:
            return "total"
    cache: Dict[str, str] = {}
    memo: Dict[int, Dict[str, float]] = {}  # id(state) -> its cumulative total per group

    def totals_of(state: Mapping[str, Any]) -> Dict[str, float]:
        t = memo.get(id(state))
        if t is None:
            t = memo[id(state)] = {}
            for f, pair in state.items():
                v = pair[0]
                if type(v) is not int:  # the common case, checked first: 1M frames cost seconds otherwise
                    v = _num(v)
                    if v is None:
                        continue
                g = cache.get(f)
                if g is None:
                    g = cache[f] = group_of(f)
                t[g] = t.get(g, 0) + v
        return t

    per: List[Optional[Dict[str, float]]] = [None] * n  # each interval's increase per group
    for i in range(1, n):
        cur, prev = states[i], states[i - 1]
        if cur is None or prev is None or seconds[i] <= 0:
            continue
        if cur is prev:  # the history kept the same state: nothing happened
            per[i] = {}
            continue
        tc, tp = totals_of(cur), totals_of(prev)
        # a group whose total went down (a frame left a payload's largest on the server) counts 0
        per[i] = {g: max(0.0, v - tp.get(g, 0)) for g, v in tc.items()}
    groups: Dict[str, List[Optional[float]]] = {}
    for g in sorted({g for sums in per if sums for g in sums}):
        # an interval the profile spans with nothing new in this group is 0, not unknown
        groups[g] = [None if sums is None else round(sums.get(g, 0) / seconds[i], 6) for i, sums in enumerate(per)]
    return dict(sorted(groups.items(), key=lambda kv: -sum(v or 0 for v in kv[1])))


def block(times: Sequence[int], metas: Iterable[Meta], state_at: Callable[[Any, int], Any], seconds: float,
          interval_seconds: float) -> Dict[str, Any]:
    """The history block (see the module doc) over the points `times`
    (epoch ns, ascending): metas are the series to consider, as (key,
    name, type, tags); state_at(key, i) is a series' cumulative state at
    point i (None: none)."""
    times = list(times)
    n = len(times)
    gaps = [0.0] + [(times[i] - times[i - 1]) / NS for i in range(1, n)]
    metas = list(metas)
    ours = sorted((m for m in metas if SELECTED.get(m[1]) == m[2]), key=lambda m: (m[1], sorted(m[3].items())))
    theirs = sorted((m for m in metas if SELECTED.get(m[1]) != m[2] and own(m[1], m[2], m[3])),
                    key=lambda m: (m[1], sorted(m[3].items())))
    chosen = ours[:MAX_SERIES] + theirs[:max(0, min(MAX_OWN, MAX_SERIES - len(ours)))]
    out = []
    for key, name, type_, tags in chosen:
        states = [state_at(key, i) for i in range(n)]
        doc: Dict[str, Any] = {"name": name, "type": type_, "tags": dict(tags)}
        if type_ == GAUGE:
            doc["values"] = [_num(s) for s in states]
        elif type_ == COUNTER:
            doc["values"] = [None] + [_rate(states[i], states[i - 1], gaps[i]) for i in range(1, n)]
        elif type_ == HISTOGRAM:
            doc["rates"], doc["quantiles"] = _histogram_points(states, gaps)
        else:
            doc["group"] = PROFILES.get(name, "frame")
            doc["frames"] = _profile_groups(name, states, gaps)
        out.append(doc)
    return {"seconds": seconds, "interval_seconds": interval_seconds,
            "start_ns": times[0] if times else None, "end_ns": times[-1] if times else None,
            "times_ns": times, "series": out, "series_omitted": len(ours) + len(theirs) - len(chosen)}


def _histogram_state(s: Any) -> Any:
    """A histogram's state in windowmath's form: the sidecar's are; the
    server's rows and payloads give the JSON form (a list)."""
    if isinstance(s, list):
        try:
            return windowmath.load_state(HISTOGRAM, s)
        except (TypeError, ValueError, KeyError, IndexError):
            return None
    return s if isinstance(s, tuple) and len(s) == 3 else None


def _histogram_points(states: Sequence[Any], seconds: Sequence[float]) \
        -> Tuple[List[Optional[float]], Dict[str, List[Optional[float]]]]:
    """(observations per second, {"p50"|"p95"|"p99": [value]}) of each
    interval of one histogram's states."""
    n = len(states)
    rates: List[Optional[float]] = [None] * n
    qs: Dict[str, List[Optional[float]]] = {"p%d" % round(q * 100): [None] * n for q in windowmath.QUANTILES}
    loaded = [_histogram_state(s) for s in states]
    for i in range(1, n):
        cur, prev = loaded[i], loaded[i - 1]
        if cur is None or prev is None or seconds[i] <= 0:
            continue
        w = windowmath.histogram(prev, cur, seconds[i])
        rates[i] = _num(w["rate"])
        for k in qs:
            qs[k][i] = _num(w[k])
    return rates, qs
