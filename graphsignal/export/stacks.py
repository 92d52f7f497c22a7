"""A payload's profiles as stacks: the shared input of the flame-graph
formats (graphsignal.export.speedscope, graphsignal.export.folded).

One StackProfile per
  - process (tag process.pid): its GPU activity, rooted at the device
    (`cuda:N`): `kernels` > category > kernel display name (kernels that
    share a display name are one frame), `CUDA graphs` > graph frame,
    `memcpy` > kind (host memory), `memset` > kind, and `sync (host
    wait)` > kind, which is host time blocked in synchronization, not
    GPU time. A kernel frame or series that names its graph (a `graph`
    key or tag) is put under that graph in `CUDA graphs`; today's CUPTI
    records do not carry it, so node-mode kernels sit under `kernels`
    and graph replays are leaves (flat);
  - process and NVTX domain: `nvtx_ranges_nanoseconds` (host time) and
    `nvtx_range_gpu_nanoseconds` (GPU time), each frame's name a nesting
    path `outer/inner` split on '/'. A range's value includes its nested
    ranges', so each stack gets the range's own (self) time: its value
    less its children's (never below 0; `clamped` counts the ranges
    where the children held more);
  - other profile (probes): flat, one frame per profile frame.

Values are the profile's unit (nanoseconds), since start, or over the
payload's `window` when asked and present."""
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

from graphsignal import naming

Stack = Tuple[str, ...]

GPU_SECTIONS = {"cuda_kernels_nanoseconds": "kernels", "rocm_kernels_nanoseconds": "kernels",
                "cuda_graphs_nanoseconds": "CUDA graphs", "cuda_memcpy_nanoseconds": "memcpy",
                "cuda_memset_nanoseconds": "memset", "cuda_sync_nanoseconds": "sync (host wait)"}
NVTX = {"nvtx_ranges_nanoseconds": "NVTX ranges, host time", "nvtx_range_gpu_nanoseconds": "NVTX ranges, GPU time"}
MAX_DEPTH = 64  # levels of a nesting path kept (deeper ones are folded into the 64th)


class StackProfile(NamedTuple):
    title: str
    unit: str
    stacks: List[Tuple[Stack, int]]  # (frames root first, value), value > 0
    clamped: int  # NVTX ranges whose children held more than the range itself


I64_MAX = (1 << 63) - 1  # what every reader of these files holds (a total beyond it is clamped there)


def _int(v: Any) -> int:
    """A frame's value as a positive integer (0: none or not a number)."""
    if isinstance(v, bool):
        return 0
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(n, I64_MAX) if n > 0 else 0


def _frames(metric: Mapping[str, Any], window: Optional[Mapping[Tuple[str, str], Any]]) -> List[Any]:
    stats = window.get(_key(metric)) if window is not None else metric.get("stats")
    frames = stats.get("frames") if isinstance(stats, dict) else None
    return list(frames) if isinstance(frames, list) else []


def _key(m: Mapping[str, Any]) -> Tuple[str, str]:
    return (str(m.get("name")), repr(sorted((m.get("tags") or {}).items())))


def _device(tags: Mapping[str, Any]) -> str:
    if "device.cuda_index" in tags:
        return "cuda:%s" % tags["device.cuda_index"]
    if "device.index" in tags:
        return "gpu:%s" % tags["device.index"]
    if "device.uuid" in tags:
        return str(tags["device.uuid"])[:16]
    return "GPU"


def _process_title(pid: str, tags: Mapping[str, Any], commands: Mapping[str, str]) -> str:
    who = "pid %s" % pid
    if "rank" in tags:
        who = "rank %s, %s" % (tags["rank"], who)
    cmd = commands.get(pid)
    return "%s (%s)" % (cmd, who) if cmd else who


def _commands(payload: Mapping[str, Any]) -> Dict[str, str]:
    """pid -> the program's name, from the process resources."""
    out = {}
    for r in payload.get("resources") or []:
        if not isinstance(r, dict) or r.get("kind") != "process":
            continue
        pid = (r.get("tags") or {}).get("process.pid")
        line = str((r.get("attributes") or {}).get("process.command_line") or "")
        if pid is not None and line:
            out[str(pid)] = line.split()[0].rsplit("/", 1)[-1][:40]
    return out


def _kernel_name(f: Mapping[str, Any]) -> Tuple[str, str]:
    """(category, display name) of a kernel frame: as the payload says, else
    described here (graphsignal.naming)."""
    if f.get("display_name") and f.get("category"):
        return str(f["category"]), str(f["display_name"])
    n = naming.describe(str(f.get("name")))
    return n.category, n.display_name


def nested(frames: Iterable[Tuple[str, int]]) -> Tuple[List[Tuple[Stack, int]], int]:
    """Inclusive values by nesting path ("a/b/c") as (stack, self value)
    pairs, and how many paths were clamped (children over the parent)."""
    total: Dict[Stack, int] = {}
    for name, v in frames:
        parts = tuple(p if p else "(unnamed)" for p in str(name).split("/"))
        if len(parts) > MAX_DEPTH:
            parts = parts[:MAX_DEPTH - 1] + ("/".join(parts[MAX_DEPTH - 1:]),)
        total[parts] = total.get(parts, 0) + v
    # a path whose parent is missing (bounded frames) gets the parent as an implied node
    for path in list(total):
        for k in range(1, len(path)):
            total.setdefault(path[:k], 0)
    children: Dict[Stack, int] = {}
    for path, v in total.items():
        if len(path) > 1:
            children[path[:-1]] = children.get(path[:-1], 0) + v
    out, clamped = [], 0
    for path in sorted(total):
        v, c = total[path], children.get(path, 0)
        if v == 0 and c:
            continue  # an implied parent: its width is its children's
        if c > v:
            clamped += 1
        if v - c > 0:
            out.append((path, min(v - c, I64_MAX)))
    return out, clamped


def profiles(payload: Mapping[str, Any], use_window: bool = False) -> List[StackProfile]:
    """The payload's profiles as StackProfiles (see the module doc), largest
    first; use_window: over the payload's `window` (when it has one)."""
    window = None
    if use_window and isinstance(payload.get("window"), dict):
        window = {_key(m): m.get("stats") for m in payload["window"].get("metrics") or [] if isinstance(m, dict)}
    commands = _commands(payload)
    gpu: Dict[str, Dict[Stack, int]] = {}  # pid -> stack -> value
    gpu_tags: Dict[str, Mapping[str, Any]] = {}
    nvtx: Dict[Tuple[str, str, str], Dict[str, int]] = {}  # (metric, pid, domain) -> path -> value
    flat: List[StackProfile] = []
    for m in payload.get("metrics") or []:
        if not isinstance(m, dict) or m.get("type") != "profile" or not isinstance(m.get("tags") or {}, dict):
            continue
        name, tags = str(m.get("name")), m.get("tags") or {}
        frames = [f for f in _frames(m, window) if isinstance(f, dict)]
        if not frames:
            continue
        pid = str(tags.get("process.pid", "?"))
        if name in GPU_SECTIONS:
            acc = gpu.setdefault(pid, {})
            gpu_tags.setdefault(pid, tags)
            dev, section = _device(tags), GPU_SECTIONS[name]
            for f in frames:
                v = _int(f.get("value"))
                if not v:
                    continue
                fname = str(f.get("name"))
                if section == "kernels":
                    cat, disp = _kernel_name(f)
                    graph = f.get("graph") or tags.get("graph")
                    stack: Stack = ((dev, "CUDA graphs", str(graph), cat, disp) if graph
                                    else (dev, "kernels", cat, disp))
                elif section == "memcpy" and tags.get("host_memory"):
                    stack = (dev, section, "%s (%s)" % (fname, tags["host_memory"]))
                else:
                    stack = (dev, section, fname)
                acc[stack] = acc.get(stack, 0) + v
        elif name in NVTX:
            acc2 = nvtx.setdefault((name, pid, str(tags.get("nvtx.domain", "default"))), {})
            for f in frames:
                v = _int(f.get("value"))
                if v:
                    acc2[str(f.get("name"))] = acc2.get(str(f.get("name")), 0) + v
        else:
            stacks: List[Tuple[Stack, int]] = [((str(f.get("name")),), _int(f.get("value"))) for f in frames]
            stacks = [(s, v) for s, v in stacks if v]
            if stacks:
                parts = [_process_title(pid, tags, commands)] if "process.pid" in tags else []
                parts += ["%s=%s" % kv for kv in sorted(tags.items()) if kv[0] not in ("process.pid", "rank")]
                flat.append(StackProfile(", ".join([name] + parts), "nanoseconds"
                                         if name.endswith("_nanoseconds") else "none", stacks, 0))
    out = []
    for pid, acc in gpu.items():
        title = "GPU activity, %s" % _process_title(pid, gpu_tags[pid], commands)
        out.append(StackProfile(title, "nanoseconds", sorted((k, min(v, I64_MAX)) for k, v in acc.items()), 0))
    for (name, pid, domain), acc2 in nvtx.items():
        paths, clamped = nested(acc2.items())
        if paths:
            title = "%s, %s, domain %s" % (NVTX[name], _process_title(pid, {}, commands), domain)
            out.append(StackProfile(title, "nanoseconds", paths, clamped))
    out += flat
    out.sort(key=lambda p: -sum(v for _, v in p.stacks))
    return out
