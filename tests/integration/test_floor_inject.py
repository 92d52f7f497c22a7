"""The CUPTI floor injection (scripts/cuda/floor_inject.cpp) that
scripts/engine_e2e.py's ablation modes run, built against the stand-in
libcupti: each mode takes up exactly the part of CUPTI it names, since
every "CUPTI costs X" in the notes and SKILL.md rests on these modes.

Skips where no C++ compiler or CUPTI/CUDA headers are found."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from test_cupti_collector import ROOT, header_set, libs  # noqa: F401  # libs: the fixture (the stand-in libcupti)

sys.path.insert(0, os.path.join(ROOT, "scripts"))
from bench_percall import build_floor  # noqa: E402

CONCURRENT_KERNEL, CONTEXT, GRAPH_TRACE, OVERHEAD = 10, 9, 51, 17
SYNC_CBID, GRAPH_LAUNCH_CBID = 126, 514  # driver API ids (domain 1)

CHILD = textwrap.dedent(r"""
    import ctypes, json, os, sys, time
    fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    floor = ctypes.CDLL(sys.argv[2])
    out = {"init": floor.InitializeInjection()}
    launches, gap = json.loads(os.environ.get("FLOOR_TEST_LAUNCHES", "[0, 0]"))
    for i in range(launches):  # driver graph launches (cuGraphLaunch), as a decode loop makes them
        fake.fake_cupti_launch(0, 514, i + 1, 0, 0)
        time.sleep(gap)
    out["finalized"] = fake.fake_cupti_finalized()
    out["graph_enables"] = fake.fake_cupti_enable_count(51)
    out["enabled"] = [k for k in range(64) if fake.fake_cupti_enabled(k)]
    out["registered"] = fake.fake_cupti_registered()
    out["subscribed"] = fake.fake_cupti_subscribed()
    out["pinned"] = fake.fake_cupti_host_pinned()
    out["callbacks"] = [c for c in (126, 514, 515, 307) if fake.fake_cupti_callback_enabled(1, c)]
    if len(sys.argv) > 3:  # kernel records for the buffers: ["name", count]
        fake.fake_cupti_kernels.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint64]
        fake.fake_cupti_kernels(sys.argv[3].encode(), 0, int(sys.argv[4]), 100)
    print(json.dumps(out), flush=True)
""")


@pytest.fixture(scope="module")
def floor(libs):  # noqa: F811
    fake, _ = libs
    # the benchmarks' own build of it (scripts/bench_percall.py), linked to the stand-in
    return fake, build_floor(header_set()._replace(libcupti=fake), os.path.dirname(fake))


def run(floor, kernels=(), stderr=None, **env):
    fake, lib = floor
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GS_FLOOR_", "GRAPHSIGNAL_"))}
    e.update(env)
    p = subprocess.run([sys.executable, "-c", CHILD, fake, lib] + [str(x) for x in kernels], env=e,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    if stderr is not None:
        stderr.append(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_default_collections_kinds_and_callbacks(floor):
    got = run(floor, GS_FLOOR_KINDS="kernel,graph,context", GS_FLOOR_CALLBACKS="driver")
    assert got["init"] == 1 and got["registered"] == 1 and got["subscribed"] == 1
    assert got["enabled"] == [CONTEXT, CONCURRENT_KERNEL, GRAPH_TRACE]
    assert SYNC_CBID in got["callbacks"] and GRAPH_LAUNCH_CBID not in got["callbacks"]
    assert got["pinned"] == -1  # CUPTI's own buffer placement unless asked


def test_registered_and_nothing_else(floor):
    # cupti-none: the activity API taken up (buffer callbacks), no kind, no subscriber
    got = run(floor, GS_FLOOR_KINDS="")
    assert (got["registered"], got["enabled"], got["subscribed"], got["callbacks"]) == (1, [], 0, [])


def test_callbacks_without_the_activity_api(floor):
    got = run(floor, GS_FLOOR_NO_ACTIVITY="1", GS_FLOOR_KINDS="all", GS_FLOOR_CALLBACKS="driver")
    assert (got["registered"], got["enabled"], got["subscribed"]) == (0, [], 1)
    assert SYNC_CBID in got["callbacks"]
    got = run(floor, GS_FLOOR_NO_ACTIVITY="1", GS_FLOOR_CALLBACKS="none")
    assert (got["registered"], got["enabled"], got["subscribed"], got["callbacks"]) == (0, [], 1, [])


def test_noop_touches_nothing_and_pinned_is_passed_on(floor):
    got = run(floor, GS_FLOOR_NOOP="1", GS_FLOOR_KINDS="all", GS_FLOOR_CALLBACKS="1")
    assert (got["init"], got["registered"], got["enabled"], got["subscribed"]) == (1, 0, [], 0)
    got = run(floor, GS_FLOOR_KINDS="kernel", GS_FLOOR_PINNED="1")
    assert got["pinned"] == 1 and got["enabled"] == [CONCURRENT_KERNEL]


def test_graph_launch_callbacks_and_events_without_a_driver(floor):
    got = run(floor, GS_FLOOR_KINDS="context", GS_FLOOR_CALLBACKS="driver", GS_FLOOR_GRAPH_LAUNCH="1")
    assert GRAPH_LAUNCH_CBID in got["callbacks"] and 515 in got["callbacks"]
    # graph events need libcuda loaded; without it the mode is off and nothing breaks
    got = run(floor, GS_FLOOR_KINDS="context", GS_FLOOR_GRAPH_EVENTS="1", GS_FLOOR_REPORT="1")
    assert got["init"] == 1 and got["enabled"] == [CONTEXT] and got["callbacks"] == []


def test_all_is_what_a_tool_collects_and_the_report_counts_records_by_kind(floor):
    every = run(floor, GS_FLOOR_KINDS="all")["enabled"]
    assert CONCURRENT_KERNEL in every and GRAPH_TRACE in every and OVERHEAD not in every
    assert OVERHEAD in run(floor, GS_FLOOR_KINDS="kernel,overhead")["enabled"]
    err = []
    run(floor, kernels=("k", 7), stderr=err, GS_FLOOR_KINDS="kernel", GS_FLOOR_REPORT="1")
    assert "floor_inject: records by kind: %d=7\n" % CONCURRENT_KERNEL in err[0]
    err = []
    run(floor, kernels=("k", 7), stderr=err, GS_FLOOR_KINDS="kernel")  # a floor reads nothing
    assert "records by kind" not in err[0]


def test_detach_once_leaves_nothing_of_cupti(floor):
    # cupti-detach: the default collection's setup, then cuptiFinalize at a launch's exit 50 ms after the first
    got = run(floor, FLOOR_TEST_LAUNCHES="[60, 0.005]", GS_FLOOR_KINDS="kernel,graph,context",
              GS_FLOOR_DETACH_MS="50")
    assert got["finalized"] == 1 and got["graph_enables"] == 1
    assert (got["registered"], got["enabled"], got["subscribed"], got["callbacks"]) == (0, [], 0, [])
    # no graph launch, no API exit: it stays attached (and the process is unharmed)
    got = run(floor, GS_FLOOR_KINDS="graph", GS_FLOOR_DETACH_MS="50")
    assert got["finalized"] == 0 and got["enabled"] == [GRAPH_TRACE] and GRAPH_LAUNCH_CBID in got["callbacks"]


def test_cycling_attaches_again_with_the_whole_setup(floor):
    err = []
    got = run(floor, FLOOR_TEST_LAUNCHES="[150, 0.005]", stderr=err, GS_FLOOR_KINDS="graph,context",
              GS_FLOOR_CYCLE_MS="40,40", GS_FLOOR_REPORT="1")
    # about 750 ms of launches, 80 ms a cycle: several detaches, each followed by the same setup again
    assert got["finalized"] >= 3 and got["graph_enables"] >= got["finalized"]
    windows = [line for line in err[0].splitlines() if "windows closed" in line]
    # the last detach may land as the process exits, before the cycler has counted its window
    assert len(windows) == 1 and int(windows[0].split("floor_inject: ")[1].split()[0]) in (
        got["finalized"] - 1, got["finalized"])
