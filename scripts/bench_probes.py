#!/usr/bin/env python3
"""Probe record cost (JSON lines): nanoseconds per graphsignal_record call,
1 and 8 threads, under graphsignal-run (collected) and outside it (inert).

cpu_ns_per_call is each thread's CPU time over its calls (immune to
preemption when there are more threads than cores); wall_ns_per_call is
wall time per call per thread. Collected runs write in bursts that fit the
ring, with pauses for the sidecar to drain, so the write path is measured
rather than the drop path; `dropped` says whether any record was lost.
Targets: <= 25 ns single-threaded collected, <= 2 ns inert."""
import argparse
import os
import subprocess
import sys

from benchutil import compile_c, emit

GS_RUN = [sys.executable, "-m", "graphsignal.cli.run", "--listen-port", "0"]


def run(exe, threads, per_burst, bursts, pause_ms, collected):
    env = dict(os.environ, GRAPHSIGNAL_LOG_LEVEL="error")
    env.pop("GRAPHSIGNAL_RUN_ID", None)
    cmd = [exe, str(threads), str(per_burst), str(bursts), str(pause_ms)]
    out = subprocess.run((GS_RUN + cmd) if collected else cmd, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    n, calls, cpu_ns, wall_ns, dropped, active = out
    assert int(active) == int(collected)
    emit(bench="probe_record", mode="collected" if collected else "inert", threads=int(n),
         calls=int(float(calls)), cpu_ns_per_call=float(cpu_ns), wall_ns_per_call=float(wall_ns),
         dropped=int(dropped), target_ns=25 if collected else 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bursts", type=int, default=20)
    args = ap.parse_args()
    exe = compile_c("probe_bench.c")
    for threads in (1, 8):
        per = 800_000 // threads  # a burst fits the default ring (1M records)
        run(exe, threads, per, args.bursts, 150, True)
        run(exe, threads, 10_000_000 // threads, 3, 0, False)


if __name__ == "__main__":
    main()
