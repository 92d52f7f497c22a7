"""Making runs of different CUDA collections comparable in
graphsignal-diff (graphsignal.diff.compare calls align() on its sides).
It guards against reading a difference in how CUDA was collected as a
change in the work:

- --cuda-trace off collects no CUDA activity: against a run that did, its
  absent series would read as work that vanished (or appeared), so every
  CUDA activity series is left out, with a warning.
- --cuda-trace light counts without timing kernels: launches per kernel
  (cuda_kernel_launches), copies per kind and host memory and memsets per
  kind (cuda_memcpy_calls, cuda_memset_calls) as count profiles, graph
  replays exact with their time estimated (duration: sampled). Against a
  run of the CUPTI collection, that run's kernel, copy and memset profiles
  are put in the light run's terms (their calls, per the same frames and
  tags, host_memory included) and their times left out, so counts compare
  with counts; graph time compares with graph time, marked estimated on
  the light side; a warning says so.
- A light run of a graphsignal older than its host memory split tagged no
  copy with host_memory: where one is compared with a run that does, the
  copies of every run are compared per kind only (host_memory left out),
  with a warning, rather than as series present on one side.
"""
from typing import Dict, List, Tuple

from graphsignal.diff.sides import Key, Side, TKey
from graphsignal.naming import metrics as metric_names

# what only CUDA tracing collects (none of it under --cuda-trace off): the
# CUDA collections' own series by name, never a probe that happens to be
# called cuda_something
CUDA_TRACED = frozenset([m.name for m in metric_names.table()
                         if m.name.startswith("cuda_") and m.type != "gauge"] + ["nvtx_range_gpu_nanoseconds"])

# a CUPTI profile -> the light collection's count profile of the same calls
AS_COUNTS = {"cuda_kernels_nanoseconds": "cuda_kernel_launches", "cuda_memcpy_nanoseconds": "cuda_memcpy_calls",
             "cuda_memset_nanoseconds": "cuda_memset_calls"}
COPIES = ("cuda_memcpy_nanoseconds", "cuda_memcpy_calls", "cuda_memcpy_bytes")  # the series host_memory tags
HOST_SIDE_KINDS = frozenset(("host_to_device", "device_to_host", "host_to_host", "host_to_array", "array_to_host"))
UNKNOWN_MEMORY = "unknown"  # a light memset's frame: the memory's kind is not asked per call


def align(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    _leave_out_untraced(B, A, warnings)
    _host_memory_where_every_run_tells(B, A, warnings)
    _as_counts(B, A, warnings)


def _leave_out_untraced(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    off = [s.label for s in B + A if s.cuda_trace == "off"]
    if not off or len(off) == len(B + A):
        return
    names = set()
    for s in B + A:
        for table in (s.profiles, s.counters):
            for key in [k for k in table if k[0] in CUDA_TRACED]:
                names.add(key[0])
                del table[key]
    if names:
        warnings.append("%s ran with CUDA tracing off (--cuda-trace off): no CUDA activity was collected there, "
                        "so %s are left out (compare CUDA activity between runs that both traced it)"
                        % (", ".join(off), ", ".join(sorted(names))))


def _untag(tkey: TKey) -> TKey:
    return tuple((k, v) for k, v in tkey if k != "host_memory")


def _has_host_memory(s: Side) -> bool:
    return any(k[0] in COPIES and dict(k[1]).get("host_memory") for k in list(s.profiles) + list(s.counters))


def _tells_host_memory(s: Side) -> bool:
    """False for a light run whose host copies carry no host_memory (a
    graphsignal older than the split); True otherwise."""
    if s.cuda_trace != "light" or _has_host_memory(s):
        return True
    return not any(k[0] == "cuda_memcpy_calls" and set(frames) & HOST_SIDE_KINDS for k, frames in s.profiles.items())


def _host_memory_where_every_run_tells(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    silent = [s for s in B + A if not _tells_host_memory(s)]
    if not silent or not any(_has_host_memory(s) for s in B + A):
        return
    for s in B + A:
        for key in [k for k in list(s.profiles) + list(s.counters) if k[0] in COPIES]:
            _rekey(s, key, (key[0], _untag(key[1])))
    warnings.append("%s counted copies without telling pinned from pageable host memory (--cuda-trace light of an "
                    "older graphsignal): copies are compared per kind, host_memory left out"
                    % ", ".join(s.label for s in silent))


def _rekey(s: Side, key: Key, to: Key) -> None:
    """Moves the series `key` of s to `to`, added to what is there (a
    profile's frames, a counter's total), with what is known of how it was
    taken; its shown tags are the ones `to` has."""
    if key == to:
        return
    if key in s.profiles:
        prof = s.profiles.setdefault(to, {})
        for name, (value, calls) in s.profiles.pop(key).items():
            acc = prof.setdefault(name, [0, 0])
            acc[0] += value
            acc[1] += calls
    if key in s.counters:
        s.counters[to] = s.counters.get(to, 0) + s.counters.pop(key)
    folded = s.folded.pop(key, None)
    if folded:
        acc = s.folded.setdefault(to, [0, 0])
        acc[0] += folded[0]
        acc[1] += folded[1]
    if key in s.folded_names:
        s.folded_names[to] = s.folded_names.get(to, 0) + s.folded_names.pop(key)
    if key in s.truncated:
        s.truncated.discard(key)
        s.truncated.add(to)
    for table in (s.sampled, s.counted):
        if key in table:
            table.setdefault(to, set()).update(table.pop(key))
    for k, frame in [e for e in s.estimated if e[0] == key]:
        s.estimated.setdefault((to, frame), set()).update(s.estimated.pop((k, frame)))
    kept = {k for k, _ in to[1]}
    s.tags.setdefault(to, {k: v for k, v in s.tags.pop(key, {}).items() if k in kept})


def _counts_of(s: Side, key: Key) -> Tuple[str, TKey]:
    """A CUPTI profile put in the light run's terms in place: each frame's
    value its calls (a memset's frame the unknown memory), no time sampled."""
    memset = key[0] == "cuda_memset_nanoseconds"
    frames = s.profiles[key]
    counted: Dict[str, List[float]] = {}
    for name, (_, calls) in frames.items():
        acc = counted.setdefault(UNKNOWN_MEMORY if memset else name, [0, 0])
        acc[0] += calls
        acc[1] += calls
    s.profiles[key] = counted
    folded = s.folded.get(key)
    if folded:
        s.folded[key] = [folded[1], folded[1]]
    s.sampled.pop(key, None)
    return AS_COUNTS[key[0]], key[1]


def _as_counts(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    light = [s for s in B + A if s.cuda_trace == "light"]
    full = [s for s in B + A if s.cuda_trace == "on"]
    if not light or not full:
        return
    moved = set()
    for s in full:
        for key in [k for k in s.profiles if k[0] in AS_COUNTS]:
            _rekey(s, key, _counts_of(s, key))
            moved.add(key[0])
    if moved:
        warnings.append("%s counted CUDA without timing kernels (--cuda-trace light) and %s timed it through CUPTI: "
                        "%s are compared as counts (cuda_kernel_launches, cuda_memcpy_calls, cuda_memset_calls), "
                        "their times left out; CUDA graph time is an estimate from sampled replays in the light run"
                        % (", ".join(s.label for s in light), ", ".join(s.label for s in full),
                           ", ".join(sorted(moved))))
