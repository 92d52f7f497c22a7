"""Rings never fault the writer and never starve the workload: each ring's
memory is reserved when it is created, within a budget of /dev/shm (a ring
never takes it below half free; a default ring asks for 1/8 of the room
above that), so a small or full /dev/shm means smaller rings that count
their drops, or no ring (one line, one report, the workload runs as bare),
never a SIGBUS, and the workload's own shared memory still fits.

Each test runs graphsignal-run in a private mount namespace with its own
tmpfs on /dev/shm (needs root and unshare)."""
import os
import re
import shutil
import subprocess

import pytest

from support.cbuild import compile_c
from support.gsrun import metrics, quiet_env, run_wrapped

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root and unshare for a private 64 MB /dev/shm")

RANKS = 8
RECORDS = 50_000  # per rank and ring
WORKERS = 16
STEPS = 100_000  # per worker: more than most of their rings hold


def run_in_small_shm(cmd, size="64m", fill_mb=0):
    """Runs graphsignal-run CMD in a new mount namespace whose /dev/shm is a
    fresh tmpfs of `size` (the sidecar and the workload both see it), after
    `fill_mb` MB of it were taken by a file. Returns (CompletedProcess,
    final /signals payload or None)."""
    fill = "fallocate -l %dM /dev/shm/filler && " % fill_mb if fill_mb else ""
    script = "mount -t tmpfs -o size=%s tmpfs /dev/shm && %sexec \"$@\"" % (size, fill)
    return run_wrapped(cmd, prefix=["unshare", "-m", "sh", "-c", script, "sh"], timeout=180)


def by_pid(signals, name, stat, **tags):
    return {m["tags"]["process.pid"]: m["stats"][stat] for m in metrics(signals, name, **tags)}


def no_ring_reports(signals, kind):
    """process.pid -> the error entry saying that writer has no ring."""
    return {e["tags"]["process.pid"]: e for e in signals["errors"]
            if e["tags"].get("writer") == kind and "could not create its %s ring" % kind in e["message"]}


def check_accounted(signals, lines, kind, seen, per_writer):
    """Every record of a writer with a ring is in the payload (seen:
    process.pid -> records) or counted as dropped; every writer without
    one is reported once. lines: [(pid, has a ring)]."""
    dropped = by_pid(signals, "graphsignal_dropped_records", "total", writer=kind)
    for pid, has_ring in lines:
        if has_ring:
            assert seen.get(pid, 0) + dropped[pid] == per_writer, (pid, seen.get(pid), dropped[pid])
    reports = no_ring_reports(signals, kind)
    assert set(reports) == {pid for pid, has_ring in lines if not has_ring}
    assert all("within the ring budget" in e["message"] for e in reports.values())


def test_eight_ranks_with_two_rings_each_fit_a_64mb_shm_and_count_what_they_drop():
    exe = compile_c("rank_writer.c")
    job = "for i in $(seq %d); do %s %d & done; wait" % (RANKS, exe, RECORDS)
    proc, signals = run_in_small_shm(["sh", "-c", job])
    assert proc.returncode == 0, proc.stderr
    lines = [x.split() for x in proc.stdout.decode().splitlines()]
    assert len(lines) == RANKS
    # 16 rings within the budget: every writer has one (a smaller one drops and counts), or is reported
    kernels = {m["tags"]["process.pid"]: sum(f["samples"] for f in m["stats"]["frames"])
               for m in metrics(signals, "cuda_kernels_nanoseconds")}
    check_accounted(signals, [(x[0], x[2] == "yes") for x in lines], "cupti", kernels, RECORDS)
    check_accounted(signals, [(x[0], x[4] == "yes") for x in lines], "probe",
                    by_pid(signals, "rank_step_nanoseconds", "count"), RECORDS)


def test_sixteen_workers_leave_the_workload_its_own_24mb():
    # 16 live workers record one probe each; then the workload allocates 24 MB
    # of /dev/shm (a DataLoader's or NCCL's segment) while their rings exist
    exe = compile_c("shm_writer.c")
    job = ("d=$(mktemp -d) && touch $d/hold && "
           "for i in $(seq %d); do %s %d $d/hold > $d/w.$i & done; "
           "k=0; while [ \"$(cat $d/w.* | wc -l)\" -lt %d ] && [ $k -lt 2400 ]; do sleep 0.05; k=$((k+1)); done; "
           "if fallocate -l 24M /dev/shm/workload; then echo workload 24M ok; else echo workload 24M failed; fi; "
           "rm -f /dev/shm/workload $d/hold; wait; cat $d/w.*; rm -rf $d") % (WORKERS, exe, STEPS, WORKERS)
    proc, signals = run_in_small_shm(["sh", "-c", job])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    # before: 16 rings of 3 MB took 49 MB of the 64, and the workload's 24 MB failed (ENOSPC)
    assert "workload 24M ok\n" in out, proc.stderr
    lines = re.findall(r"^(\d+) probe (yes \d+|no)$", out, re.M)
    assert len(lines) == WORKERS
    check_accounted(signals, [(pid, what != "no") for pid, what in lines], "probe",
                    by_pid(signals, "shm_step_nanoseconds", "count"), STEPS)


def test_a_full_shm_means_no_ring_one_line_one_report_and_a_bare_run():
    exe = compile_c("probe_exact.c")
    bare = subprocess.run([exe], capture_output=True, timeout=60)
    # before: a sparse ring on a full tmpfs killed the workload with SIGBUS at its first record
    proc, signals = run_in_small_shm([exe], fill_mb=63)
    assert proc.returncode == bare.returncode == 0
    assert proc.stdout == bare.stdout
    lines = [x for x in proc.stderr.decode().splitlines() if "graphsignal" in x]
    assert len(lines) == 1 and "probes inactive" in lines[0] and "No space left" in lines[0], lines
    assert signals is not None  # the sidecar went on and wrote its payload
    # the writer's marker told the sidecar which process runs unprofiled, and why
    reports = [e for e in signals["errors"] if "could not create its probe ring" in e["message"]]
    assert len(reports) == 1 and "within the ring budget" in reports[0]["message"]
    assert reports[0]["level"] == "error" and reports[0]["tags"]["writer"] == "probe"


def test_an_explicit_capacity_is_shrunk_to_leave_half_free_and_said_once():
    exe = compile_c("probe_exact.c")
    # 2^20 records: a 36 MB ring, more than the 32 MB a 64 MB /dev/shm has above its floor
    proc, signals = run_in_small_shm_env([exe], GRAPHSIGNAL_RING_CAPACITY=str(1 << 20))
    assert proc.returncode == 0 and b"active 1\n" in proc.stdout  # a ring, a smaller one
    said = [e for e in signals["errors"] if "GRAPHSIGNAL_RING_CAPACITY asks for" in e["message"]]
    assert len(said) == 1 and "holds 524288 records, not the 1048576" in said[0]["message"], signals["errors"]
    # what the smaller ring could not hold is counted, not lost silently
    # (a ring the sidecar did not drain in time may have delivered none of the counter's adds)
    count = sum(m["stats"]["total"] for m in metrics(signals, "exact_items_total"))
    dropped = metrics(signals, "graphsignal_dropped_records", writer="probe")[0]["stats"]["total"]
    assert count + dropped >= 10_000_000  # the counter's adds (other instruments' drops count here too)


def run_in_small_shm_env(cmd, size="64m", **env):
    script = "mount -t tmpfs -o size=%s tmpfs /dev/shm && exec \"$@\"" % size
    return run_wrapped(cmd, prefix=["unshare", "-m", "sh", "-c", script, "sh"], env=quiet_env(**env), timeout=180)
