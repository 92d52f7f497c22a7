"""graphsignal-run's exit is bounded by what the profiler does, not by
what it fails to do: a sidecar that stops moving (SIGSTOP, a hang) holds
the workload's exit a few seconds at most, and a supervisor killed
outright leaves no workload behind, even one that ignores SIGTERM."""
import os
import signal
import subprocess
import sys
import time

from graphsignal.launch.supervisor import SIDECAR_FINAL_STALL
from graphsignal.sidecar.process import SUPERVISOR_GONE_WAIT
from support.gsrun import GS_RUN, free_port, quiet_env, wait_for

PY = sys.executable


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _sidecar_of(supervisor):
    for pid in _children(supervisor):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if b"graphsignal.sidecar.process" in f.read():
                    return pid
        except OSError:
            pass
    return None


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")


def test_a_stopped_sidecar_holds_the_exit_only_until_it_is_seen_not_moving(tmp_path):
    # before: SIGSTOP of the sidecar with --output (or uploads) held the exit 68 s (60 s + the kill grace)
    out = tmp_path / "signals.json"
    sup = subprocess.Popen(GS_RUN + ["--listen-port", str(free_port()), "--output", str(out), PY, "-c",
                                     "import sys; sys.stdin.read(); print('done')"],
                           env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        sidecar = wait_for(lambda: _sidecar_of(sup.pid), timeout=30)
        assert sidecar, "no sidecar started"
        os.kill(sidecar, signal.SIGSTOP)
        sup.stdin.close()  # the workload ends now
        sup.stdin = None
        ended = time.monotonic()
        stdout, stderr = sup.communicate(timeout=60)
        took = time.monotonic() - ended
    finally:
        if sup.poll() is None:
            sup.kill()
    assert sup.returncode == 0 and stdout == b"done\n"
    # measured from the moment the workload could end: the stall limit and the kill, far from 60 s
    assert took < SIDECAR_FINAL_STALL + 20, took
    lines = [x for x in stderr.decode().splitlines() if "no progress" in x]
    assert len(lines) == 1, stderr
    assert not _alive(sidecar)
    assert os.listdir(str(tmp_path)) == []  # no half-written payload either


def test_a_sidecar_that_lingers_is_waited_for(tmp_path):
    # the heartbeat, not the CPU, says it is alive: lingering is idle time, and it is waited out
    out = tmp_path / "signals.json"
    t0 = time.monotonic()
    proc = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), "--output", str(out), PY, "-c", "pass"],
                          env=quiet_env(GRAPHSIGNAL_LINGER=str(SIDECAR_FINAL_STALL + 3)), capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 >= SIDECAR_FINAL_STALL + 3  # the whole linger
    assert out.exists() and b"no progress" not in proc.stderr


def test_a_killed_supervisor_leaves_no_workload_behind_even_one_that_ignores_sigterm():
    # before: the workload, reparented to init, ran forever
    code = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(600)\n"  # a helper in its process group, ignoring SIGTERM too
            "else:\n    print(pid, flush=True); time.sleep(600)")
    sup = subprocess.Popen(GS_RUN + ["--listen-port", str(free_port()), PY, "-c", code],
                           env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    workload = helper = None
    try:
        helper = int(sup.stdout.readline())
        (workload,) = [p for p in _children(sup.pid) if p != _sidecar_of(sup.pid)]
        assert wait_for(lambda: _sidecar_of(sup.pid), timeout=30)
        time.sleep(1.0)  # the sidecar has its channel open and the workload's pidfd
        sup.kill()
        sup.wait(timeout=10)
        gone = wait_for(lambda: not _alive(workload) and not _alive(helper), timeout=SUPERVISOR_GONE_WAIT + 30,
                        interval=0.2)
        assert gone, "workload %s or its helper %s outlived graphsignal-run" % (workload, helper)
    finally:
        for pid in (workload, helper):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
    err = sup.stderr.read().decode()
    assert "sending SIGKILL" in err, err
