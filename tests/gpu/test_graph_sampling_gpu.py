"""Sampled CUDA graph timing on a real GPU: a decode-like PyTorch CUDA graph
(scripts/workloads/graph_decode.py: a few dozen kernels, a sync and a
logits copy after every replay) runs under both collections, interleaved
(hybrid, the default, then GRAPHSIGNAL_CUPTI_COLLECTION=activity, three
times each):

- replay counts are exact in both (every replay the workload made, once);
- the hybrid collection's time per replay (estimates tagged
  duration=sampled, plus whatever its records counted) lands within 2 % of
  the activity collection's exact figure (medians over the runs);
- the run-time decision (graph_sampling.h: sample, or trace every replay)
  is printed with its evidence, and the launch callbacks saw the launches;
- node mode: kernel counts per symbol equal the activity collection's,
  and the kernel time inside graphs lands within 3 %.

GS_GRAPH_WINDOWS=5,20 (ms) also runs the hybrid side with those windows
and prints each one's accuracy (the assertion holds the default, 20 ms);
GS_GRAPH_REPLAYS sets the workload's replays (default 20000).
Every run's payload and stderr go to GRAPHSIGNAL_TEST_ARTIFACTS when set."""
import json
import os
import re
import statistics
import sys

import pytest

from support.gsrun import metrics, quiet_env, run_wrapped

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    os.environ.get("GS_TEST_GRAPH_SAMPLING") != "1",
    reason="experimental graph sampling is off by default (on an H200 it crashed node-mode PyTorch runs with "
           "SIGSEGV and timed replays 7.5 % off the activity collection); GS_TEST_GRAPH_SAMPLING=1 runs these")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOAD = os.path.join(ROOT, "scripts", "workloads", "graph_decode.py")
REPLAYS = int(os.environ.get("GS_GRAPH_REPLAYS", "20000"))
REPS = 3
DEFAULT_WINDOW = 20
WINDOWS = sorted({DEFAULT_WINDOW} | {int(w) for w in os.environ.get("GS_GRAPH_WINDOWS", "").split(",") if w})


def run(name, trace="graph", **env):
    e = quiet_env(GRAPHSIGNAL_LOG_LEVEL="debug", **env)
    proc, signals = run_wrapped([sys.executable, WORKLOAD, "--replays", str(REPLAYS)],
                                options=["--cuda-graph-trace", trace], env=e, timeout=600)
    err = proc.stderr.decode(errors="replace")
    art = os.environ.get("GRAPHSIGNAL_TEST_ARTIFACTS")
    if art:
        os.makedirs(art, exist_ok=True)
        with open(os.path.join(art, name + ".stderr.txt"), "w") as f:
            f.write(err)
        with open(os.path.join(art, name + ".signals.json"), "w") as f:
            json.dump(signals, f, indent=1)
    assert proc.returncode == 0, err[-3000:]
    assert signals is not None, err[-3000:]
    (did,) = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return {"did": did, "signals": signals, "err": err, "name": name}


def parts(signals, metric, pid):
    """{(duration tag, count tag): {frame: (value, samples)}}"""
    out = {}
    for m in metrics(signals, metric, **{"process.pid": str(pid)}):
        if not m["stats"]["frames"]:
            continue  # the device's profiles, measured empty
        key = (m["tags"].get("duration"), m["tags"].get("count"))
        fr = out.setdefault(key, {})
        for f in m["stats"]["frames"]:
            v, n = fr.get(f["name"], (0, 0))
            fr[f["name"]] = (v + f["value"], n + f["samples"])
    return out


def total(p):
    out = {}
    for fr in p.values():
        for f, (v, n) in fr.items():
            pv, pn = out.get(f, (0, 0))
            out[f] = (pv + v, pn + n)
    return out


def decision(err):
    """What graph_sampling.h decided, from the library's log lines."""
    lines = [x.split("] ", 1)[-1] for x in err.splitlines() if "graphsignal-cupti" in x and (
        "CUDA graph" in x or "graph replays" in x)]
    if any("timed in sampling windows" in x for x in lines) and not any("traced in full" in x for x in lines):
        what = "sampled"
    elif any("traced in full" in x for x in lines):
        what = "traced"
    else:
        what = "undecided"
    exit_line = next((x for x in lines if x.startswith("debug: exit: CUDA graph timing")), "")
    return what, lines, exit_line


def graph_frame(r):
    """The decode graph's frame: (name, per-replay ns, replays, the parts)."""
    p = parts(r["signals"], "cuda_graphs_nanoseconds", r["did"]["pid"])
    t = total(p)
    assert len(t) == 1, (t, r["name"])
    name, (v, n) = next(iter(t.items()))
    return name, v / n if n else 0.0, n, p


@pytest.fixture(scope="module")
def graph_runs():
    runs = {("hybrid", w): [] for w in WINDOWS}
    runs[("activity", 0)] = []
    for rep in range(REPS):  # interleaved: each repetition runs every configuration once
        for w in WINDOWS:
            runs[("hybrid", w)].append(run("graph_sampling_hybrid_w%d_%d" % (w, rep),
                                           GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS=w))
        runs[("activity", 0)].append(run("graph_sampling_activity_%d" % rep, GRAPHSIGNAL_CUPTI_COLLECTION="activity"))
    return runs


def test_replay_counts_are_exact_in_both_collections(graph_runs):
    for key, rs in graph_runs.items():
        for r in rs:
            name, per, n, p = graph_frame(r)
            print(json.dumps({"run": r["name"], "frame": name, "replays": n, "workload_replays": r["did"]["replays"],
                              "series": {"%s/%s" % k: {f: list(x) for f, x in fr.items()} for k, fr in p.items()}}))
            assert n == r["did"]["replays"], (r["name"], p)
            assert re.match(r"^graph_[0-9a-f]{16}_n\d+$", name), name


def test_the_run_time_decision_is_taken_and_said(graph_runs):
    for r in graph_runs[("hybrid", DEFAULT_WINDOW)]:
        what, lines, exit_line = decision(r["err"])
        print(json.dumps({"run": r["name"], "graph_timing": what, "log": lines}))
        # the launch callbacks must have seen the launches (cudaGraphLaunch reaching cuGraphLaunch):
        # otherwise no probe ever starts and nothing is sampled
        assert "waiting for a graph launch" not in exit_line, exit_line
        assert what in ("sampled", "traced"), lines
        p = graph_frame(r)[3]
        if what == "sampled":
            assert p.get(("sampled", None)), p  # the replays after the probe are estimates, tagged
    for r in graph_runs[("activity", 0)]:
        assert decision(r["err"])[0] == "undecided"  # the activity collection never samples
        assert set(graph_frame(r)[3]) == {(None, None)}


def test_sampled_time_per_replay_within_2_percent_of_the_activity_collection(graph_runs):
    exact = statistics.median(graph_frame(r)[1] for r in graph_runs[("activity", 0)])
    events = statistics.median(r["did"]["event_ns_per_step"] for r in graph_runs[("activity", 0)])
    results = {}
    for w in WINDOWS:
        per = [graph_frame(r)[1] for r in graph_runs[("hybrid", w)]]
        est = statistics.median(per)
        results[w] = 100.0 * (est - exact) / exact
        print(json.dumps({"window_ms": w, "hybrid_ns_per_replay": [round(x, 1) for x in per],
                          "activity_ns_per_replay": [round(graph_frame(r)[1], 1) for r in graph_runs[("activity", 0)]],
                          "event_ns_per_step_activity": round(events, 1), "diff_pct": round(results[w], 3),
                          "graph_timing": [decision(r["err"])[0] for r in graph_runs[("hybrid", w)]]}))
    assert abs(results[DEFAULT_WINDOW]) <= 2.0, results


@pytest.fixture(scope="module")
def node_runs():
    runs = {"hybrid": [], "activity": []}
    for rep in range(2):
        runs["hybrid"].append(run("graph_sampling_node_hybrid_%d" % rep, trace="node"))
        runs["activity"].append(run("graph_sampling_node_activity_%d" % rep, trace="node",
                                    GRAPHSIGNAL_CUPTI_COLLECTION="activity"))
    return runs


def test_node_mode_counts_kernels_inside_graphs_as_the_activity_collection_does(node_runs):
    counts, estimated = {}, []
    for coll, rs in node_runs.items():
        for r in rs:
            p = parts(r["signals"], "cuda_kernels_nanoseconds", r["did"]["pid"])
            t = total(p)
            what, lines, exit_line = decision(r["err"])
            print(json.dumps({"run": r["name"], "graph_timing": what, "kernels": len(t),
                              "series": {"%s/%s" % k: sum(n for _, n in fr.values()) for k, fr in p.items()},
                              "estimated_counts": sorted(p.get(("sampled", "estimated"), {})), "log": lines}))
            counts.setdefault(coll, []).append({k: n for k, (v, n) in t.items()})
            estimated.append(set(p.get(("sampled", "estimated"), {})))
            assert parts(r["signals"], "cuda_graphs_nanoseconds", r["did"]["pid"]) == {}
            if coll == "hybrid":
                assert "waiting for a graph launch" not in exit_line, exit_line
                if what == "sampled":
                    # a static graph: its kernel nodes' counts are exact, their time sampled (kernels CUPTI
                    # reports that the walk does not name, such as a memset node run as a kernel, come
                    # as estimated counts: listed above)
                    assert p.get(("sampled", None)), p
    # the same workload, the same kernels: equal counts per symbol, run for run (an estimated count within 2)
    est = set().union(*estimated)
    a = counts["activity"][0]
    for h in counts["hybrid"]:
        off = {k: (h.get(k), a.get(k)) for k in set(h) | set(a)
               if abs((h.get(k) or 0) - (a.get(k) or 0)) > (2 if k in est else 0)}
        assert not off, off


def test_node_mode_kernel_time_within_3_percent_of_the_activity_collection(node_runs):
    def per_replay(r):
        t = total(parts(r["signals"], "cuda_kernels_nanoseconds", r["did"]["pid"]))
        return sum(v for v, _ in t.values()) / r["did"]["replays"]
    h = statistics.median(per_replay(r) for r in node_runs["hybrid"])
    a = statistics.median(per_replay(r) for r in node_runs["activity"])
    diff = 100.0 * (h - a) / a
    print(json.dumps({"node_kernel_ns_per_replay": {"hybrid": round(h, 1), "activity": round(a, 1)},
                      "diff_pct": round(diff, 3)}))
    assert abs(diff) <= 3.0
