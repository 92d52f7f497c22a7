"""The garbage collector of a long-running graphsignal process (the
sidecar, graphsignal-server). Both hold large, long-lived, acyclic data (a
store of thousands of series; JSON trees of uploads) and allocate many
short-lived objects per request, so at CPython's default thresholds the
collector runs often and its full passes walk the whole heap, stopping
every thread:

- graphsignal-server: an upload of 50,000 series makes about a million
  objects; at the default thresholds the collector ran some 500 times per
  such upload (a third of its CPU), each pass up to 0.3 s; here a hundred
  times less often (longest pause 0.05 s; beside a flood of such uploads a
  small one's p50 0.05-0.09 -> 0.03 s, and the flood itself goes through
  13-28 -> 29-32 uploads in 22 s: bench_fleet's fairness).
- the sidecar (its own process: the workload's collector is never touched):
  a /metrics scrape with every one of 5,000 series changed ran about 7
  collections, a full one every tenth scrape, and none here
  (scripts/bench_metrics.py --gc default against --gc sidecar, 2-core
  machine: that scrape's p99 98-147 -> 64-72 ms).

Cycles are still collected, only less often: at most THRESHOLD0 container
objects' worth of cyclic garbage waits for a pass."""
import gc

THRESHOLD0, THRESHOLD1, THRESHOLD2 = 100_000, 50, 100


def tune() -> None:
    """What is alive now (modules, settings, the process's own set-up) is
    never walked again (gc.freeze), and passes run at the thresholds
    above."""
    gc.freeze()
    gc.set_threshold(THRESHOLD0, THRESHOLD1, THRESHOLD2)


__all__ = ["tune"]
