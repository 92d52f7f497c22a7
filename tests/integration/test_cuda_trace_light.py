"""--cuda-trace light end to end, without a GPU: graphsignal-run preloads
the package's own CUDA interposer into a C program that reaches a stand-in
libcuda as the CUDA runtime does (tests/support/interpose), the interposer
sends its counts through its ring, and the final payload holds them,
equal to what the program did: launches per kernel symbol, replays per
graph under its content name, syncs by kind with host time, copies by kind
and host memory with bytes, memsets, the device's UUID, and no CUPTI anywhere."""
import json
import os

import pytest

from tests.integration.test_interpose import built, fnv_graph_name  # noqa: F401 (the fixture)
from tests.support.gsrun import quiet_env, run_wrapped

pytestmark = pytest.mark.skipif(os.uname().machine not in ("x86_64", "amd64"),
                                reason="the interposer's dlsym trampoline is x86-64 only")

UUID = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"


def profile(payload, name, **tags):
    found = [m for m in payload["metrics"] if m["name"] == name and m["type"] == "profile"
             and all(m["tags"].get(k) == v for k, v in tags.items())]
    assert len(found) == 1, (name, tags, [m["tags"] for m in payload["metrics"] if m["name"] == name])
    return {f["name"]: (f["value"], f["samples"]) for f in found[0]["stats"]["frames"]}, found[0]["tags"]


def counters(payload, name):
    return {m["tags"].get("kind", ""): m["stats"]["total"] for m in payload["metrics"] if m["name"] == name}


def light_run(built, args, exe=None, **extra_env):  # noqa: F811
    """exe: a program of the test's own (default: the stand-in's cuda_user)."""
    lib, fake_dir, progs = built
    env = quiet_env(LD_LIBRARY_PATH=fake_dir, **extra_env)
    for k in ("LD_PRELOAD", "CUDA_INJECTION64_PATH", "GRAPHSIGNAL_CUDA_SAMPLE", "GRAPHSIGNAL_CUDA_SAMPLE_RATE"):
        env.pop(k, None)
    env.update(extra_env)
    proc, payload = run_wrapped([exe or progs["runtime"]] + list(args), options=["--cuda-trace", "light"], env=env,
                                timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    did = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert payload is not None, proc.stderr.decode(errors="replace")[-3000:]
    return did, payload, proc


def test_light_payload_counts_equal_what_the_program_did(built):  # noqa: F811
    # the stand-in's streams all busy: each timed replay keeps its event pair's span (> 0)
    did, payload, proc = light_run(built, ("8", "2000", "0", "0"), GRAPHSIGNAL_CUDA_SAMPLE="4",
                                   GRAPHSIGNAL_CUDA_SAMPLE_RATE="0", FAKE_CUDA_BUSY="1")
    assert payload["context"].get("cuda.trace") == "light"
    dev = {"device.cuda_index": "0", "device.uuid": UUID}

    launches, tags = profile(payload, "cuda_kernel_launches", **dev)
    assert {k: v[1] for k, v in launches.items()} == did["kernels"]
    assert {k: v[0] for k, v in launches.items()} == did["kernels"]  # a count profile: value = launches
    assert "process.pid" in tags

    graphs, gtags = profile(payload, "cuda_graphs_nanoseconds", duration="sampled", **dev)
    name = fnv_graph_name([(0, "_Z6kernelAv"), (0, "_Z6kernelBPf"), (0, "gemm_kernel"), (0, "_Z6kernelAv")])
    assert list(graphs) == [name]
    est_ns, replays = graphs[name]
    assert replays == did["graph_launches"]
    assert est_ns > 0  # the stand-in's events take the host's clock: every timed replay spans some time
    timed = [m for m in payload["metrics"] if m["name"] == "cuda_graph_timed_replays"]
    assert len(timed) == 1 and 0 < timed[0]["stats"]["total"] <= replays
    # one launch in four per graph is a candidate, timed when one of the 64 event pairs is free
    assert timed[0]["stats"]["total"] <= replays // 4

    syncs, _ = profile(payload, "cuda_sync_nanoseconds", **dev)
    assert syncs["stream"][1] == did["stream_syncs"]
    assert syncs["context"][1] == did["context_syncs"]
    assert syncs["synchronous_copy"][1] == did["htod"][0]  # each synchronous copy's wait

    # copies per kind and host memory, tagged as the CUPTI collection tags them: the stack is pageable, the
    # cuMemAllocHost buffer pinned
    pageable, _ = profile(payload, "cuda_memcpy_calls", host_memory="pageable", **dev)
    assert pageable == {"host_to_device": (did["htod_pageable"][0],) * 2}
    pinned, _ = profile(payload, "cuda_memcpy_calls", host_memory="pinned", **dev)
    assert pinned == {"host_to_device": (did["htod_pinned"][0],) * 2, "device_to_host": (did["dtoh"][0],) * 2}
    assert {(m["tags"]["kind"], m["tags"]["host_memory"]): m["stats"]["total"] for m in payload["metrics"]
            if m["name"] == "cuda_memcpy_bytes"} == {("host_to_device", "pageable"): did["htod_pageable"][1],
                                                     ("host_to_device", "pinned"): did["htod_pinned"][1],
                                                     ("device_to_host", "pinned"): did["dtoh"][1]}
    # the pageable copies (160 of 16 MiB: 0.5 s at 5 GB/s) are a finding of the light payload, as of CUPTI's
    (f,) = [f for f in payload["findings"] if f["id"] == "pageable_copies"]
    assert f["evidence"][1] == {"series": "cuda_memcpy_calls", "tags": {"host_memory": "pageable",
                                                                       "frame": "host_to_device"},
                                "stat": "calls", "value": did["htod_pageable"][0], "op": ">=", "threshold": 100.0,
                                "unit": ""}
    sets, _ = profile(payload, "cuda_memset_calls", **dev)
    assert sets == {"unknown": (did["memsets"][0],) * 2}
    assert counters(payload, "cuda_memset_bytes") == {"unknown": did["memsets"][1]}

    # graphsignal-top says which collection it shows, and gives counts where no time was measured
    from graphsignal.top.render import UI, render
    from graphsignal.top.text import line_text
    from graphsignal.top.state import TopState

    model = TopState().update(payload)
    text = "\n".join(line_text(ln) for ln in render(model, UI(), width=160))
    assert "cuda trace: light" in text
    kernels = model.tables["kernels"]
    assert kernels.untimed and [r.total_samples for r in kernels.rows] == sorted(did["kernels"].values(),
                                                                                 reverse=True)
    row = " ".join(line_text(ln) for ln in render(model, UI(), width=160) if "gemm_kernel" in line_text(ln))
    assert str(did["kernels"]["gemm_kernel"]) in row.replace(",", "") and " 0 ns" not in row

    # no CUPTI: none of its series, no CUPTI ring, no drops
    names = {m["name"] for m in payload["metrics"]}
    assert "cuda_kernels_nanoseconds" not in names and "cuda_memcpy_nanoseconds" not in names
    assert not [e for e in payload.get("errors", []) if "interpose" in e.get("message", "")], payload["errors"]


def test_each_device_gets_its_own_series_under_its_uuid(built):  # noqa: F811
    """Three devices, threads on each and syncing on the next one too: every
    device's syncs, copies and memsets reach the payload in series of their
    own, tagged with that device's ordinal and UUID, equal to what the
    program did on it."""
    did, payload, _ = light_run(built, ("6", "600", "0", "0", "3"), FAKE_CUDA_DEVICES="3",
                                GRAPHSIGNAL_CUDA_SAMPLE="0")
    for d, want in did["per_device"].items():
        dev = {"device.cuda_index": d, "device.uuid": UUID[:-2] + "%02x" % (0xaf + int(d))}
        syncs, _ = profile(payload, "cuda_sync_nanoseconds", **dev)
        assert syncs["stream"][1] == want["stream_syncs"], (d, syncs)
        assert syncs.get("context", (0, 0))[1] == want["context_syncs"], (d, syncs)
        copies, _ = profile(payload, "cuda_memcpy_calls", **dict(dev, host_memory="pinned"))
        pageable, _ = profile(payload, "cuda_memcpy_calls", **dict(dev, host_memory="pageable"))
        assert sum(v[1] for v in copies.values()) + sum(v[1] for v in pageable.values()) == want["copies"]
        memsets, _ = profile(payload, "cuda_memset_calls", **dev)
        assert sum(v[1] for v in memsets.values()) == want["memsets"]


def test_light_counts_without_sampling(built):  # noqa: F811
    """GRAPHSIGNAL_CUDA_SAMPLE=0: replays exact, no time, no timed replays."""
    did, payload, _ = light_run(built, ("2", "500", "2", "0"), GRAPHSIGNAL_CUDA_SAMPLE="0")
    graphs, _ = profile(payload, "cuda_graphs_nanoseconds", duration="sampled")
    (est_ns, replays), = graphs.values()
    assert replays == did["graph_launches"] and est_ns == 0
    timed = [m["stats"]["total"] for m in payload["metrics"] if m["name"] == "cuda_graph_timed_replays"]
    assert timed in ([], [0])
    launches, _ = profile(payload, "cuda_kernel_launches")
    assert {k: v[1] for k, v in launches.items()} == did["kernels"]


def test_interposer_preloaded_into_another_collection_sends_nothing(built):  # noqa: F811
    """Preloaded by hand into a run of another collection (here --cuda-trace
    off; under on, CUPTI's series would be counted twice), the interposer
    counts but never writes a ring: no light series, no interposer ring."""
    lib, fake_dir, progs = built
    env = quiet_env(LD_LIBRARY_PATH=fake_dir, LD_PRELOAD=lib)
    env.pop("GRAPHSIGNAL_CUDA_TRACE", None)
    proc, payload = run_wrapped([progs["runtime"], "2", "200", "0", "0"], options=["--cuda-trace", "off"], env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    names = {m["name"] for m in payload["metrics"]}
    assert not names & {"cuda_kernel_launches", "cuda_graphs_nanoseconds", "cuda_sync_nanoseconds",
                        "cuda_memcpy_calls", "cuda_memcpy_bytes"}, names
    assert payload["context"].get("cuda.trace") == "off"


def test_a_forked_child_never_sends_the_parents_counts(built):  # noqa: F811
    """The child inherits the parent's counters and its ring's mapping, not
    its flusher: sending at the child's exit would count the parent's
    launches twice. The payload holds the parent's own, exactly."""
    lib, fake_dir, progs = built
    env = quiet_env(LD_LIBRARY_PATH=fake_dir)
    env.pop("LD_PRELOAD", None)
    proc, payload = run_wrapped([progs["fork"], "300", "120"], options=["--cuda-trace", "light"], env=env)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    did = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    launches, _ = profile(payload, "cuda_kernel_launches")
    assert launches == {"forked_kernel": (did["parent"], did["parent"])}


def test_a_driver_function_missing_says_one_line_and_counts_stay_exact(built):  # noqa: F811
    """A driver without cuCtxGetDevice: one line on the workload's stderr
    says every count goes to device 0, and the counts are still exact."""
    lib, fake_dir, progs = built
    did, payload, proc = light_run((lib, os.path.join(os.path.dirname(fake_dir), "fake-old"), progs),
                                   ("2", "300", "0", "0"), GRAPHSIGNAL_LOG_LEVEL="warning")
    lines = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if "graphsignal-interpose" in ln]
    assert len(lines) == 1 and "cuCtxGetDevice" in lines[0] and "device 0" in lines[0], lines
    launches, tags = profile(payload, "cuda_kernel_launches")
    assert {k: v[1] for k, v in launches.items()} == did["kernels"] and tags["device.cuda_index"] == "0"


def test_launches_past_a_full_table_reach_the_payload_as_other(built, tmp_path):  # noqa: F811
    """The interposer's kernel table holds 16,384 handles: a program launching 16,500 distinct kernels once
    each between 2,000 launches of a hot one loses none of them. The handles past the table count in its
    overflow (its report says 117) and reach the payload in the "(other)" frame, beside the payload's own
    cut; the frames sum to every launch."""
    from tests.support import cbuild
    exe = os.path.join(cbuild.cache_dir("interpose"), "many_kernels")
    cbuild.build_to(exe, ["gcc", "-O2", "-Wall", "-Wextra", "-Werror",
                          os.path.join(cbuild.ROOT, "tests", "support", "interpose", "many_kernels.c"), "-ldl"])
    did, payload, _ = light_run(built, ("16500", "1000"), exe=exe, GRAPHSIGNAL_INTERPOSE_REPORT=str(tmp_path / "report"))
    assert did == {"launches": 18500, "hot": 2000, "distinct": 16500, "failed": 0}
    launches, _ = profile(payload, "cuda_kernel_launches", **{"device.cuda_index": "0", "device.uuid": UUID})
    assert sum(v[0] for v in launches.values()) == sum(v[1] for v in launches.values()) == 18500
    assert launches["hot_kernel"] == (2000, 2000)
    assert launches["(other)"][0] >= 16500 + 1 - 16384
    (path,) = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path) if f.startswith("report.")]
    with open(path) as f:
        rep = json.load(f)
    assert rep["kernels_overflow"] == 16500 + 1 - 16384
    assert sum(k["count"] for k in rep["kernels"]) + rep["kernels_overflow"] == 18500


def test_counts_a_reader_never_takes_are_said_at_exit(built, tmp_path):  # noqa: F811
    """No reader at all (the sidecar gone): the exit waits a bounded time for room, then says in one line
    that this process's last counts were not sent, and the program's own exit is untouched."""
    import glob
    import subprocess
    import time
    from tests.support import cbuild
    lib, fake_dir, _ = built
    exe = os.path.join(cbuild.cache_dir("interpose"), "many_kernels")
    cbuild.build_to(exe, ["gcc", "-O2", "-Wall", "-Wextra", "-Werror",
                          os.path.join(cbuild.ROOT, "tests", "support", "interpose", "many_kernels.c"), "-ldl"])
    run_id = "t%x" % (os.getpid() * 1000 + int(time.time()) % 1000)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHSIGNAL_") and k != "LD_PRELOAD"}
    env.update(LD_LIBRARY_PATH=fake_dir, LD_PRELOAD=lib, GRAPHSIGNAL_RUN_ID=run_id, GRAPHSIGNAL_CUDA_TRACE="light")
    try:
        t0 = time.monotonic()
        p = subprocess.run([exe, "9000", "10"], env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        for f in glob.glob("/dev/shm/gs-%s-*" % run_id):
            os.unlink(f)
    assert p.returncode == 0 and json.loads(p.stdout)["launches"] == 9020
    said = [line for line in p.stderr.splitlines() if "were not sent" in line]
    assert len(said) == 1 and "made no room" in said[0], p.stderr
    assert took < 10
