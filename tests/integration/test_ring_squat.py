"""Another user takes a writer's ring names in /dev/shm before the writer
creates its ring: a symlink, a directory, an empty 0600 file or a FIFO of
uid 65534 (made by a child of the workload that drops root, as a local
user who read the run id off /dev/shm/gs-<run>.run could). The writer
passes over a taken name to its fallback names (<name>.1 .. .3) and, when
every name is taken, runs unprofiled: the workload exits as it does bare,
at once (before: unbounded recursion in graphsignal_ring_open, a ~40 s spin
and SIGSEGV), the sidecar says once which process has no ring, and root's
cleanup leaves the other user's files alone.

Needs root (setuid to another uid); the CUPTI case also a C++ compiler and
CUPTI headers."""
import json
import os
import re
import stat
import subprocess
import sys
import uuid

import pytest

from graphsignal.rings import reader
from graphsignal.sidecar.poller import Poller
from graphsignal.sidecar.store import MetricStore
from support.cbuild import ROOT, compile_c
from support.gsrun import metrics, quiet_env, run_wrapped
from test_cupti_collector import DRIVER, frames, libs  # noqa: F401  (libs: the fixture)

SQUATTER = 65534
SHAPES = ["symlink", "dir", "file", "fifo"]
N = 5000

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second uid (65534)")


def header_text():
    return open(os.path.join(ROOT, "include", "graphsignal", "probe.h")).read()


def taken_paths(stderr):
    """The paths the squatter took (ring_squat says each on stderr)."""
    return re.findall(r"^ring_squat: took (\S+)$", stderr.decode(), re.M)


def remove(paths):
    for p in paths:
        try:
            if stat.S_ISDIR(os.lstat(p).st_mode):
                os.rmdir(p)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass


def workload_pid(paths):
    return int(re.match(r"/dev/shm/gs-[0-9a-f]+-(\d+)-", paths[0]).group(1))


def errors_about(signals, pid):
    return [e for e in signals["errors"] if e["tags"].get("process.pid") == str(pid)]


def test_the_readers_fallback_names_are_the_headers():
    text = header_text()
    assert int(re.search(r"^#define GRAPHSIGNAL_RING_NAME_ATTEMPTS (\d+)", text, re.M).group(1)) == \
        reader.NAME_ATTEMPTS
    assert re.search(r'^#define GRAPHSIGNAL_RING_MARKER_SUFFIX "([^"]*)"', text, re.M).group(1) == \
        "." + reader.MARKER
    # every name the header makes parses as this writer's: the plain one, the fallbacks and the marker
    p = "gs-abc-"
    assert [reader.parse_ring_file(p + "42-probe" + s, p) for s in ("", ".1", ".3", ".none")] == [
        (42, "probe", 0), (42, "probe", 1), (42, "probe", 3), (42, "probe", reader.MARKER)]
    assert reader.parse_ring_name(p + "42-probe.none", p) is None  # a marker is not a ring
    assert reader.parse_ring_file(p + "\u00b2-probe", p) is None  # '²'.isdigit(), but no pid (int() raises)


@needs_root
@pytest.mark.parametrize("shape", SHAPES)
def test_a_taken_name_costs_a_fallback_name_not_the_workload(shape):
    exe = compile_c("ring_squat.c")
    bare = subprocess.run([exe, shape, "first", str(N)], capture_output=True, timeout=60, env=quiet_env())
    proc, signals = run_wrapped([exe, shape, "first", str(N)], timeout=60)
    paths = taken_paths(proc.stderr)
    try:
        assert proc.returncode == bare.returncode == 0, proc.stderr
        assert proc.stdout == bare.stdout
        assert len(paths) == 2  # the plain probe and cupti names
        # both writers took <name>.1 and lost nothing
        assert metrics(signals, "squat_events_total")[0]["stats"]["total"] == N
        assert frames_of(signals, "cuda_kernels_nanoseconds") == {"_Z12squat_kernelv": N}
        assert sorted(m["tags"]["writer"] for m in metrics(signals, "graphsignal_dropped_records")) == [
            "cupti", "probe"]
        assert b"probes inactive" not in proc.stderr
        assert not errors_about(signals, workload_pid(paths))  # it has its rings: no "could not create"
        # root's cleanup at exit spared the other user's files, and did not follow the symlinks
        for p in paths:
            assert os.lstat(p).st_uid == SQUATTER
        assert open("/etc/passwd", "rb").read(1)
    finally:
        remove(paths)


@needs_root
@pytest.mark.parametrize("shape", SHAPES)
def test_every_name_taken_means_a_bare_run_and_one_report_per_writer(shape):
    exe = compile_c("ring_squat.c")
    bare = subprocess.run([exe, shape, "all", str(N)], capture_output=True, timeout=60, env=quiet_env())
    proc, signals = run_wrapped([exe, shape, "all", str(N)], timeout=60)
    paths = taken_paths(proc.stderr)
    try:
        # before: the probe's first registration recursed until the stack ran out (SIGSEGV)
        assert proc.returncode == bare.returncode == 0, proc.stderr
        assert proc.stdout == bare.stdout
        assert len(paths) == 2 * (reader.NAME_ATTEMPTS + 1)
        assert not metrics(signals, "squat_events_total")
        assert not metrics(signals, "cuda_kernels_nanoseconds")
        lines = [x for x in proc.stderr.decode().splitlines() if x.startswith("graphsignal:")]
        assert len(lines) == 1 and "probes inactive" in lines[0] and "is not its ring" in lines[0], lines
        pid = workload_pid(paths)
        reports = [e for e in errors_about(signals, pid) if "could not create" in e["message"]]
        assert sorted(e["tags"]["writer"] for e in reports) == ["cupti", "probe"]
        assert all(e["level"] == "error" and e["count"] == 1 and "runs unprofiled" in e["message"] for e in reports)
        for p in paths:
            assert os.lstat(p).st_uid == SQUATTER
    finally:
        remove(paths)


# -- the CUPTI injection library itself -------------------------------------------------
SQUAT_PRELUDE = r"""
import os, sys
shape, which = os.environ["GS_TEST_SQUAT"].split(":")
run, me = os.environ["GRAPHSIGNAL_RUN_ID"], os.getpid()
names = ["gs-%s-%d-cupti" % (run, me)]
if which == "all":
    names += ["%s.%d" % (names[0], i) for i in range(1, int(os.environ["GS_TEST_ATTEMPTS"]))] + [names[0] + ".none"]
child = os.fork()
if child == 0:
    try:
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        for n in names:
            p = "/dev/shm/" + n
            if shape == "symlink":
                os.symlink("/etc/passwd", p)
            elif shape == "dir":
                os.mkdir(p, 0o700)
            elif shape == "fifo":
                os.mkfifo(p, 0o600)
            else:
                os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            sys.stderr.write("ring_squat: took %s\n" % p)
        sys.stderr.flush()
    finally:
        os._exit(0)
os.waitpid(child, 0)
"""


def run_injected(built, shape, which, steps):
    fake, lib = built
    run_id = uuid.uuid4().hex[:12]
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSIGNAL_", "CUDA_INJECTION"))}
    e.update(GRAPHSIGNAL_RUN_ID=run_id, GRAPHSIGNAL_CUPTI_DRIVER_LIB=fake, GS_TEST_SQUAT="%s:%s" % (shape, which),
             GS_TEST_ATTEMPTS=str(reader.NAME_ATTEMPTS))
    p = subprocess.run([sys.executable, "-c", SQUAT_PRELUDE + DRIVER, fake, lib, json.dumps(steps)], env=e,
                       capture_output=True, timeout=60)
    paths = taken_paths(p.stderr)
    store = MetricStore()
    poller = Poller(store, run_id)
    try:
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        poller.poll_once(final=True)  # the child is gone: drains and retires its ring
        poller.cleanup_all()
        for path in paths:
            assert os.lstat(path).st_uid == SQUATTER  # cleanup_all spared them
    finally:
        remove(paths)
    return out, store, p.stderr.decode(), paths


@needs_root
@pytest.mark.parametrize("shape", SHAPES)
def test_the_injection_library_takes_a_fallback_name(libs, shape):  # noqa: F811
    steps = [["kernels", "k", 0, 3000, 7], ["complete"]]
    out, store, err, paths = run_injected(libs, shape, "first", steps)
    assert out["init"] == 1 and len(paths) == 1
    assert frames(store, "cuda_kernels_nanoseconds") == {"k": (21000, 3000)}
    assert "graphsignal-cupti" not in err


@needs_root
@pytest.mark.parametrize("shape", SHAPES)
def test_the_injection_library_runs_unprofiled_when_every_name_is_taken(libs, shape):  # noqa: F811
    # CUDA calls InitializeInjection once; a second call, and a context
    # created afterwards, try nothing again
    steps = [["init"], ["init"], ["context", 5, 1], ["sleep", 0.05]]
    out, store, err, paths = run_injected(libs, shape, "all", steps)
    assert out["init"] == 1  # never fails cuInit
    assert out["enabled"] == []  # no activity kind, no callback: nothing on the workload's path
    assert len(paths) == reader.NAME_ATTEMPTS + 1
    assert not frames(store, "cuda_kernels_nanoseconds")
    lines = [x for x in err.splitlines() if x.startswith("graphsignal-cupti")]
    assert len(lines) == 1 and "cannot create" in lines[0] and "runs unprofiled" in lines[0], err
    pid = int(re.search(r"-(\d+)-cupti", paths[0]).group(1))
    reports = [e for e in store.snapshot().errors if "could not create its cupti ring" in e["message"]]
    assert len(reports) == 1 and reports[0]["tags"] == {"process.pid": str(pid), "writer": "cupti"}


def frames_of(signals, name):
    out = {}
    for m in metrics(signals, name):
        for f in m["stats"]["frames"]:
            out[f["name"]] = out.get(f["name"], 0) + f["samples"]
    return out
