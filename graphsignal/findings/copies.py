"""Copies: pageable host memory, and a large copy or memset every step.

A pageable copy is staged by the driver through a pinned bounce buffer
and is synchronous to the host; pinned memory (and non_blocking copies)
runs at the link's speed and overlaps. Sampled copy times
(`duration: sampled`) are estimates; where a kind's time was never timed
(0 ns), its bytes at PAGEABLE_BYTES_PER_S stand in (confidence low). So
under --cuda-trace light, whose copies are counted per kind and host
memory (cuda_memcpy_calls) but never timed.
"""
from typing import Callable, List, Mapping

from graphsignal.findings.facts import (MEMCPY, MEMCPY_BYTES, MEMCPY_CALLS, MEMSET, MEMSET_BYTES, MEMSET_CALLS, NS,
                                        Facts, evidence, finding)
from graphsignal.signals_model import Finding

MIN_COPIES = 100  # pageable copies over the span: fewer is loading, not a loop
MIN_PAGEABLE_SHARE = 0.03  # of the span in pageable copies
PAGEABLE_BYTES_PER_S = 5e9  # a pageable copy's speed where its time was not measured
MIN_STEP_BYTES = 1 << 20  # bytes per copy that make it "large"
MIN_PER_STEP = 0.5  # copies or memsets per step
MIN_STEP_SHARE = 0.05  # of the span in those copies
MEMSET_BYTES_PER_S = 1e12  # a memset's speed where its time was not measured
LINK_BYTES_PER_S = 25e9  # a pinned (or device) copy's speed where its time was not measured: PCIe 4/5 x16


def _pageable(t: Mapping[str, str]) -> bool:
    return t.get("host_memory") == "pageable"


def _of_kind(kind: str) -> Callable[[Mapping[str, str]], bool]:
    return lambda t: t.get("kind") == kind


def pageable_copies(f: Facts) -> List[Finding]:
    series = f.timed_or_counted(MEMCPY, MEMCPY_CALLS)
    frames = f.frames(series, _pageable)
    if series == MEMCPY_CALLS:  # a count profile (value = calls): no time measured
        frames = {k: [0.0, v[1]] for k, v in frames.items()}
    count = sum(v[1] for v in frames.values())
    if count < MIN_COPIES or f.seconds <= 0:
        return []
    ns = sum(v[0] for v in frames.values())
    nbytes = f.total(MEMCPY_BYTES, _pageable) or 0.0
    estimated = ns <= 0
    if estimated:
        ns = nbytes / PAGEABLE_BYTES_PER_S * NS
    share = f.share(ns)
    if share < MIN_PAGEABLE_SHARE:
        return []
    kind = max(frames, key=lambda k: (frames[k][0], frames[k][1]))
    ev = [evidence(series, "share_of_span", share, ">=", MIN_PAGEABLE_SHARE, "fraction", {"host_memory": "pageable"}),
          evidence(series, "calls", count, ">=", MIN_COPIES, "", {"host_memory": "pageable", "frame": kind}),
          evidence(MEMCPY_BYTES, "total", nbytes, "", None, "bytes", {"host_memory": "pageable"})]
    return [finding(
        f, "pageable_copies", "copies", "%d pageable copies (%s first), %.1f%% of the time"
        % (count, kind, 100 * share), ev, "wall_time", share / 2,
        "half the pageable copies' time: pinned copies run about twice as fast and overlap",
        "low" if estimated else "high",
        [("pytorch", "allocate host tensors with pin_memory=True (DataLoader(pin_memory=True)) and copy with "
                     ".to(device, non_blocking=True); reuse one pinned buffer rather than a new tensor each step"),
         ("cuda", "cudaMallocHost/cudaHostRegister the host buffers and use cudaMemcpyAsync on a stream")],
        [(series, "zero", {"host_memory": "pageable"}), (series, "up", {"host_memory": "pinned"})])]


def _untimed_copy_ns(f: Facts, kind: str) -> float:
    """A copy kind's time from its bytes where none was measured: pageable
    bytes at PAGEABLE_BYTES_PER_S, the rest at LINK_BYTES_PER_S."""
    total = f.total(MEMCPY_BYTES, _of_kind(kind)) or 0.0
    pageable = f.total(MEMCPY_BYTES, lambda t: t.get("kind") == kind and _pageable(t)) or 0.0
    return (pageable / PAGEABLE_BYTES_PER_S + (total - pageable) / LINK_BYTES_PER_S) * NS


def large_transfer_every_step(f: Facts) -> List[Finding]:
    steps = f.steps()
    if steps <= 0 or f.seconds <= 0:
        return []
    best = None
    for prof, counter in ((f.timed_or_counted(MEMCPY, MEMCPY_CALLS), MEMCPY_BYTES),
                          (f.timed_or_counted(MEMSET, MEMSET_CALLS), MEMSET_BYTES)):
        kinds = []  # (share, kind, calls, bytes per call, estimated) of each kind large enough, every step
        for kind, (ns, calls) in f.frames(prof).items():
            if kind == "device_to_device" or calls < MIN_COPIES:
                continue
            if prof in (MEMCPY_CALLS, MEMSET_CALLS):
                ns = 0.0
            nbytes = f.total(counter, _of_kind(kind)) or 0.0
            estimated = ns <= 0
            if estimated:
                ns = _untimed_copy_ns(f, kind) if counter == MEMCPY_BYTES else nbytes / MEMSET_BYTES_PER_S * NS
            if nbytes / calls >= MIN_STEP_BYTES and calls / steps >= MIN_PER_STEP:
                kinds.append((f.share(ns), kind, calls, nbytes / calls, estimated))
        share = sum(k[0] for k in kinds)
        if kinds and share >= MIN_STEP_SHARE and (best is None or share > best[0]):
            best = (share, prof, sorted(kinds, reverse=True))
    if best is None:
        return []
    share, prof, kinds = best
    what = "memset" if prof in (MEMSET, MEMSET_CALLS) else "copy"
    ev = []
    for k_share, kind, calls, per_call, _ in kinds:
        ev += [evidence(prof, "bytes_per_call", per_call, ">=", MIN_STEP_BYTES, "bytes", {"frame": kind}),
               evidence(prof, "calls_per_step", calls / steps, ">=", MIN_PER_STEP, "", {"frame": kind}),
               evidence(prof, "share_of_span", k_share, "", None, "fraction", {"frame": kind})]
    ev.append(evidence(prof, "share_of_span", share, ">=", MIN_STEP_SHARE, "fraction"))
    names = " and ".join("%.1f MB %s" % (k[3] / 1e6, k[1].replace("_", " ")) for k in kinds)
    return [finding(
        f, "large_transfer_every_step", "copies", "a %s %s every step, %.0f%% of the time" % (names, what, 100 * share),
        ev, "wall_time", share, "the time of those transfers", "low" if any(k[4] for k in kinds) else "medium",
        [("pytorch", "keep the tensor on the GPU across steps (allocate once, update in place) instead of moving "
                     "it each step; zero only what changed (or skip torch.zeros/zero_() on buffers that are fully "
                     "overwritten: torch.empty)"),
         ("cuda", "keep the buffer resident; overlap unavoidable transfers with compute on a second stream")],
        [(prof, "down", {"frame": k[1]}) for k in kinds]
        + [(MEMSET_BYTES if what == "memset" else MEMCPY_BYTES, "down")])]


RULES = (pageable_copies, large_transfer_every_step)
