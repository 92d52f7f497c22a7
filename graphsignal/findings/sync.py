"""Host-device synchronization every step: the host blocks on the GPU once
or more per step of a loop, so the GPU drains and idles while the host
prepares the next step.

Engines are left out: they synchronize by design (llama.cpp ~20 stream
syncs per token, each a wait on work already queued), and their own
findings (graphs, batching) name the flags that matter there.
"""
from typing import List

from graphsignal.findings.facts import SYNC, Facts, evidence, finding
from graphsignal.signals_model import Finding

MIN_SYNCS = 100  # over the span: fewer is setup, not a loop
MIN_PER_STEP = 0.5  # syncs per step (steps: the most frequent kernel or graph)
MIN_STAKE = 0.05  # of the span: the host's blocked time the GPU did not fill


def sync_every_step(f: Facts) -> List[Finding]:
    if f.engine_name or f.seconds <= 0:
        return []
    frames = f.frames(SYNC)
    count = sum(v[1] for v in frames.values())
    blocked = sum(v[0] for v in frames.values())
    steps = f.steps()
    if count < MIN_SYNCS or steps <= 0:
        return []
    per_step = count / steps
    share = f.share(blocked)
    busy = f.gpu_busy_share()
    stake = share if busy is None else min(share, max(0.0, 1.0 - busy))
    if per_step < MIN_PER_STEP or stake < MIN_STAKE:
        return []
    kind = max(frames, key=lambda k: frames[k][0])
    ev = [evidence(SYNC, "calls_per_step", per_step, ">=", MIN_PER_STEP, "", {"frame": kind}),
          evidence(SYNC, "share_of_span", share, "", None, "fraction"),
          evidence(SYNC, "calls", count, ">=", MIN_SYNCS)]
    if busy is not None:
        ev.append(evidence("gpu_busy_time_nanoseconds", "share_of_span", busy, "", None, "fraction"))
    return [finding(
        f, "sync_every_step", "sync", "the host waits for the GPU %.1f times a step (%s syncs), %.0f%% of the time"
        % (per_step, kind, 100 * share), ev, "wall_time", stake,
        "host time blocked in syncs, at most the GPU's idle share", "high" if busy is not None else "medium",
        [("pytorch", "take .item(), .cpu(), .tolist(), print(tensor), torch.cuda.synchronize() and "
                     "data-dependent shapes (nonzero, boolean masks) out of the step; keep losses and counters on "
                     "the GPU and read them every N steps; copy with non_blocking=True into pinned buffers"),
         ("cuda", "replace per-step cudaDeviceSynchronize/cudaStreamSynchronize with events "
                  "(cudaEventRecord + cudaStreamWaitEvent) and wait only where the host needs a result")],
        [(SYNC, "down"), ("gpu_busy_time_nanoseconds", "up")])]


RULES = (sync_every_step,)
