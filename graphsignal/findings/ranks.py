"""One rank slower than the others: in a distributed run every collective
waits for the slowest rank, so the others' communication kernels stretch
by the time it spends computing beyond them.

Per rank (the `rank` tag of its processes' series): compute time (kernel
time outside the communication category, plus graph replays) and
communication time (NCCL kernels).
"""
from typing import Dict, List

from graphsignal.findings.facts import GRAPHS, KERNELS, Facts, evidence, finding
from graphsignal.signals_model import Finding

MIN_RATIO = 1.2  # the slowest rank's compute over the median rank's
MIN_STAKE = 0.03  # of the span


def slow_rank(f: Facts) -> List[Finding]:
    compute: Dict[str, float] = {}
    comm: Dict[str, float] = {}
    for name in (KERNELS, GRAPHS):
        for s in f.named(name):
            rank = s.tags.get("rank")
            if rank is None:
                continue
            for fr in s.frames:
                target = comm if fr[3] == "communication" else compute
                target[rank] = target.get(rank, 0.0) + fr[1]
            compute.setdefault(rank, 0.0)
    if len(compute) < 2 or f.seconds <= 0:
        return []
    ordered = sorted(compute.values())
    median = ordered[(len(ordered) - 1) // 2]
    slow = max(compute, key=lambda r: compute[r])
    if median <= 0 or compute[slow] / median < MIN_RATIO:
        return []
    stake = f.share(compute[slow] - median)
    if stake < MIN_STAKE:
        return []
    others = [comm.get(r, 0.0) for r in compute if r != slow]
    ev = [evidence(KERNELS, "compute_over_median_rank", compute[slow] / median, ">=", MIN_RATIO, "", {"rank": slow}),
          evidence(KERNELS, "compute_ns", compute[slow], "", None, "ns", {"rank": slow}),
          evidence(KERNELS, "median_compute_ns", median, "", None, "ns"),
          evidence(KERNELS, "communication_ns", comm.get(slow, 0.0), "", None, "ns", {"rank": slow}),
          evidence(KERNELS, "others_mean_communication_ns", sum(others) / len(others), "", None, "ns")]
    return [finding(
        f, "slow_rank", "ranks", "rank %s computes %.0f%% longer than the median rank; the others wait in collectives"
        % (slow, 100 * (compute[slow] / median - 1)), ev, "wall_time", stake,
        "the slow rank's compute beyond the median's, which every rank waits for", "medium",
        [("pytorch", "balance the work per rank (equal batch and sequence lengths: pad or bucket; the same data "
                     "loading per rank); check the slow rank's GPU for throttling "
                     "(gpu_clocks_throttle_reason_active) and its host for other load")],
        [(KERNELS, "down", {"rank": slow}), (KERNELS, "down", {"category": "communication"})])]


RULES = (slow_rank,)
