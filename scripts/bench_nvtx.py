"""What an NVTX range costs the workload's thread with graphsignal's
library attached, without a GPU: scripts/c/nvtx_bench.cpp (NVTX v3's
header, no CUDA) run under

  bare       no NVTX tool: every NVTX call is NVTX's own no-op
  ours       NVTX_INJECTION64_PATH naming graphsignal's injection library,
             under a run id (its ring made, nothing draining it: the
             library's flush writes one record per frame and second)
  ours:off   the same with GRAPHSIGNAL_NVTX=off (the library declines;
             NVTX falls back to its no-ops)

with 1 thread and with --threads at once (per-thread state: no lock, no
shared write on a range). Configurations are interleaved, each repetition
in a rotated order; the summary gives, per kind of call and thread count,
the median ns per call and the median over repetitions of (ours - bare).
GPU time per range (--nvtx gpu) costs on launches, not on ranges:
scripts/bench_percall.py measures it on a GPU.

  python scripts/bench_nvtx.py [--reps 5] [--calls 1000000] [--threads 4]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "csrc"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cupti_build  # noqa: E402
from benchutil import emit, installed_library, work_dir  # noqa: E402

CONFIGS = ("bare", "ours", "ours:off")
KINDS = ("push_pop_ns", "nested2_ns", "start_end_ns", "push_ex_ns", "mark_ns")


def build(installed=False):
    """(benchmark binary, our library, the folder with its libcupti)."""
    sets = cupti_build.find_header_sets()
    hs = cupti_build.pick(sets, 13) or cupti_build.pick(sets, 12)
    if hs is None:
        raise SystemExit("no CUPTI headers with libcupti here (the injection library links against it)")
    inc, _ = cupti_build.find_nvtx_include(hs)
    if not inc:
        raise SystemExit("no NVTX headers (nvtx3/nvToolsExt.h) here")
    d = work_dir("nvtx")
    exe = os.path.join(d, "nvtx_bench")
    cxx = cupti_build.compiler() or ["g++"]
    subprocess.run(cxx + ["-O2", "-std=c++17", "-idirafter", inc, os.path.join(ROOT, "scripts", "c", "nvtx_bench.cpp"),
                          "-o", exe, "-pthread", "-ldl"], check=True)
    if installed:
        return exe, installed_library(hs.major), os.path.dirname(hs.libcupti)
    lib = cupti_build.build_variant(hs, d, log=lambda m: sys.stderr.write(m + "\n"))
    if not lib:
        raise SystemExit("graphsignal's injection library did not build")
    return exe, lib, os.path.dirname(hs.libcupti)


def run_one(config, exe, lib, libdir, calls, threads):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "NVTX_INJECTION"))}
    run_id = None
    if config != "bare":
        run_id = "bench%s" % uuid.uuid4().hex[:10]
        env.update(GRAPHSIGNAL_RUN_ID=run_id, NVTX_INJECTION64_PATH=lib, GRAPHSIGNAL_LOG_LEVEL="error",
                   LD_LIBRARY_PATH=os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p))
        if config == "ours:off":
            env["GRAPHSIGNAL_NVTX"] = "off"
    try:
        p = subprocess.run([exe, str(calls), str(threads)], env=env, capture_output=True, text=True, timeout=600)
    finally:
        if run_id:
            for f in glob.glob("/dev/shm/gs-%s-*" % run_id):
                os.unlink(f)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (config, p.returncode, p.stderr[-3000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1_000_000, help="calls of each kind per thread")
    ap.add_argument("--threads", type=int, default=4, help="the concurrent case's threads (the other is 1)")
    ap.add_argument("--installed", action="store_true",
                    help="use the injection library pip install built (graphsignal/lib/) instead of building one "
                         "from csrc/ here: seconds instead of a minute, for the smoke test")
    a = ap.parse_args()
    exe, lib, libdir = build(a.installed)
    emit(bench="nvtx", event="setup", library=lib, calls=a.calls, reps=a.reps, threads=[1, a.threads])
    res = {}  # (config, threads) -> [rows]
    for rep in range(a.reps):
        order = CONFIGS[rep % len(CONFIGS):] + CONFIGS[:rep % len(CONFIGS)]
        for threads in (1, a.threads):
            for config in order:
                row = run_one(config, exe, lib, libdir, a.calls, threads)
                res.setdefault((config, threads), []).append(row)
                emit(bench="nvtx", event="run", rep=rep, config=config, **row)
    for threads in (1, a.threads):
        for kind in KINDS:
            bare = [r[kind] for r in res[("bare", threads)]]
            line = {"bench": "nvtx", "event": "summary", "threads": threads, "call": kind[:-3],
                    "bare_ns": round(statistics.median(bare), 2)}
            for config in CONFIGS[1:]:
                mine = [r[kind] for r in res[(config, threads)]]
                line[config + "_ns"] = round(statistics.median(mine), 2)
                line[config + "_overhead_ns"] = round(statistics.median(x - y for x, y in zip(mine, bare)), 2)
            emit(**line)


if __name__ == "__main__":
    main()
