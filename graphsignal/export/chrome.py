"""The Chrome trace event format (JSON object form), as Perfetto and
chrome://tracing open it: counter tracks ("C" events) from the payload's
history block (graphsignal.timeline) and instant events ("i") for its
errors, in one track group (pid) per process, per GPU, for the host and
for the engine.

Which series give counter tracks: GPU telemetry (utilization, busy time,
memory, power, temperature, SM clock) on the GPU's group; CUPTI's kernel
time by category, graph, copy, memset and sync time and copy bytes on
the process's group (one track per device: `cuda:N`); NVTX range time
and marks per domain; process CPU and memory; host CPU and memory; the
engine's tokens per second, running and waiting requests and KV-cache
usage. A payload without a history block (a live /signals read without
?history, or one written before it existed) still gives them, as one
value over the run: gauges their last reading, rates their average from
start_ns to payload_ns (`otherData.history` says which).

The workload's own series (probes: graphsignal.timeline.own) are tracks
on their process's group: a gauge its value, a counter its rate, a
histogram its p50/p95/p99 per interval and its observations per second, a
profile its time (or value) per second by frame; durations
(`_nanoseconds`) in milliseconds.

Group names: Perfetto titles a group "<process_name> <pid>" whatever the
name, so a made-up pid shows ("host 200000000"). The host's and the
engine's tracks are therefore on the workload's root process (the
process graphsignal-run started: "python3 4242"), named "host ..." and
"engine ..."; a GPU's group has the GPU's index as its pid ("NVIDIA H200
GPU 0") unless a process of the payload has that pid. Only where there
is no root process, or an index is taken, is a group's pid made up, clear
of real pids (at most 2^22 on Linux): GPU_PID + index, HOST_PID, ENGINE_PID.

Times are microseconds since the payload's start_ns (otherData.start_ns
has the epoch)."""
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import orjson

from graphsignal import __version__, timeline, windowmath
from graphsignal.export.stacks import _device

GPU_PID = 100_000_000
HOST_PID = 200_000_000
ENGINE_PID = 200_000_001
MAX_MESSAGE = 200  # characters of an error's message in its event name

# gauge -> (group, track name, scale)
GAUGES: Dict[str, Tuple[str, str, float]] = {
    "gpu_utilization_percent": ("gpu", "utilization (%)", 1.0),
    "gpu_memory_used_bytes": ("gpu", "memory used (GiB)", 1.0 / (1 << 30)),
    "gpu_memory_total_bytes": ("gpu", "memory total (GiB)", 1.0 / (1 << 30)),
    "gpu_power_usage_watts": ("gpu", "power (W)", 1.0),
    "gpu_temperature_celsius": ("gpu", "temperature (C)", 1.0),
    "gpu_clock_sm_megahertz": ("gpu", "SM clock (MHz)", 1.0),
    "host_cpu_usage_percent": ("host", "host CPU (%)", 1.0),
    "host_memory_usage_bytes": ("host", "host memory used (GiB)", 1.0 / (1 << 30)),
    "process_cpu_usage_percent": ("process", "CPU (%)", 1.0),
    "process_memory_usage_bytes": ("process", "RSS (GiB)", 1.0 / (1 << 30)),
}
# counter (a rate per second) -> (group, track name, scale)
COUNTERS: Dict[str, Tuple[str, str, float]] = {
    "gpu_busy_time_nanoseconds": ("gpu", "busy (%)", 1e-7),
    "process_cpu_time_nanoseconds": ("process", "CPU cores", 1e-9),
    "cuda_memcpy_bytes": ("process", "copies (MB/s)", 1e-6),
    "cuda_memset_bytes": ("process", "memsets (MB/s)", 1e-6),
    "nvtx_marks": ("process", "NVTX marks (/s)", 1.0),
}
# profile -> track name (values: milliseconds of time per second)
PROFILES: Dict[str, str] = {
    "cuda_kernels_nanoseconds": "kernel time by category (ms/s)",
    "rocm_kernels_nanoseconds": "kernel time by category (ms/s)",
    "cuda_graphs_nanoseconds": "CUDA graph time (ms/s)",
    "cuda_memcpy_nanoseconds": "copy time (ms/s)",
    "cuda_memset_nanoseconds": "memset time (ms/s)",
    "cuda_sync_nanoseconds": "host sync time (ms/s)",
    "nvtx_ranges_nanoseconds": "NVTX ranges, host time (ms/s)",
    "nvtx_range_gpu_nanoseconds": "NVTX ranges, GPU time (ms/s)",
}
ENGINE_NAMES = {**{n: "tokens/s, prompt" for n in timeline.ENGINE_COUNTERS if "prompt" in n},
                **{n: "tokens/s, generation" for n in timeline.ENGINE_COUNTERS if "prompt" not in n}}


def history_of(payload: Mapping[str, Any]) -> Tuple[Dict[str, Any], str]:
    """(history block, what it is): the payload's own, or one interval
    from start_ns to payload_ns made from its cumulative metrics."""
    h = payload.get("history")
    if isinstance(h, dict) and isinstance(h.get("times_ns"), list) and isinstance(h.get("series"), list):
        return h, "per-second history of the payload (%d points)" % len(h["times_ns"])
    start, end = payload.get("start_ns"), payload.get("payload_ns")
    metas, last = [], {}
    for i, m in enumerate(payload.get("metrics") or []):
        tags = m.get("tags") if isinstance(m, dict) and isinstance(m.get("tags"), dict) else None
        if not isinstance(m, dict) or not timeline.selected(str(m.get("name")), str(m.get("type")), tags):
            continue
        try:
            last[i] = windowmath.stored_state(m["type"], m.get("stats") or {})
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        metas.append((i, str(m["name"]), str(m["type"]), m.get("tags") or {}))
    zero: Dict[str, Any] = {windowmath.GAUGE: None, windowmath.COUNTER: 0, windowmath.PROFILE: {},
                            windowmath.HISTOGRAM: [0, 0, None]}
    types = {key: type_ for key, _, type_, _ in metas}
    if isinstance(start, int) and isinstance(end, int) and end > start:
        times = [start, end]

        def state_at(key: Any, i: int) -> Any:
            return last.get(key) if i == 1 else zero[types[key]]
    else:
        times = [end] if isinstance(end, int) else []

        def state_at(key: Any, i: int) -> Any:
            return last.get(key)
    block = timeline.block(times, metas, state_at, 0, 0)
    return block, "no history block: one value per track over the run (gauges: the last reading; rates: the " \
                  "average from start_ns to payload_ns); read /signals?history=N or --output for per-second tracks"


class _Groups:
    """Track groups: pid numbers and their names."""

    def __init__(self, payload: Mapping[str, Any]) -> None:
        self.names: Dict[int, str] = {}
        self.sort: Dict[int, int] = {}
        self.gpu_names: Dict[str, str] = {}  # device.uuid or index -> name
        self.gpu_ids: Dict[str, int] = {}
        self.commands: Dict[str, str] = {}
        self.real = _real_pids(payload)
        self.root: Optional[int] = None  # the workload's root process: where host and engine tracks go
        roots = []
        for r in payload.get("resources") or []:
            if isinstance(r, dict) and r.get("kind") == "process" and isinstance(r.get("tags"), dict) \
                    and r["tags"].get("process.pid") is not None \
                    and r["tags"].get("process.pid") == r["tags"].get("process.root_pid"):
                first = r.get("first_seen_ts")
                roots.append((first if isinstance(first, (int, float)) else 0, str(r["tags"]["process.pid"])))
        for _, raw in sorted(roots):
            if raw.isdigit() and 0 < int(raw) < GPU_PID:
                self.root = int(raw)
                break
        for r in payload.get("resources") or []:
            if not isinstance(r, dict):
                continue
            tags, attrs = r.get("tags") or {}, r.get("attributes") or {}
            if r.get("kind") == "device":
                label = "%s GPU" % attrs.get("device.name", "") if attrs.get("device.name") else "GPU"
                for k in ("device.uuid", "device.index"):
                    if tags.get(k) is not None:
                        self.gpu_names[str(tags[k])] = label.strip()
            elif r.get("kind") == "process" and tags.get("process.pid") is not None:
                line = str(attrs.get("process.command_line") or "")
                self.commands[str(tags["process.pid"])] = line.split()[0].rsplit("/", 1)[-1][:40] if line else ""

    def gpu(self, tags: Mapping[str, Any]) -> int:
        key = str(tags.get("device.uuid") or tags.get("device.index") or "?")
        pid = self.gpu_ids.get(key)
        if pid is None:
            try:
                index = int(tags.get("device.index", len(self.gpu_ids)))
            except (TypeError, ValueError):
                index = len(self.gpu_ids)
            # the index as the pid: Perfetto's title "<name> <pid>" reads "NVIDIA H200 GPU 0"
            pid = index if 0 <= index < GPU_PID and index not in self.real else GPU_PID + index
            while pid in self.names:
                pid = max(pid + 1, GPU_PID)
            self.gpu_ids[key] = pid
            name = (self.gpu_names.get(key) or self.gpu_names.get(str(tags.get("device.index"))) or "GPU")
            if pid != index:
                name += " %s" % tags.get("device.index", key)
            self.names[pid] = name
            self.sort[pid] = index
        return pid

    def process(self, tags: Mapping[str, Any]) -> int:
        raw = tags.get("process.pid", tags.get("process.root_pid"))
        try:
            pid = int(raw)
        except (TypeError, ValueError):
            pid = HOST_PID - 1  # process.pid "exited": the processes folded together
        if pid not in self.names:
            cmd = self.commands.get(str(raw), "")
            # Perfetto appends the pid to the name; DevTools shows it beside it
            self.names[pid] = cmd or "process"
            self.sort[pid] = 1000 + len(self.sort)
        return pid

    def host(self) -> int:
        return self._run_track(HOST_PID, "host", 100)

    def engine(self) -> int:
        return self._run_track(ENGINE_PID, "engine", 101)

    def _run_track(self, pid: int, name: str, sort: int) -> int:
        """The host's or the engine's track: the run's root process when
        the payload names it, else one of its own."""
        if self.root is not None:
            return self.process({"process.pid": str(self.root)})
        self.names.setdefault(pid, name)
        self.sort.setdefault(pid, sort)
        return pid

    def of(self, group: str, tags: Mapping[str, Any]) -> int:
        if group == "gpu":
            return self.gpu(tags)
        if group == "host":
            return self.host()
        if group == "engine":
            return self.engine()
        return self.process(tags)


def _real_pids(payload: Mapping[str, Any]) -> Set[int]:
    """The pids a payload names (resources, series, errors)."""
    found = set()
    tagsets = [r.get("tags") for r in payload.get("resources") or [] if isinstance(r, dict)]
    tagsets += [m.get("tags") for m in payload.get("metrics") or [] if isinstance(m, dict)]
    tagsets += [e.get("tags") for e in payload.get("errors") or [] if isinstance(e, dict)]
    h = payload.get("history")
    if isinstance(h, dict) and isinstance(h.get("series"), list):
        tagsets += [s.get("tags") for s in h["series"] if isinstance(s, dict)]
    for tags in tagsets:
        if isinstance(tags, dict):
            for k in ("process.pid", "process.root_pid"):
                v = tags.get(k)
                if isinstance(v, (str, int)) and str(v).isdigit():
                    found.add(int(v))
    return found


def _own_track(name: str, tags: Mapping[str, Any]) -> Tuple[str, float, str]:
    """(track name, scale, unit) of one of the workload's own series:
    durations in ms, its tags other than the process's in the name."""
    extra = ", ".join("%s=%s" % (k, v) for k, v in sorted(tags.items()) if k != "process.pid")
    track = name + (" [%s]" % extra if extra else "")
    if name.endswith("_nanoseconds"):
        return track, 1e-6, "ms"
    return track, 1.0, ""


def _suffix(tags: Mapping[str, Any], name: str) -> str:
    """What tells a process's tracks of one name apart: the device, an NVTX
    domain, a copy's host memory, the process tree."""
    parts = []
    if any(k.startswith("device.") for k in tags) and not name.startswith("gpu_"):
        parts.append(_device(tags))
    for k in ("nvtx.domain", "host_memory", "kind"):
        if k in tags and not (k == "kind" and name in ("cuda_memcpy_bytes", "cuda_memset_bytes")):
            parts.append(str(tags[k]))
    if tags.get("scope") == "process_tree":
        parts.append("process tree")
    return (" [%s]" % ", ".join(parts)) if parts else ""


def _us(ns: int, start: int) -> float:
    return round((ns - start) / 1000.0, 3)


def render(payload: Mapping[str, Any]) -> bytes:
    """The trace's bytes."""
    block, what = history_of(payload)
    start = payload.get("start_ns")
    raw_times = block.get("times_ns")
    # a point whose time is not an integer is left out (its index still counts: values align with times_ns)
    times = [t if isinstance(t, int) and not isinstance(t, bool) else None
             for t in (raw_times if isinstance(raw_times, list) else [])]
    if not isinstance(start, int):
        start = next((t for t in times if t is not None), 0)
    groups = _Groups(payload)
    events: List[Dict[str, Any]] = []
    # counters with a key over several series (copies by kind) are one track with an arg each
    tracks: Dict[Tuple[int, str], Dict[int, Dict[str, Optional[float]]]] = {}

    def put(pid: int, track: str, arg: str, values: List[Any], scale: float, rate: bool) -> None:
        per = tracks.setdefault((pid, track), {})
        n = len(values)
        for i, v in enumerate(values):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or i >= len(times) \
                    or times[i] is None or (rate and i > 0 and times[i - 1] is None):
                continue
            x = round(v * scale, 6)
            if rate:  # the rate over (t[i-1], t[i]]: a step that starts at t[i-1]
                if i == 0:
                    continue
                per.setdefault(i - 1, {})[arg] = per.get(i - 1, {}).get(arg, 0.0) + x  # type: ignore[operator]
                if i == n - 1:  # and holds to the last point
                    per.setdefault(i, {})[arg] = per.get(i, {}).get(arg, 0.0) + x  # type: ignore[operator]
            else:
                per.setdefault(i, {})[arg] = x

    for s in block.get("series") or []:
        if not isinstance(s, dict):
            continue
        name, tags = str(s.get("name")), s.get("tags") or {}
        if not isinstance(tags, dict):
            continue
        values = s.get("values")
        if name in GAUGES and isinstance(values, list):
            group, track, scale = GAUGES[name]
            put(groups.of(group, tags), track + _suffix(tags, name), "value", values, scale, False)
        elif name in COUNTERS and isinstance(values, list):
            group, track, scale = COUNTERS[name]
            if name in ("cuda_memcpy_bytes", "cuda_memset_bytes"):
                arg = str(tags.get("kind") or "value")  # host memory is in the track's name
            else:
                arg = "value"
            put(groups.of(group, tags), track + _suffix(tags, name), arg, values, scale, True)
        elif name in timeline.ENGINE_GAUGES and isinstance(values, list):
            scale = 100.0 if "cache" in name or "token_usage" in name else 1.0
            label = name.split(":", 1)[-1] + (" (%)" if scale == 100.0 else "")
            put(groups.engine(), label, "value", values, scale, False)
        elif name in ENGINE_NAMES and isinstance(values, list):
            put(groups.engine(), ENGINE_NAMES[name], "value", values, 1.0, True)
        elif timeline.own(name, str(s.get("type")), tags) and name not in PROFILES:
            pid = groups.process(tags)
            track, scale, unit = _own_track(name, tags)
            type_ = s.get("type")
            if type_ == "gauge" and isinstance(values, list):
                put(pid, track + (" (%s)" % unit if unit else ""), "value", values, scale, False)
            elif type_ == "counter" and isinstance(values, list):
                put(pid, track + " (/s)", "value", values, 1.0, True)
            elif type_ == "histogram" and isinstance(s.get("quantiles"), dict):
                for q, vals in sorted(s["quantiles"].items()):
                    if isinstance(vals, list):
                        # each quantile of an interval is a step over it, as a rate is
                        put(pid, track + (" (%s)" % unit if unit else ""), str(q), vals, scale, True)
                if isinstance(s.get("rates"), list):
                    put(pid, track + " (/s)", "count", s["rates"], 1.0, True)
            elif type_ == "profile" and isinstance(s.get("frames"), dict):
                for g, vals in s["frames"].items():
                    if isinstance(vals, list):
                        put(pid, track + (" (ms/s)" if unit else " (/s)"), str(g), vals, scale, True)
        elif name in PROFILES and isinstance(s.get("frames"), dict):
            pid = groups.process(tags)
            track = PROFILES[name] + _suffix(tags, name)
            for g, vals in s["frames"].items():
                if isinstance(vals, list):
                    put(pid, track, str(g), vals, 1e-6, True)
    for (pid, track), per in tracks.items():
        for i in sorted(per):
            events.append({"ph": "C", "name": track, "pid": pid, "tid": 0, "ts": _us(times[i] or 0, start),
                           "args": per[i]})
    # errors: instant events at their first sighting, on the group they name
    for e in payload.get("errors") or []:
        if not isinstance(e, dict) or not isinstance(e.get("timestamp_ns"), int):
            continue
        tags = e.get("tags") or {}
        if not isinstance(tags, dict):
            tags = {}
        if "process.pid" in tags:
            pid = groups.process(tags)
        elif "device.uuid" in tags or "device.index" in tags:
            pid = groups.gpu(tags)
        else:
            pid = groups.host()
        message = str(e.get("message") or "")
        events.append({"ph": "i", "s": "p", "name": "%s: %s" % (e.get("level", "error"), message[:MAX_MESSAGE]),
                       "cat": "error", "pid": pid, "tid": 0, "ts": _us(e["timestamp_ns"], start),
                       "args": {"level": e.get("level"), "message": message, "exception": e.get("exception"),
                                "count": e.get("count"), "last_ns": e.get("last_ns"),
                                "resolved_ns": e.get("resolved_ns"), "tags": tags}})
    meta: List[Dict[str, Any]] = []
    for pid, pname in groups.names.items():
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                     "args": {"sort_index": groups.sort.get(pid, 0)}})
        meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "errors"}})
    events.sort(key=lambda ev: (ev["ts"], ev["pid"], ev["name"]))
    doc = {"traceEvents": meta + events, "displayTimeUnit": "ms",
           "otherData": {"exporter": "graphsignal-export %s" % __version__, "start_ns": start,
                         "payload_ns": payload.get("payload_ns"), "history": what,
                         "context": payload.get("context") if isinstance(payload.get("context"), dict) else {}}}
    return orjson.dumps(doc)
