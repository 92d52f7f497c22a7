"""Processes the workload forks get their own rings: each is found,
drained and removed once its writer is gone; host/process metrics cover
the whole tree."""
import os
import shutil
import sys
import tempfile
import textwrap
import threading

from support.cbuild import compile_c
from support.gsrun import free_port, json_or_none, metrics, run_wrapped, wait_for


def test_forked_writers_rings_are_found_drained_and_removed():
    exe = compile_c("fork_writers.c")
    proc, signals = run_wrapped([exe, "4"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().split()
    pids = lines[:4]
    assert lines[-2:] == ["removed", "4"]  # removed while the run was still going
    for k, pid in enumerate(pids, start=1):
        prof = metrics(signals, "cuda_kernels_nanoseconds", **{"process.pid": pid})
        frames = [f for m in prof for f in m["stats"]["frames"]]
        assert frames == [{"name": "kernel_%d" % k, "value": k * k * 1000, "samples": k * 1000,
                           "display_name": "kernel_%d" % k, "category": "other"}]
        dropped = metrics(signals, "graphsignal_dropped_records", **{"process.pid": pid})
        assert [m["stats"]["total"] for m in dropped] == [0]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("gs-" + signals["context"]["instance.id"])]


TREE = textwrap.dedent(r"""
    import json, subprocess, sys, time, urllib.request
    def signals():
        try:
            return json.loads(urllib.request.urlopen("http://127.0.0.1:%s/signals" % sys.argv[1], timeout=1).read())
        except (OSError, ValueError):
            return {}
    def busy(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass  # keep one core busy: the last CPU reading taken is the one that stays
    # the sidecar starts after the workload: begin once its host source has
    # taken its first reading (the baseline of the CPU figures)
    while not any(m["name"] == "process_cpu_usage_percent" for m in signals().get("metrics", ())):
        time.sleep(0.05)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; x = bytearray(64 << 20); print(1, flush=True); "
                              "time.sleep(60)"], stdout=subprocess.PIPE)
    child.stdout.readline()  # its 64 MB are written
    # until a reading of the grandchild holds them (one taken during the
    # allocation reads less), at most 30 s: the test then sees what was shown
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
            m["name"] == "process_memory_usage_bytes" and m["tags"].get("process.pid") == str(child.pid)
            and (m["stats"].get("value") or 0) > 60 << 20 for m in signals().get("metrics", ())):
        busy(0.1)
    child.kill()
    child.wait()
    busy(1.5)
    print(child.pid)
""")


def test_process_tree_metrics_and_resources():
    port = free_port()
    proc, signals = run_wrapped([sys.executable, "-c", TREE, str(port)], listen_port=port)
    assert proc.returncode == 0
    grandchild = proc.stdout.decode().strip()
    procs = {r["tags"]["process.pid"]: r for r in signals["resources"] if r["kind"] == "process"}
    assert grandchild in procs
    root = [p for p, r in procs.items() if r["tags"]["process.root_pid"] == p]
    assert len(root) == 1
    assert procs[grandchild]["attributes"]["process.parent_pid"] == root[0]
    assert "bytearray" in procs[grandchild]["attributes"]["process.command_line"]
    rss = metrics(signals, "process_memory_usage_bytes", **{"process.pid": grandchild})[0]["stats"]["value"]
    assert rss > 60 << 20
    cpu = metrics(signals, "process_cpu_usage_percent", **{"process.pid": root[0]})[0]["stats"]["value"]
    assert cpu > 20  # top's convention (100 = one core); the machine may be busy, idle reads ~0
    host = [r for r in signals["resources"] if r["kind"] == "host"][0]
    assert host["attributes"]["cpu.count"] == os.cpu_count()
    assert metrics(signals, "host_memory_usage_bytes")[0]["stats"]["value"] > 0


def test_a_process_that_begins_to_exit_keeps_its_last_readings_and_its_peak():
    # before: a reading taken while the process exited was the one kept (RSS 13.9 MB where 64 MB were held;
    # here 0: its main thread exits first, and /proc reads its memory as 0 until the last thread ends)
    exe = compile_c("leader_exits.c")
    port = free_port()
    go = os.path.join(tempfile.mkdtemp(prefix="gs-leader-go-"), "go")  # ours, mode 0700

    def release_once_read():
        # the program holds its 64 MiB until a reading of them is shown (on a loaded machine the sidecar's first
        # readings can come late), then lets its leader exit
        def held(doc):
            return any(m["name"] == "process_memory_usage_bytes" and (m["stats"].get("value") or 0) >= 64 << 20
                       for m in (doc or {}).get("metrics", ()))
        wait_for(lambda: held(json_or_none("http://127.0.0.1:%d/signals" % port, timeout=1)), timeout=50)
        open(go, "w").close()

    t = threading.Thread(target=release_once_read, daemon=True)
    t.start()
    try:
        proc, signals = run_wrapped([exe, go], listen_port=port)
    finally:
        t.join(60)
        shutil.rmtree(os.path.dirname(go), ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    pid = proc.stdout.decode().split()[0]
    rss = metrics(signals, "process_memory_usage_bytes", **{"process.pid": pid})[0]["stats"]["value"]
    peak = metrics(signals, "process_memory_peak_bytes", **{"process.pid": pid})[0]["stats"]["value"]
    assert rss >= 64 << 20 and peak >= 64 << 20, (rss, peak)
