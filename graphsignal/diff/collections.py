"""Making runs of different CUDA collections comparable in
graphsignal-diff (graphsignal.diff.compare calls align() on its sides).
It guards against reading a difference in how CUDA was collected as a
change in the work:

- --cuda-trace off collects no CUDA activity: against a run that did, its
  absent series would read as work that vanished (or appeared), so every
  CUDA activity series is left out, with a warning.
- --cuda-trace light counts without timing kernels: launches per kernel
  (cuda_kernel_launches), copies and memsets per kind (cuda_memcpy_calls,
  cuda_memset_calls) as count profiles, graph replays exact with their
  time estimated (duration: sampled). Against a run of the CUPTI
  collection, that run's kernel, copy and memset profiles are put in the
  light run's terms (their calls, per the same frames and tags) and their
  times left out, so counts compare with counts; graph time compares with
  graph time, marked estimated on the light side; a warning says so.
"""
from typing import List

from graphsignal.diff.sides import Side, TKey
from graphsignal.naming import metrics as metric_names

# what only CUDA tracing collects (none of it under --cuda-trace off): the
# CUDA collections' own series by name, never a probe that happens to be
# called cuda_something
CUDA_TRACED = frozenset([m.name for m in metric_names.table()
                         if m.name.startswith("cuda_") and m.type != "gauge"] + ["nvtx_range_gpu_nanoseconds"])

# a CUPTI profile -> the light collection's count profile of the same calls
AS_COUNTS = {"cuda_kernels_nanoseconds": "cuda_kernel_launches", "cuda_memcpy_nanoseconds": "cuda_memcpy_calls",
             "cuda_memset_nanoseconds": "cuda_memset_calls"}
# tags the light collection cannot know (the host memory of a copy: pinned or pageable)
LIGHT_UNKNOWN_TAGS = frozenset(("host_memory",))
UNKNOWN_MEMORY = "unknown"  # a light memset's frame: the memory's kind is not asked per call


def align(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    _leave_out_untraced(B, A, warnings)
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
    return tuple((k, v) for k, v in tkey if k not in LIGHT_UNKNOWN_TAGS)


def _as_counts(B: List[Side], A: List[Side], warnings: List[str]) -> None:
    light = [s for s in B + A if s.cuda_trace == "light"]
    full = [s for s in B + A if s.cuda_trace == "on"]
    if not light or not full:
        return
    moved = set()
    for s in full:
        for key in [k for k in s.profiles if k[0] in AS_COUNTS]:
            frames = s.profiles.pop(key)
            folded = s.folded.pop(key, None)
            s.truncated.discard(key)
            to = (AS_COUNTS[key[0]], _untag(key[1]))
            prof = s.profiles.setdefault(to, {})
            for name, (_, calls) in frames.items():
                name = UNKNOWN_MEMORY if key[0] == "cuda_memset_nanoseconds" else name
                acc = prof.setdefault(name, [0, 0])
                acc[0] += calls
                acc[1] += calls
            if folded:
                acc = s.folded.setdefault(to, [0, 0])
                acc[0] += folded[1]
                acc[1] += folded[1]
            s.tags.setdefault(to, {k: v for k, v in s.tags.get(key, {}).items() if k not in LIGHT_UNKNOWN_TAGS})
            s.sampled.pop(key, None)
            moved.add(key[0])
        # copy and memset bytes: per kind, without the host memory the light run cannot tell
        for key in [k for k in s.counters if k[0] in ("cuda_memcpy_bytes", "cuda_memset_bytes")]:
            to = (key[0], _untag(key[1]))
            if to != key:
                total = s.counters.pop(key)
                s.counters[to] = s.counters.get(to, 0) + total
                s.tags.setdefault(to, {k: v for k, v in s.tags.get(key, {}).items() if k not in LIGHT_UNKNOWN_TAGS})
    if moved:
        warnings.append("%s counted CUDA without timing kernels (--cuda-trace light) and %s timed it through CUPTI: "
                        "%s are compared as counts (cuda_kernel_launches, cuda_memcpy_calls, cuda_memset_calls), "
                        "their times left out; CUDA graph time is an estimate from sampled replays in the light run"
                        % (", ".join(s.label for s in light), ", ".join(s.label for s in full),
                           ", ".join(sorted(moved))))
