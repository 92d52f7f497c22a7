#!/usr/bin/env python3
"""What classifying a copy's host memory costs the CUDA driver interposer
(--cuda-trace light; csrc/interpose/hostmem.h), per copy, on this CPU: no
GPU needed.

scripts/c/hostmem_bench.c copies 64 bytes through the interposer's stand-in
driver (tests/support/interpose/fake_libcuda.c, whose copy does nothing but
count) from a page-locked range, from pageable memory, and from a different
range each call (htod_spread: every copy searches the table), with 0, 16
and 1024 ranges registered, under

  bare      nothing preloaded
  baseline  the interposer built from --baseline (a checkout before the
            host memory registry: copies counted by kind only)
  ours      the interposer built from this tree

Configurations are interleaved (the order rotates each repetition), each
run pinned to one CPU (--cpu). One JSON line per (repetition, configuration,
ranges, op), then per (ranges, op) one summary line: each configuration's
median ns per copy and `added_ns`, the median over repetitions of ours -
baseline in the same repetition (what the registry adds to a copy).

  python scripts/bench_hostmem.py [--reps 7] [--calls 2000000] [--baseline /path/to/older/checkout]
"""
import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys

from benchutil import ROOT, compile_c, emit, work_dir

RANGES = (0, 16, 1024)


def build_interposer(tree, out_dir):
    spec = importlib.util.spec_from_file_location("cupti_build_" + str(abs(hash(tree))),
                                                  os.path.join(tree, "csrc", "cupti_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    os.makedirs(out_dir, exist_ok=True)
    lib = mod.build_interpose_lib(out_dir, log=lambda m: sys.stderr.write(m + "\n"))
    if not lib:
        raise SystemExit("the interposer of %s did not build" % tree)
    return lib


def build(baseline):
    d = work_dir("hostmem")
    fake = os.path.join(d, "fake")
    os.makedirs(fake, exist_ok=True)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wl,-Bsymbolic",
                    os.path.join(ROOT, "tests", "support", "interpose", "fake_libcuda.c"),
                    "-o", os.path.join(fake, "libcuda.so.1")], check=True)
    libs = {"bare": None, "ours": build_interposer(ROOT, os.path.join(d, "ours"))}
    if baseline:
        libs["baseline"] = build_interposer(baseline, os.path.join(d, "baseline"))
    return compile_c("hostmem_bench.c", extra=["-ldl"]), fake, libs


def run_one(exe, fake, lib, ranges, calls, cpu):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHSIGNAL_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = fake
    if lib:
        env["LD_PRELOAD"] = lib
    argv = [exe, str(ranges), str(calls)]
    if cpu is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", str(cpu)] + argv
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--baseline", help="an older checkout whose interposer is the baseline")
    ap.add_argument("--cpu", type=int, default=1, help="the CPU every run is pinned to (-1: none)")
    a = ap.parse_args()
    exe, fake, libs = build(a.baseline)
    configs = list(libs)
    cpu = None if a.cpu < 0 else a.cpu
    res = {}  # (config, ranges, op) -> [ns per call, one per repetition]
    for rep in range(a.reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for ranges in RANGES:
            for config in order:
                for r in run_one(exe, fake, libs[config], ranges, a.calls, cpu):
                    res.setdefault((config, ranges, r["op"]), []).append(r["ns_per_call"])
                    emit(bench="hostmem", event="run", rep=rep, config=config, ranges=ranges, op=r["op"],
                         calls=r["calls"], ns_per_call=r["ns_per_call"])
    for ranges in RANGES:
        for op in ("htod_pinned", "htod_pageable", "dtoh_pinned", "htod_spread"):
            line = {"bench": "hostmem", "event": "summary", "ranges": ranges, "op": op, "reps": a.reps}
            for config in configs:
                line["ns:" + config] = round(statistics.median(res[(config, ranges, op)]), 2)
            if "baseline" in libs:
                diffs = [o - b for o, b in zip(res[("ours", ranges, op)], res[("baseline", ranges, op)])]
                line["added_ns"] = round(statistics.median(diffs), 2)
                line["added_ns_range"] = [round(min(diffs), 2), round(max(diffs), 2)]
            emit(**line)


if __name__ == "__main__":
    main()
