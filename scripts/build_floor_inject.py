"""Builds the CUPTI floor injection (scripts/cuda/floor_inject.cpp) for the
newest CUDA major with headers and libcupti here, and prints its path: for
scripts/engine_e2e.py's ablation modes, which split graphsignal-run's cost
into CUPTI's share and the rest (its sidecar, GPU telemetry, the engine
scrape). With FLOOR the printed path:

  --mode sidecar="CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_NOOP=1"
      graphsignal-run with everything but CUPTI (it leaves an injection
      the user set alone, and says so at info level)
  --run cupti="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=kernel,graph,context GS_FLOOR_CALLBACKS=driver"
      no graphsignal-run: the activity kinds and driver callbacks of
      graphsignal's default collection alone, every buffer discarded

and, to split CUPTI's share further (on the H200 the `cupti` mode alone
cost as much as graphsignal-run: tiny model, 5 reps, 0.910 of bare at 1
client and 0.918 at 4, against 0.937 and 0.980 for graphsignal-run and
1.013 and 1.036 for `sidecar`):

  --run cupti-kernel="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=kernel,context"
  --run cupti-graph="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=graph,context"
  --run cupti-callbacks="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=context GS_FLOOR_CALLBACKS=driver"

and two ways around it: CUPTI's buffers in pinned host memory
(GS_FLOOR_PINNED=1 added to any of the above; graphsignal-run's own is
GRAPHSIGNAL_CUPTI_PINNED=1), and graph launches timed by CUDA event pairs
instead of CUPTI's graph tracing (GS_FLOOR_GRAPH_EVENTS=1, with
GS_FLOOR_REPORT=1 printing the replays timed and their mean at exit):

  --run cupti-graphev="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=context GS_FLOOR_CALLBACKS=driver \\
                         GS_FLOOR_GRAPH_EVENTS=1"

Where the cost starts (H200, driver 580, llama-server, tiny model, 1 and
4 clients, 5 repetitions per mode): every mode that takes up CUPTI's
activity API, even with no kind enabled, read 0.92 of bare pooled over 70
repetitions (95 % interval 0.905-0.936); `cupti-kernel` alone 0.68 and
0.79; modes without CUPTI 1.015 (1.000-1.030):

  --run cupti-none="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS="
      buffer callbacks registered, no kind enabled, no subscriber
  --run noop="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_NOOP=1"
      libcupti loaded, never called

and whether callbacks alone, without the activity API, escape it:

  --run cupti-sub="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_NO_ACTIVITY=1 GS_FLOOR_CALLBACKS=none"
  --run cupti-subcb="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_NO_ACTIVITY=1 GS_FLOOR_CALLBACKS=driver \\
                     GS_FLOOR_GRAPH_LAUNCH=1 GS_FLOOR_KERNEL_LAUNCH=1"

CUPTI detached at run time (cuptiFinalize), once or over and over, to
see whether its cost leaves with it:

  --run cupti-detach="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=kernel,graph,context GS_FLOOR_DETACH_MS=300"
  --run cupti-cycle="env CUDA_INJECTION64_PATH=FLOOR GS_FLOOR_KINDS=kernel,graph,context GS_FLOOR_CYCLE_MS=100,900"

On the H200 (driver 580, CUDA 13.0) both killed llama-server and a
PyTorch graph loop (scripts/workloads/graph_latency.py) with "an illegal
memory access was encountered" on the graph replays after the detach:
at any API exit, at a synchronization's exit (GS_FLOOR_DETACH_AT_SYNC=1)
and with pinned buffers alike. So CUPTI, once attached, stays attached.

  python scripts/build_floor_inject.py [--major 13]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cupti_build  # noqa: E402
from bench_percall import build_floor, work_dir  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--major", type=int, default=None)
    a = ap.parse_args()
    sets = cupti_build.find_header_sets()
    for major in [a.major] if a.major else [13, 12]:
        hs = cupti_build.pick(sets, major)
        if hs:
            print(build_floor(hs, work_dir()))
            return
    raise SystemExit("no CUPTI headers with libcupti here")


if __name__ == "__main__":
    main()
