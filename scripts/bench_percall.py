"""What each kind of CUDA call costs under each way of collecting it: the
per-call benchmark (scripts/cuda/percall_bench.cu, compiled here with nvcc)
run under

  bare              nothing injected
  floor:<kind>      a minimal CUPTI injection (scripts/cuda/floor_inject.cpp)
                    with one activity kind on, buffers discarded unread:
                    kernel, memcpy, memset, sync, graph (GRAPH_TRACE)
  floor:all         every kind graphsignal's activity collection enables
  floor:callbacks   kernel + graph activity, and API callbacks that return
                    at once on the entry points the hybrid collection hooks,
                    runtime and driver: the floor of the callback method
  floor:callbacks-driver   the same, driver entry points only (what the
                    hybrid collection hooks by default)
  floor:toggled     floor:callbacks-driver, and the copy and memset kinds
                    switched on for 20 ms and off again 50 ms after start:
                    what a sampling window leaves behind
  floor:graph-sampled  kernel activity, driver callbacks including the graph
                    launch entry points, no GRAPH_TRACE: the floor of
                    counting replays by callback (what sampled graph timing
                    would pay between windows; not built: switching
                    GRAPH_TRACE at run time crashed CUPTI 13.0 on an H200,
                    scripts/bench_graph_toggle.py)
  floor:kernel-counted  graph activity, driver callbacks including the
                    kernel launch entry points, no kernel activity: the
                    floor of counting eager kernels by callback
  floor:graph-off   floor:callbacks-driver with GRAPH_TRACE switched off
                    50 ms after start: the same state reached by switching
  floor:none        CUPTI's activity API taken up (buffer callbacks
                    registered), no kind enabled: what CUPTI costs by
                    being attached at all
  floor:sub         a callback subscriber with nothing enabled, the
                    activity API never touched
  baseline          graphsignal's library built from --baseline (an older
                    checkout: "ours before")
  ours:activity     GRAPHSIGNAL_CUPTI_COLLECTION=activity
  ours:hybrid       the default collection
  ours:node, ours:node-activity  --cuda-graph-trace node, the default and the activity collection
  ours:hybrid-both       syncs, copies, memsets hooked in both API domains
  ours:hybrid-runtime    ... in the runtime domain only
  ours:hybrid-nowrite    callbacks that write no ring record
  ours:hybrid-nosample   no copy sampling windows
  ours:hybrid-sample-all sampling windows for memsets too
  ours:nvtx-off     NVTX collection off (GRAPHSIGNAL_NVTX=off; every ours:*
                    config but this one has NVTX_INJECTION64_PATH set, NVTX on)
  ours:nvtx-gpu     NVTX ranges and GPU time per range (GRAPHSIGNAL_NVTX=gpu)
  light             the CUDA driver interposer alone (libgraphsignal_interpose.so
                    preloaded, no CUPTI): --cuda-trace light's counting; its
                    copy ops (h2d_/d2h_ pinned and pageable) include telling
                    the host memory apart (csrc/interpose/hostmem.h; the
                    lookup alone, on a CPU: scripts/bench_hostmem.py)
  light-sampled     the same with every graph launch timed by an event pair
                    (GRAPHSIGNAL_CUDA_SAMPLE=1): the cost of one sampled launch

NVTX ops (nvtx_pushpop, nvtx_startend: one range; nvtx_kernel: a launch
inside a range; nvtx_kernel_outside: a launch outside any, after one): bare
is NVTX with no tool attached (a call is a no-op), ours:hybrid the default
collection, ours:nvtx-gpu with GPU time per range.

Configurations are interleaved (the order rotates each repetition); every
result is the median over repetitions of the difference to the bare run of
the same repetition. Each run is pinned to the same CPUs (--cpus). Our library runs with a ring (as
under graphsignal-run) that nothing drains; each run's ring is removed.
Graph ops run for --settle-ms before they are timed (the library decides
how to time graphs at the first launches).

One JSON line per (configuration, op, repetition), then per op one summary
line: the median per-call time of every configuration, its overhead over
bare, and for ours:hybrid the ratio to the floor (target, issue 15: sync,
small copies and graph launches at most half of floor:all's overhead, the
eager kernel launch at most floor:all's).

  python scripts/bench_percall.py [--reps 5] [--configs bare,floor:all,ours:hybrid] [--baseline DIR]
  python scripts/bench_percall.py --ab 2000 --configs bare,light,light-sampled --ops sync,memset,graph1
      (what the interposer adds per driver call, measured inside one process: percall_bench --ab)
"""
import argparse
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "csrc"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cupti_build  # noqa: E402
import benchutil  # noqa: E402
from benchutil import emit  # noqa: E402

OPS = ("sync", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "memset", "graph1", "graph128", "kernel",
       "nvtx_pushpop", "nvtx_startend", "nvtx_kernel", "nvtx_kernel_outside")
FLOOR_KIND = {"sync": "sync", "h2d_pinned": "memcpy", "h2d_pageable": "memcpy", "d2h_pinned": "memcpy",
              "d2h_pageable": "memcpy", "memset": "memset", "graph1": "graph", "graph128": "graph", "kernel": "kernel",
              "graph128_sync": "graph", "kernel_sync": "kernel",
              "nvtx_pushpop": "kernel", "nvtx_startend": "kernel", "nvtx_kernel": "kernel",
              "nvtx_kernel_outside": "kernel"}
ALL_KINDS = "kernel,memcpy,memcpy2,memset,sync,context,graph"
CONFIGS = ("bare", "floor:kernel", "floor:memcpy", "floor:memset", "floor:sync", "floor:graph", "floor:all",
           "floor:callbacks", "floor:callbacks-driver", "floor:toggled", "floor:graph-sampled", "floor:graph-off",
           "floor:kernel-counted", "floor:none", "floor:sub",
           "baseline", "ours:activity", "ours:hybrid", "ours:hybrid-both", "ours:hybrid-runtime",
           "ours:hybrid-nowrite", "ours:hybrid-nosample", "ours:hybrid-sample-all", "ours:node", "ours:node-activity",
           "ours:nvtx-off", "ours:nvtx-gpu", "light", "light-sampled")
OURS_ENV = {
    "ours:activity": {"GRAPHSIGNAL_CUPTI_COLLECTION": "activity"},
    "ours:hybrid": {},
    "ours:hybrid-both": {"GRAPHSIGNAL_CUPTI_CB_DOMAINS": "runtime,driver"},
    "ours:hybrid-runtime": {"GRAPHSIGNAL_CUPTI_CB_DOMAINS": "runtime"},
    "ours:hybrid-nowrite": {"GRAPHSIGNAL_CUPTI_CB_WRITE": "0"},
    "ours:hybrid-nosample": {"GRAPHSIGNAL_CUPTI_SAMPLE_MS": "0"},
    "ours:hybrid-sample-all": {"GRAPHSIGNAL_CUPTI_SAMPLE_KINDS": "memcpy,memset"},
    "ours:nvtx-off": {"GRAPHSIGNAL_NVTX": "off"},
    "ours:nvtx-gpu": {"GRAPHSIGNAL_NVTX": "gpu"},
    "ours:node": {"GRAPHSIGNAL_CUDA_GRAPH_TRACE": "node"},
    "ours:node-activity": {"GRAPHSIGNAL_CUDA_GRAPH_TRACE": "node", "GRAPHSIGNAL_CUPTI_COLLECTION": "activity"},
}


def work_dir():
    return benchutil.work_dir("percall")


def compile_bench(exe, cuda_include=None, source="percall_bench.cu", extra=("-lcuda", "-ldl")):
    """nvcc-compiles scripts/cuda/<source> (percall_bench.cu) against the
    shared CUDA runtime (as PyTorch and llama.cpp load it), with the
    toolkit's library folder as its rpath so it runs without
    LD_LIBRARY_PATH; `extra` goes to the link (libraries, their rpaths)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        for root in ("/usr/local/cuda/bin/nvcc",) + tuple(sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"))):
            if os.path.exists(root):
                nvcc = root
                break
    if not nvcc:
        raise SystemExit("no nvcc: the per-call benchmark needs the CUDA toolkit")
    roots = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    if cuda_include:
        roots.insert(0, os.path.dirname(cuda_include.rstrip("/")))
    dirs = []
    for root in roots:
        for d in ("lib64", "lib", "targets/x86_64-linux/lib"):
            p = os.path.realpath(os.path.join(root, d))
            if glob.glob(os.path.join(p, "libcudart.so*")) and p not in dirs:
                dirs.append(p)
    rpath = [x for p in dirs for x in ("-Xlinker", "-rpath", "-Xlinker", p)]
    subprocess.run([nvcc, "-O2", "-cudart", "shared", "-o", exe, os.path.join(ROOT, "scripts", "cuda", source)]
                   + list(extra) + rpath, check=True)
    return exe


def build_floor(hs, d):
    """scripts/cuda/floor_inject.cpp as d/libfloor_inject.so, linked to hs's libcupti."""
    floor = os.path.join(d, "libfloor_inject.so")
    subprocess.run((cupti_build.compiler() or ["g++"]) + ["-std=c++17", "-O2", "-fPIC", "-shared",
                   "-I", hs.cupti_include, "-I", hs.cuda_include, "-idirafter", cupti_build.COMPAT,
                   os.path.join(ROOT, "scripts", "cuda", "floor_inject.cpp"), hs.libcupti, "-o", floor], check=True)
    return floor


def build(hs, baseline):
    """(bench binary, floor injection, our library, baseline library or None)."""
    d = work_dir()
    exe = compile_bench(os.path.join(d, "percall_bench"), hs.cuda_include)
    floor = build_floor(hs, d)
    os.makedirs(os.path.join(d, "ours"), exist_ok=True)
    lib = cupti_build.build_variant(hs, os.path.join(d, "ours"), log=lambda m: sys.stderr.write(m + "\n"), force=True)
    if not lib:
        raise SystemExit("graphsignal's injection library did not build")
    old = None
    if baseline:
        # the baseline tree's own build helper, on its own sources
        spec = importlib.util.spec_from_file_location("baseline_cupti_build",
                                                      os.path.join(baseline, "csrc", "cupti_build.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        bhs = mod.HeaderSet(*hs)
        os.makedirs(os.path.join(d, "baseline"), exist_ok=True)
        old = mod.build_variant(bhs, os.path.join(d, "baseline"), log=lambda m: sys.stderr.write(m + "\n"), force=True)
    interpose = cupti_build.build_interpose_lib(d, log=lambda m: sys.stderr.write(m + "\n"))
    return exe, floor, (lib, interpose), old


def run_one(config, exe, floor, lib, old, libdir, ops, diag=False, cpus=None, extra_env=None, settle_ms=400,
            extra_args=()):
    lib, interpose = lib if isinstance(lib, tuple) else (lib, None)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION", "NVTX_INJECTION", "GS_FLOOR", "GS_INTERPOSE"))
           and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p)
    run_id = None
    if config.startswith("floor:"):
        kind = config.split(":", 1)[1]
        env["CUDA_INJECTION64_PATH"] = floor
        if kind.startswith("callbacks") or kind in ("toggled", "graph-sampled", "graph-off", "kernel-counted"):
            env["GS_FLOOR_KINDS"] = {"graph-sampled": "kernel,context", "kernel-counted": "graph,context"}.get(
                kind, "kernel,graph,context")
            if kind == "kernel-counted":
                env["GS_FLOOR_KERNEL_LAUNCH"] = "1"
            env["GS_FLOOR_CALLBACKS"] = "1" if kind == "callbacks" else "driver"
            if kind == "toggled":
                env["GS_FLOOR_TOGGLE_MS"] = "50"
            if kind == "graph-sampled":
                env["GS_FLOOR_GRAPH_LAUNCH"] = "1"
            if kind == "graph-off":
                env["GS_FLOOR_GRAPH_OFF_MS"] = "50"
        elif kind == "none":
            env["GS_FLOOR_KINDS"] = ""  # the activity API taken up (buffer callbacks), no kind enabled
        elif kind == "sub":
            env.update(GS_FLOOR_NO_ACTIVITY="1", GS_FLOOR_CALLBACKS="none")  # a subscriber, nothing else
        else:
            env["GS_FLOOR_KINDS"] = ALL_KINDS if kind == "all" else kind
    elif config in ("light", "light-sampled"):
        if not interpose:
            raise RuntimeError("the interposer did not build")
        env["LD_PRELOAD"] = interpose
        if config == "light-sampled":
            env.update(GRAPHSIGNAL_CUDA_SAMPLE="1", GRAPHSIGNAL_CUDA_SAMPLE_RATE="0")
        if diag:
            env["GRAPHSIGNAL_INTERPOSE_REPORT"] = os.path.join(work_dir(), "light-report")
    elif config == "baseline" or config.startswith("ours:"):
        env["CUDA_INJECTION64_PATH"] = old if config == "baseline" else lib
        if config != "baseline":
            env["NVTX_INJECTION64_PATH"] = lib  # as graphsignal-run sets it (ours:nvtx-off: the library says no)
        run_id = "bench%s" % uuid.uuid4().hex[:10]
        env["GRAPHSIGNAL_RUN_ID"] = run_id
        env["GRAPHSIGNAL_LOG_LEVEL"] = "debug" if diag else "error"
        env.update(OURS_ENV.get(config, {}))
    env.update(extra_env or {})
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    try:
        p = subprocess.run([exe, "--ops", ",".join(ops), "--settle-ms", str(settle_ms)] + list(extra_args), env=env,
                           capture_output=True, text=True, timeout=300, preexec_fn=pin)
    finally:
        if run_id:
            for f in glob.glob("/dev/shm/gs-%s-*" % run_id):
                os.unlink(f)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (config, p.returncode, p.stderr[-3000:]))
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    return rows, p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--baseline", help="a source tree (an older checkout) whose library is 'ours before'")
    ap.add_argument("--major", type=int, default=None, help="CUDA major of the headers to build with")
    ap.add_argument("--cpus", default="2-5", help="CPUs every run is pinned to ('' for none)")
    ap.add_argument("--settle-ms", type=int, default=400, help="graph ops run this long before they are timed")
    ap.add_argument("--ab", type=int, default=0, metavar="ROUNDS",
                    help="instead: each config's cost per driver call measured inside one process, ROUNDS "
                         "alternating blocks through the entry point the runtime hands out and through libcuda's "
                         "own export (percall_bench --ab; ops sync, h2d_pinned, memset, graph1, graph128, kernel)")
    a = ap.parse_args()
    benchutil.require_gpu(__file__)
    cpus = set()
    for part in filter(None, a.cpus.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    cpus &= os.sched_getaffinity(0)
    configs = [c for c in a.configs.split(",") if c and (c != "baseline" or a.baseline)]
    ops = a.ops.split(",")
    sets = cupti_build.find_header_sets()
    hs = None
    for major in ([a.major] if a.major else [13, 12]):
        hs = cupti_build.pick(sets, major)
        if hs:
            break
    if hs is None:
        raise SystemExit("no CUPTI headers with libcupti here")
    exe, floor, lib, old = build(hs, a.baseline)
    libdir = os.path.dirname(hs.libcupti)
    emit(bench="percall", event="setup", cuda=[hs.major, hs.minor], libcupti=hs.libcupti, configs=configs, reps=a.reps)

    if a.ab:
        ab_runs(a, configs, ops, exe, floor, lib, old, libdir, cpus)
        return
    res = {}  # (config, op) -> {"us": [...], "api_us": [...]}
    for rep in range(a.reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for config in order:
            rows, _ = run_one(config, exe, floor, lib, old, libdir, ops, cpus=cpus, settle_ms=a.settle_ms)
            for r in rows:
                d = res.setdefault((config, r["op"]), {"us": [], "api_us": []})
                d["us"].append(r["us"])
                d["api_us"].append(r["api_us"])
                emit(bench="percall", event="run", rep=rep, config=config, op=r["op"], calls=r["calls"], us=r["us"],
                     api_us=r["api_us"])
    if "ours:hybrid" in configs or "light" in configs:
        # what the callbacks saw: calls by domain, which driver calls the runtime's make, captures
        for config in ("ours:hybrid", "ours:hybrid-both", "ours:node", "light"):
            if config not in configs:
                continue
            for f in glob.glob(os.path.join(work_dir(), "light-report.*.json")):
                os.unlink(f)
            _, err = run_one(config, exe, floor, lib, old, libdir, ops, diag=True, cpus=cpus, settle_ms=a.settle_ms)
            if config == "light":
                # what the interposer saw of the bench's calls: rows bound and called, how each answer was bound
                for f in glob.glob(os.path.join(work_dir(), "light-report.*.json")):
                    with open(f) as fh:
                        r = json.load(fh)
                    emit(bench="percall", event="diagnostics", config=config,
                         rows={x["name"]: x["calls"] for x in r["rows"] if x["calls"]},
                         kernels=r["kernels"][:5], graphs=r["graphs"][:5], syncs=r["syncs"], copies=r["copies"],
                         memsets=r["memsets"], bound_by_export=r["bound_by_export"],
                         bound_by_rule=r["bound_by_rule"], unbound=r["unbound"])
                continue
            emit(bench="percall", event="diagnostics", config=config,
                 lines=[x.split(": ", 1)[-1] for x in err.splitlines()
                        if "exit:" in x or "collecting" in x or "CUDA graph" in x])
    summarize(res, configs, ops, a.reps)


def ab_runs(a, configs, ops, exe, floor, lib, old, libdir, cpus):
    """--ab: per repetition, each config (interleaved) runs percall_bench --ab;
    per op one summary: each config's median over repetitions of added_ns
    (the median, over rounds, of wrapped - real in one process). Bare's
    added_ns is the method's own noise: both paths are then one function."""
    added = {}
    for rep in range(a.reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for config in order:
            rows, _ = run_one(config, exe, floor, lib, old, libdir, ops, cpus=cpus, settle_ms=a.settle_ms,
                              extra_args=("--ab-rounds", str(a.ab)))
            for r in rows:
                added.setdefault((config, r["op"]), []).append(r["added_ns"])
                emit(bench="percall", event="ab", rep=rep, config=config, **r)
    for op in ops:
        line = {"bench": "percall", "event": "ab_summary", "op": "ab:" + op, "reps": a.reps}
        for c in configs:
            v = added.get((c, "ab:" + op))
            if v:
                line["added_ns:" + c] = round(statistics.median(v), 1)
                line["added_ns_range:" + c] = [round(min(v), 1), round(max(v), 1)]
        if any(k.startswith("added_ns:") for k in line):
            emit(**line)


def summarize(res, configs, ops, reps):
    """Per op: each configuration's median time, and its overhead: the median
    over repetitions of (its time - bare's time in the same repetition)."""
    def paired(c, op, m):
        a, b = res[(c, op)][m], res[("bare", op)][m]
        return statistics.median(x - y for x, y in zip(a, b))
    for op in ops:
        if ("bare", op) not in res:
            continue
        line = {"bench": "percall", "event": "summary", "op": op, "reps": reps,
                "bare_us": round(statistics.median(res[("bare", op)]["us"]), 4),
                "bare_api_us": round(statistics.median(res[("bare", op)]["api_us"]), 4)}
        over = {}
        for c in configs:
            if (c, op) not in res or c == "bare":
                continue
            over[c] = paired(c, op, "us")
            line["us:" + c] = round(statistics.median(res[(c, op)]["us"]), 4)
            line["overhead_us:" + c] = round(over[c], 4)
            line["api_overhead_us:" + c] = round(paired(c, op, "api_us"), 4)
        floor_all = over.get("floor:all")
        floor_kind = over.get("floor:" + FLOOR_KIND[op])
        ours = over.get("ours:hybrid")
        if op.startswith("nvtx"):
            # NVTX: no CUPTI floor; what a range (or a launch inside one) costs over NVTX without a tool
            line["nvtx_us"] = {c: round(over[c], 4) for c in ("ours:hybrid", "ours:nvtx-off", "ours:nvtx-gpu")
                               if c in over}
            emit(**line)
            continue
        if ours is not None and floor_all:
            line["hybrid_over_floor_all"] = round(ours / floor_all, 3) if floor_all > 0 else None
            limit = floor_all if op == "kernel" else 0.5 * floor_all
            line["target"] = "<= floor:all" if op == "kernel" else "<= 0.5 x floor:all"
            line["within_target"] = ours <= limit
        if ours is not None and floor_kind:
            line["hybrid_over_floor_kind"] = round(ours / floor_kind, 3) if floor_kind > 0 else None
        emit(**line)


if __name__ == "__main__":
    main()
