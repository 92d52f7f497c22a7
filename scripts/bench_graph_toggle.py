"""The graph-trace toggle spike (scripts/cuda/graph_trace_toggle.cu): does
switching CUPTI's GRAPH_TRACE and CONCURRENT_KERNEL activity kinds off and
on at run time leave a per-launch cost behind, and does it reach graphs
instantiated before the switch? The answers decide how graphsignal's
default collection times graph launches: every run that switched GRAPH_TRACE
crashed CUPTI 13.0 on an H200, so every replay stays traced.

Runs, interleaved for --reps repetitions (each pinned to --cpus):
  bare            the program without CUPTI
  cupti           its phases (see the .cu file), switching kinds without a flush
  cupti-flush     the same, with cuptiActivityFlushAll(0) after each switch off

Prints every row the program prints (tagged with rep and run; a run that
dies adds a row {"event": "crashed", "exit": ...}: on CUDA 13.0 with driver
580 on an H200 the cupti runs die of SIGSEGV inside cuGraphLaunch, in
libcupti, once GRAPH_TRACE has been switched at run time), then
  {"event": "cost", ...}      per phase and graph: median µs inside
                              cudaGraphLaunch, and the median over
                              repetitions of (that - bare's, same repetition)
  {"event": "finding", ...}   each question with its answer (true/false/null
                              when the rows do not say) and the evidence
  {"event": "decision", ...}  what graphsignal's sampling can rely on

  python scripts/bench_graph_toggle.py [--reps 5] [--launches 4000] [--cpus 2-5]

--stress SECONDS instead runs the program's stress mode (a second thread
switching GRAPH_TRACE every --toggle-ms while the main thread launches,
instantiates, updates and destroys graphs), once with GRAPH_TRACE starting
on (graph mode), once off (node mode), and once switching kernel tracing
instead (eager kernels counted by launch callbacks), one line per run:
{"event": "stress", "survived": true/false, "exit": rc or -signal, ...}.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import cupti_build  # noqa: E402
from bench_percall import compile_bench  # noqa: E402
from benchutil import emit, require_gpu, work_dir  # noqa: E402

RUNS = {"bare": ["--mode", "bare"], "cupti": ["--mode", "cupti"],
        "cupti-flush": ["--mode", "cupti", "--flush-on-toggle"]}


def build(hs):
    d = work_dir("graph-toggle")
    libdir = os.path.dirname(hs.libcupti)
    # libcupti by its path (a wheel's has no unversioned name); nvcc hands a .so.N to the linker only so
    extra = ["-I", hs.cupti_include, "-I", os.path.join(ROOT, "csrc", "cupti"), "-Xlinker", hs.libcupti, "-ldl",
             "-Xlinker", "-rpath", "-Xlinker", libdir]
    return compile_bench(os.path.join(d, "graph_trace_toggle"), hs.cuda_include, source="graph_trace_toggle.cu",
                         extra=extra), libdir


def run(exe, libdir, args, launches, cpus):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    p = subprocess.run([exe] + args + ["--launches", str(launches)], env=env, capture_output=True, text=True,
                       timeout=600, preexec_fn=pin)
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0:
        # a finding too: on CUDA 13.0 (driver 580, H200) CUPTI crashes inside cuGraphLaunch after a switch
        rows.append({"event": "crashed", "args": " ".join(args), "exit": p.returncode, "stderr": p.stderr[-600:],
                     "last_phase": rows[-1].get("phase") if rows else None})
    return rows


def stress(exe, libdir, seconds, toggle_ms):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p)
    for node, kernels in ((False, False), (True, False), (False, True)):
        args = [exe, "--stress", str(seconds), "--toggle-ms", str(toggle_ms)] + (["--node"] if node else []) + (
            ["--toggle-kernels"] if kernels else [])
        p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=seconds + 120)
        rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        row = rows[-1] if rows else {"node": int(node), "toggled": "kernel" if kernels else "graph",
                                     "toggle_ms": toggle_ms}
        row.update(bench="graph_toggle", event="stress", survived=p.returncode == 0, exit=p.returncode,
                   stderr=p.stderr[-600:])
        emit(**row)


def rows_of(rows, event, **match):
    return [r for r in rows if r.get("event") == event and all(r.get(k) == v for k, v in match.items())]


def all_equal(rows, predicate):
    """True when every row satisfies predicate, False when none does, None
    when there are no rows or they disagree."""
    got = [bool(predicate(r)) for r in rows]
    if not got:
        return None
    if all(got):
        return True
    if not any(got):
        return False
    return None


def findings(cupti_rows):
    """The questions, answered from one kind of run's rows (all repetitions)."""
    L = lambda phase, graph: rows_of(cupti_rows, "launches", phase=phase, graph=graph)  # noqa: E731
    out = []

    def say(name, answer, question, evidence):
        out.append({"event": "finding", "finding": name, "answer": answer, "question": question,
                    "evidence": evidence})

    rows = L("p2_kernel_graph_cb", "A1") + L("p2_kernel_graph_cb", "A128") + L("p4_kernel_graph_cb_again", "A1") + \
        L("p4_kernel_graph_cb_again", "A128")
    say("graph_trace_reaches_graphs_instantiated_before",
        all_equal(rows, lambda r: r["graph_records"] == r["launches"]),
        "GRAPH_TRACE switched on after instantiation: one record per launch?",
        [(r["phase"], r["graph"], r["launches"], r["graph_records"]) for r in rows])
    rows = L("p3_kernel_cb_graph_off", "A128") + L("p8_kernel_cb_graph_off_again", "A128")
    say("kernel_trace_reaches_graphs_instantiated_before",
        all_equal(rows, lambda r: r["node_records"] == r["launches"] * r["nodes"]),
        "CONCURRENT_KERNEL on (GRAPH_TRACE off) after a graph was instantiated untraced: a record per node?",
        [(r["phase"], r["graph"], r["launches"], r["node_records"]) for r in rows])
    rows = [r for p in ("p1_kernel_graph", "p2_kernel_graph_cb", "p4_kernel_graph_cb_again", "p9_kernel_graph_cb_last")
            for r in rows_of(cupti_rows, "launches", phase=p)]
    say("graph_trace_hides_nodes", all_equal(rows, lambda r: r["node_records"] == 0),
        "with GRAPH_TRACE and CONCURRENT_KERNEL on, no per-node kernel records?",
        [(r["phase"], r["graph"], r["node_records"]) for r in rows if r["node_records"]][:12])
    rows = [r for p in ("p3_kernel_cb_graph_off", "p8_kernel_cb_graph_off_again")
            for r in rows_of(cupti_rows, "launches", phase=p)]
    say("graph_off_stops_graph_records", all_equal(rows, lambda r: r["graph_records"] == 0),
        "GRAPH_TRACE switched off: no graph records, for graphs instantiated while it was on too?",
        [(r["phase"], r["graph"], r["instantiated_in"], r["graph_records"]) for r in rows])
    say("kernel_without_graph_traces_nodes", all_equal(rows, lambda r: r["node_records"] == r["launches"] * r["nodes"]),
        "CONCURRENT_KERNEL on and GRAPH_TRACE off: every node of every graph traced (node mode's price)?",
        [(r["phase"], r["graph"], r["instantiated_in"], r["launches"] * r["nodes"], r["node_records"]) for r in rows])
    rows = [r for p in ("p5_cb_only_after_off", "p7_nothing_after_all")
            for r in rows_of(cupti_rows, "launches", phase=p)]
    say("off_means_off", all_equal(rows, lambda r: r["graph_records"] == 0 and r["node_records"] == 0),
        "both kinds switched off: no records at all?",
        [(r["phase"], r["graph"], r["graph_records"], r["node_records"]) for r in rows])
    rows = [r for p in ("p2_kernel_graph_cb", "p4_kernel_graph_cb_again", "p6_graph_cb", "p9_kernel_graph_cb_last")
            for r in rows_of(cupti_rows, "launches", phase=p)]
    say("launch_correlation_ids_match_records",
        all_equal(rows, lambda r: r["graph_records"] > 0 and r["corr_matched"] == r["graph_records"]),
        "the correlation id a cuGraphLaunch callback sees is the one its GRAPH_TRACE record carries?",
        [(r["phase"], r["graph"], r["graph_records"], r["corr_matched"]) for r in rows])
    eager = [r for r in rows_of(cupti_rows, "eager") if r["state"].startswith("K")]
    say("eager_kernels_exact_after_switches", all_equal(eager, lambda r: r["kernel_records"] == r["kernels"]),
        "eager kernel records equal the launches in every phase with kernel tracing on, after any switch?",
        [(r["phase"], r["kernels"], r["kernel_records"]) for r in eager])
    zero = rows_of(cupti_rows, "eager")
    say("callbacks_carry_correlation_ids", all_equal([r for r in zero if r["launch_callbacks"]],
                                                     lambda r: r["callbacks_with_zero_corr"] == 0),
        "every graph launch callback has a non-zero correlation id (without any API activity kind on)?",
        [(r["phase"], r["launch_callbacks"], r["callbacks_with_zero_corr"]) for r in zero if r["launch_callbacks"]])
    return out


def decision(found, crashed=()):
    f = {x["finding"]: x["answer"] for x in found}
    if crashed:
        return {"event": "decision", "graph_mode_sampling": False, "node_mode_sampling": False,
                "why": ["switching CUPTI's activity kinds at run time crashed the program (%s): no sampling window "
                        "can switch GRAPH_TRACE; every replay stays traced" % "; ".join(
                            "%s: exit %s after phase %s" % (c["run"], c["exit"], c.get("last_phase"))
                            for c in crashed)]}
    graph_mode = bool(f.get("graph_off_stops_graph_records") and f.get("graph_trace_reaches_graphs_instantiated_before")
                      and f.get("kernel_without_graph_traces_nodes") is False
                      and f.get("launch_correlation_ids_match_records"))
    node_mode = bool(f.get("graph_trace_hides_nodes") and f.get("kernel_trace_reaches_graphs_instantiated_before")
                     and f.get("kernel_without_graph_traces_nodes") and f.get("callbacks_carry_correlation_ids"))
    why = []
    if f.get("kernel_without_graph_traces_nodes"):
        why.append("with kernel tracing on and GRAPH_TRACE off CUPTI traces every graph node, so graph mode cannot "
                   "switch GRAPH_TRACE off between windows while eager kernels stay on activity records: it keeps "
                   "GRAPH_TRACE on (exact); graphsignal's probe finds the same at run time")
    if not f.get("graph_trace_reaches_graphs_instantiated_before"):
        why.append("GRAPH_TRACE switched on does not reach graphs instantiated before: sampling windows would time "
                   "only graphs instantiated inside one")
    if node_mode:
        why.append("node mode can keep GRAPH_TRACE on (no per-node records) and switch it off in windows that time "
                   "the nodes")
    return {"event": "decision", "graph_mode_sampling": graph_mode, "node_mode_sampling": node_mode, "why": why}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--launches", type=int, default=4000, help="launches of each 1-node graph per phase (128: /8)")
    ap.add_argument("--cpus", default="2-5", help="CPUs every run is pinned to ('' for none)")
    ap.add_argument("--major", type=int, default=None)
    ap.add_argument("--stress", type=float, default=0, help="seconds of the concurrent-toggle stress run per mode")
    ap.add_argument("--toggle-ms", type=int, default=5)
    a = ap.parse_args()
    require_gpu(__file__)
    cpus = set()
    for part in filter(None, a.cpus.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    cpus &= os.sched_getaffinity(0)
    sets = cupti_build.find_header_sets()
    hs = None
    for major in ([a.major] if a.major else [13, 12]):
        hs = cupti_build.pick(sets, major)
        if hs:
            break
    if hs is None:
        raise SystemExit("no CUPTI headers with libcupti here")
    exe, libdir = build(hs)
    emit(bench="graph_toggle", event="setup", cuda=[hs.major, hs.minor], libcupti=hs.libcupti, reps=a.reps)
    if a.stress:
        stress(exe, libdir, a.stress, a.toggle_ms)
        return
    got = {k: [] for k in RUNS}
    names = list(RUNS)
    for rep in range(a.reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            for r in run(exe, libdir, RUNS[name], a.launches, cpus):
                r.update(bench="graph_toggle", rep=rep, run=name)
                got[name].append(r)
                emit(**r)
    # per-launch cost: median over repetitions of (phase's api_us - bare's, same repetition)
    bare = {(r["rep"], r["nodes"]): r["api_us"] for r in got["bare"] if r["event"] == "launches"}
    for name in ("cupti", "cupti-flush"):
        keys = sorted({(r["phase"], r["graph"]) for r in got[name] if r["event"] == "launches"})
        for phase, graph in keys:
            rs = rows_of(got[name], "launches", phase=phase, graph=graph)
            nodes = rs[0]["nodes"]
            over = [r["api_us"] - bare[(r["rep"], nodes)] for r in rs if (r["rep"], nodes) in bare]
            emit(bench="graph_toggle", event="cost", run=name, phase=phase, state=rs[0]["state"], graph=graph,
                 nodes=nodes, instantiated_in=rs[0]["instantiated_in"],
                 api_us=round(statistics.median(r["api_us"] for r in rs), 4),
                 overhead_us=round(statistics.median(over), 4) if over else None,
                 wall_us=round(statistics.median(r["wall_us"] for r in rs), 4),
                 graph_records=[min(r["graph_records"] for r in rs), max(r["graph_records"] for r in rs)],
                 node_records=[min(r["node_records"] for r in rs), max(r["node_records"] for r in rs)],
                 launches=rs[0]["launches"])
        toggles = rows_of(got[name], "toggle")
        for key in ("graph_us", "kernel_us", "callbacks_us", "flush_us"):
            vals = [t[key] for t in toggles if t[key]]
            if vals:
                emit(bench="graph_toggle", event="toggle_cost", run=name, call=key, median_us=round(
                    statistics.median(vals), 2), max_us=round(max(vals), 2), n=len(vals))
    found = findings(got["cupti"])
    for f in found:
        f["bench"] = "graph_toggle"
        emit(**f)
    flush_found = {f["finding"]: f["answer"] for f in findings(got["cupti-flush"])}
    emit(bench="graph_toggle", event="flush_on_toggle_agrees",
         same=all(flush_found.get(f["finding"]) == f["answer"] for f in found),
         differing=[f["finding"] for f in found if flush_found.get(f["finding"]) != f["answer"]])
    crashed = [r for rs in got.values() for r in rs if r.get("event") == "crashed"]
    d = decision(found, crashed)
    d["bench"] = "graph_toggle"
    emit(**d)


if __name__ == "__main__":
    main()
