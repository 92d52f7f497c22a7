"""NVTX ranges end to end without a GPU: real C++ programs built with NVTX
v3's header reach the injection library through NVTX_INJECTION64_PATH (NVTX
needs no CUDA for that), under graphsignal-run, and the final payload holds
exactly what they did: nesting paths, domains, registered and wide
strings, start/end ranges across threads, marks, many threads, and the
untrusted cases (unbalanced pops, too deep, name floods, huge names, bad
range ends, ranges open at exit) bounded and counted. GPU time per range
runs the library with the stand-in libcupti, whose launches and kernel
records carry correlation ids as CUPTI's do.

Skips where no C++ compiler, CUPTI/CUDA headers or NVTX headers are found."""
import glob
import json
import os
import subprocess

import pytest

from graphsignal import diff
from graphsignal.top.render import UI, render
from graphsignal.top.text import line_text
from graphsignal.top.state import TopState
from support import nvtx_build
from support.gsrun import metrics, quiet_env, run_wrapped


@pytest.fixture(scope="module")
def built():
    b = nvtx_build.build()
    if "why" in b:
        pytest.skip(b["why"])
    return b


def nvtx_env(built, **extra):
    env = quiet_env(**extra)
    env["NVTX_INJECTION64_PATH"] = built["lib"]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (built["lib_dir"], env.get("LD_LIBRARY_PATH")) if p)
    return env


def profile(signals, name, domain):
    """{frame: (value, samples)} of one NVTX domain's profile."""
    out = {}
    for m in metrics(signals, name, **{"nvtx.domain": domain}):
        for f in m["stats"]["frames"]:
            out[f["name"]] = (f["value"], f["samples"])
    return out


def counter(signals, name, **tags):
    found = metrics(signals, name, **tags)
    return sum(m["stats"]["total"] for m in found) if found else None


def run_ranges(built, *options, forward_us=2000, **env):
    proc, signals = run_wrapped([built["ranges"], "all", str(forward_us)], options=options, env=nvtx_env(built, **env),
                                timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    did = json.loads([ln for ln in proc.stdout.decode().splitlines() if ln.startswith("{")][-1])
    assert signals is not None, proc.stderr.decode(errors="replace")[-3000:]
    return did, signals, proc.stderr.decode(errors="replace")


def test_ranges_of_a_program_that_only_calls_nvtx_are_exact(built):
    did, signals, stderr = run_ranges(built, GRAPHSIGNAL_LOG_LEVEL="warning")  # the library's lines too
    pid = str(did["pid"])
    for m in signals["metrics"]:
        if m["name"].startswith(("nvtx_", "graphsignal_nvtx_")):
            assert m["tags"]["process.pid"] == pid
    d = profile(signals, "nvtx_ranges_nanoseconds", "default")
    print("default domain:", {k[:40]: v for k, v in d.items()})
    steps = did["steps"]
    assert d["step"][1] == d["step/forward"][1] == d["step/backward"][1] == steps
    # host wall time: inside what the program measured around each call, and
    # at least what it slept
    for frame, key, slept in (("step/forward", "forward_ns", 2_000_000), ("step/backward", "backward_ns", 1_000_000)):
        ns = d[frame][0]
        print(frame, "library", ns, "program", did[key])
        assert steps * slept <= ns <= did[key]
        assert ns >= did[key] - steps * 1_000_000  # at most 1 ms a range outside (two calls, a clock read)
    assert did["step_ns"] - steps * 1_000_000 <= d["step"][0] <= did["step_ns"]
    assert d["step"][0] >= d["step/forward"][0] + d["step/backward"][0]
    assert d["A"][1] == did["interleaved"]
    assert d["io"][1] == did["io"]  # started on one thread, ended on another
    assert d["worker"][1] == d["worker/task"][1] == did["threads"] * did["per_thread"]
    assert d["churn"][1] == did["churn"]  # 200 short-lived threads: their state reused, nothing lost
    assert d["h" * 128][1] == did["huge"]  # cut to 128 bytes
    # 150 levels: 128 tracked, paths cut at 16 levels, the rest in one frame
    for level in range(1, 17):
        assert d["/".join(["d"] * level)][1] == 1
    assert d["/".join(["d"] * 16) + "/..."][1] == 128 - 16
    m = profile(signals, "nvtx_ranges_nanoseconds", "mydomain")
    print("mydomain:", m)
    assert m["registered"][1] == m["registered/wide \u00fc\u4e2d"][1] == did["dom_ranges"]
    assert m["registered/wide \u00fc\u4e2d/(no message)"][1] == did["dom_ranges"]
    assert m["X"][1] == did["interleaved"]
    assert counter(signals, "nvtx_marks", **{"nvtx.domain": "default"}) == did["marks"]
    assert counter(signals, "nvtx_marks", **{"nvtx.domain": "mydomain"}) == did["dom_marks"]

    dropped = {m["tags"]["reason"]: m["stats"]["total"] for m in metrics(signals, "graphsignal_nvtx_dropped")}
    print("dropped:", dropped)
    assert dropped["unbalanced_pop"] == did["unbalanced"]
    assert dropped["too_deep"] == did["deep"] - 128
    assert dropped["name_truncated"] == did["huge"]
    assert dropped["bad_range_end"] == did["bad_ends"]
    assert dropped["open_at_exit"] == did["open_at_exit"]
    # the flood: 4096 distinct paths in all, the rest in "(other)"; the paths
    # of the ranges left open (never closed, so in no frame) count too
    named = [f for f in list(d) + list(m) if not f.endswith("/...")]
    flood = profile(signals, "nvtx_ranges_nanoseconds", "flood")
    other = did["flood"] - (4096 - (len(named) + 4))
    assert dropped["names_over_cap"] == other
    # the payload lists 249 of the rest and one "(other)" with the library's fold and the cut's: every range is
    # in some frame
    listed = sum(n for k, (_, n) in flood.items() if k != "(other)")
    assert len(flood) == 250 and flood["(other)"][1] == did["flood"] - listed >= other
    # said once each, on the console
    for reason in dropped:
        assert stderr.count("reason=%s}" % reason) == 1, stderr[-3000:]
    # its own ring, drained without a drop
    assert counter(signals, "graphsignal_dropped_records", writer="nvtx") == 0


def test_nvtx_off_collects_nothing_and_the_program_runs(built):
    did, signals, _ = run_ranges(built, "--nvtx", "off")
    assert did["steps"] == 40
    assert not [m for m in signals["metrics"] if "nvtx" in m["name"]]


def test_outside_graphsignal_run_nvtx_calls_are_no_ops(built):
    env = nvtx_env(built)
    env.pop("GRAPHSIGNAL_RUN_ID", None)
    p = subprocess.run([built["ranges"], "all"], env=env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    pid = json.loads(p.stdout.decode().splitlines()[-1])["pid"]
    assert not glob.glob("/dev/shm/gs-*-%d-*" % pid)
    assert b"graphsignal" not in p.stderr


def run_gpu_driver(built, mode):
    env = nvtx_env(built)
    proc, signals = run_wrapped([built["gpu_driver"], built["lib"]], options=("--nvtx", mode), env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    assert signals is not None
    return signals


def test_gpu_time_per_range_follows_correlation_ids(built):
    signals = run_gpu_driver(built, "gpu")
    host = profile(signals, "nvtx_ranges_nanoseconds", "default")
    gpu = profile(signals, "nvtx_range_gpu_nanoseconds", "default")
    print("host:", host, "gpu:", gpu)
    assert {k: v[1] for k, v in host.items()} == {"outer": 1, "outer/inner": 1, "thread-range": 1}
    # outer: 1000 (runtime launch, the record carries the runtime call's id) + 2000 (driver launch);
    # inner: 4000 + the graph's 8000 (its node kernel not counted again); the launch after the ranges: nowhere
    assert gpu == {"outer": (3000, 2), "outer/inner": (12000, 2), "thread-range": (32000, 1)}
    kernels = {f["name"] for m in metrics(signals, "cuda_kernels_nanoseconds") for f in m["stats"]["frames"]}
    assert "k_outside" in kernels  # the collector itself saw every kernel


def test_without_gpu_mode_no_launch_is_attributed(built):
    signals = run_gpu_driver(built, "on")
    assert profile(signals, "nvtx_ranges_nanoseconds", "default")["outer"][1] == 1
    assert not profile(signals, "nvtx_range_gpu_nanoseconds", "default")


def test_top_and_diff_show_the_ranges_as_stages(built):
    """Two real runs, the second's "forward" ten times as long: graphsignal-top
    lists the ranges, graphsignal-diff names step/forward as what changed."""
    did_b, before, _ = run_ranges(built, forward_us=2000)
    did_a, after, _ = run_ranges(built, forward_us=20000)
    lines = [line_text(ln) for ln in render(TopState().update(after), UI(), width=160)]
    at = next(i for i, ln in enumerate(lines) if ln.startswith(" NVTX RANGES"))
    section = lines[at:at + 7]
    print("\n".join(section))
    assert section[1].split() == ["TIME", "RANGES", "AVG", "NAME"]
    # the largest first; several domains: each name says its domain
    assert section[2].split()[-2:] == ["default:", "step"] and section[2].split()[2] == "40"
    assert section[3].split()[-2:] == ["default:", "step/forward"]
    assert "no probe metrics" in next(ln for ln in lines if ln.startswith(" PROBES"))  # a section of their own
    doc = diff.compare(before, after)
    print(diff.to_text(doc)[:1500])
    # frames hold inclusive time: the step changed as much as its forward, either may lead
    head = diff.headline(doc)
    assert "nvtx step" in head, head
    top2 = [c["frame"] for c in doc["changes"] if c["kind"] == "profile"][:2]
    assert sorted(top2) == ["step", "step/forward"], top2
    fwd = [c for c in doc["changes"] if c.get("frame") == "step/forward" and c["metric"] == "nvtx_ranges_nanoseconds"]
    measured = did_a["forward_ns"] / did_b["forward_ns"]  # what the program timed around its calls
    assert len(fwd) == 1 and abs(fwd[0]["ratio"] / measured - 1) < 0.05, (fwd, measured)
