#!/usr/bin/env python3
"""Kernel names (JSON lines), on the real symbols of
tests/data/kernel_symbols.txt: microseconds per symbol to demangle through
libstdc++ (ctypes) and through c++filt (one process for the batch), and
how many agree; microseconds per symbol to describe a new one (demangle,
shorten, categorize); and the payload's cost per kernel profile of 250
frames, rendered with and without display names (the names cached, as
after a kernel's first sighting), medians of several repetitions,
interleaved."""
import argparse
import os
import shutil
import statistics
import subprocess
import time

from benchutil import ROOT, emit

from graphsignal.naming import kernels as kn
from graphsignal.sidecar.store import MetricStore

CORPUS = os.path.join(ROOT, "tests", "data", "kernel_symbols.txt")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="one repetition of each: the smoke test's check that it runs")
    a = ap.parse_args()
    reps = 1 if a.smoke else None
    syms = [ln.strip() for ln in open(CORPUS) if ln.strip() and not ln.startswith("#")]
    mangled = [s for s in syms if s.startswith("_Z")]
    cxa = kn.Demangler(cxxfilt=None)
    t_cxa, t_filt, agree = [], [], None
    for _ in range(reps or 5):
        t0 = time.perf_counter()
        out = cxa.demangle_all(mangled)
        t_cxa.append((time.perf_counter() - t0) / len(mangled) * 1e6)
        if shutil.which("c++filt"):
            t0 = time.perf_counter()
            ref = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout
            t_filt.append((time.perf_counter() - t0) / len(mangled) * 1e6)
            agree = sum(a == b for a, b in zip(out, ref.split("\n")))
    emit(bench="kernel_names_demangle", symbols=len(mangled), cxa_us=round(statistics.median(t_cxa), 2),
         cxxfilt_batch_us=round(statistics.median(t_filt), 2) if t_filt else None, agree_with_cxxfilt=agree)
    t_new = []
    for _ in range(reps or 3):
        names = kn.Names()
        t0 = time.perf_counter()
        names.describe_all(syms)
        t_new.append((time.perf_counter() - t0) / len(syms) * 1e6)
    emit(bench="kernel_names_describe_new", symbols=len(syms), us_per_symbol=round(statistics.median(t_new), 1))
    store = MetricStore()
    store.add_profile("cuda_kernels_nanoseconds", {"process.pid": "1"},
                      [(s, i + 1, 1) for i, s in enumerate(syms[:250])])
    store.add_profile("probe_ops_nanoseconds", {"process.pid": "1"}, [(s, i + 1, 1) for i, s in enumerate(syms[:250])])
    (named,) = store.lookup("cuda_kernels_nanoseconds")
    (plain,) = store.lookup("probe_ops_nanoseconds")  # the same frames, not a kernel profile: no names
    named.to_json()
    times = {"with_names": [], "without": []}
    for _ in range(reps or 9):
        for case, ser in (("with_names", named), ("without", plain)):
            t0 = time.perf_counter()
            for _ in range(10 if a.smoke else 100):
                ser.touch(ser.updated_ns)
                ser.to_json()
            times[case].append((time.perf_counter() - t0) / 100 * 1e6)
    w, wo = statistics.median(times["with_names"]), statistics.median(times["without"])
    emit(bench="kernel_profile_render", frames=250, with_names_us=round(w, 1), without_us=round(wo, 1),
         ratio=round(w / wo, 2), with_names_bytes=len(named.to_json()), without_bytes=len(plain.to_json()))


if __name__ == "__main__":
    main()
