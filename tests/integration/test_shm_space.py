"""Rings never fault the writer: each ring's memory is reserved when it is
created, so a small or full /dev/shm means no ring (one line, the workload
runs as bare), never a SIGBUS; and the default sizes fit a job of 8 ranks
(a CUPTI ring and a probe ring each) into Docker's default 64 MB /dev/shm.

Each test runs graphsignal-run in a private mount namespace with its own
tmpfs on /dev/shm (needs root and unshare)."""
import os
import shutil
import subprocess

import pytest

from support.cbuild import compile_c
from support.gsrun import metrics, run_wrapped

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare for a private 64 MB /dev/shm")

RANKS = 8
RECORDS = 50_000  # per rank and ring: below the smallest default capacity, so no drop is possible


def run_in_small_shm(cmd, size="64m", fill_mb=0):
    """Runs graphsignal-run CMD in a new mount namespace whose /dev/shm is a
    fresh tmpfs of `size` (the sidecar and the workload both see it), after
    `fill_mb` MB of it were taken by a file. Returns (CompletedProcess,
    final /signals payload or None)."""
    fill = "fallocate -l %dM /dev/shm/filler && " % fill_mb if fill_mb else ""
    script = "mount -t tmpfs -o size=%s tmpfs /dev/shm && %sexec \"$@\"" % (size, fill)
    return run_wrapped(cmd, prefix=["unshare", "-m", "sh", "-c", script, "sh"], timeout=180)


def test_eight_ranks_with_two_rings_each_fit_a_64mb_shm_and_lose_nothing():
    exe = compile_c("rank_writer.c")
    job = "for i in $(seq %d); do %s %d & done; wait" % (RANKS, exe, RECORDS)
    proc, signals = run_in_small_shm(["sh", "-c", job])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode().split("\n")
    assert sorted(x for x in out if x) == ["cupti yes probe yes"] * RANKS  # every ring was created
    kernels = metrics(signals, "cuda_kernels_nanoseconds")
    assert len(kernels) == RANKS
    assert sum(f["samples"] for k in kernels for f in k["stats"]["frames"]) == RANKS * RECORDS
    steps = metrics(signals, "rank_step_nanoseconds")
    assert len(steps) == RANKS and all(s["stats"]["count"] == RECORDS for s in steps)
    assert all(m["stats"]["total"] == 0 for m in metrics(signals, "graphsignal_dropped_records"))
    assert b"graphsignal" not in proc.stderr  # nothing to say


def test_a_full_shm_means_no_ring_one_line_and_a_bare_run():
    exe = compile_c("probe_exact.c")
    bare = subprocess.run([exe], capture_output=True, timeout=60)
    # before: a sparse ring on a full tmpfs killed the workload with SIGBUS at its first record
    proc, signals = run_in_small_shm([exe], fill_mb=63)
    assert proc.returncode == bare.returncode == 0
    assert proc.stdout == bare.stdout
    lines = [x for x in proc.stderr.decode().splitlines() if "graphsignal" in x]
    assert len(lines) == 1 and "probes inactive" in lines[0] and "No space left" in lines[0], lines
    assert signals is not None  # the sidecar went on and wrote its payload
