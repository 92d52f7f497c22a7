"""The sidecar never competes with the workload: its threads run at
SCHED_IDLE by default (GRAPHSIGNAL_SIDECAR_PRIORITY=idle), nice 19 with
`low`, unchanged with `normal`, but for the two that finish the run (the
main thread: the final drain and payload; the channel: the console and the
heartbeats the supervisor waits on); and a drain the low priority starves
loses nothing silently."""
import errno
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from support.cbuild import compile_c
from support.gsrun import GS_RUN, free_port, get_json, quiet_env, wait_for

from graphsignal import config
from graphsignal.sidecar import priority

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHED_OTHER, SCHED_IDLE = 0, 5
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scheduling classes are Linux's")


def _threads(pid):
    """{tid: (policy, nice)} of every thread of pid (/proc/PID/task/TID/stat
    fields 41 and 19)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid), "rb") as f:
                raw = f.read()
        except OSError:
            continue
        rest = raw[raw.rfind(b")") + 2:].split()
        out[int(tid)] = (int(rest[38]), int(rest[16]))
    return out


def _sidecar_of(sup_pid):
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(stat[stat.rfind(b")") + 2:].split()[1]) == sup_pid and b"graphsignal.sidecar.process" in cmd:
            return int(d)
    return None


def _serving(port):
    try:
        return get_json("http://127.0.0.1:%d/health" % port)[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("level", [None, "idle", "low", "normal"])
def test_the_sidecars_threads_run_below_the_workload_but_the_two_that_end_the_run(level):
    env = quiet_env()
    env.pop(config.SIDECAR_PRIORITY_ENV, None)
    if level:
        env[config.SIDECAR_PRIORITY_ENV] = level
    port = free_port()
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(port), "sleep", "60"], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    own_nice = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        assert wait_for(lambda: _serving(port) or p.poll() is not None, 60), "the endpoint never came up"
        sc = _sidecar_of(p.pid)
        assert sc

        def settled():
            ts = _threads(sc)
            normal = [t for t, (pol, nice) in ts.items() if pol == SCHED_OTHER and nice == own_nice]
            # clock, poller, server and the sources' threads at least, besides the two kept
            return ts if len(ts) >= 5 and (level == "normal" or len(normal) == 2) else None

        ts = wait_for(settled, 30)
        assert ts, _threads(sc)
        lowered = {t: v for t, v in ts.items() if v != (SCHED_OTHER, own_nice)}
        if level == "normal":
            assert lowered == {}
        elif level == "low":
            assert len(ts) - len(lowered) == 2 and set(lowered.values()) == {(SCHED_OTHER, max(19, own_nice))}
        else:  # the default
            assert len(ts) - len(lowered) == 2 and {pol for pol, _ in lowered.values()} == {SCHED_IDLE}
        # the supervisor and the workload are left alone
        assert set(_threads(p.pid).values()) == {(SCHED_OTHER, own_nice)}
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=60)
    assert p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM, 143), p.returncode


def test_a_bad_priority_is_one_line_and_the_default():
    env = dict(quiet_env(), GRAPHSIGNAL_LOG_LEVEL="warning", **{config.SIDECAR_PRIORITY_ENV: "lowest"})
    out = subprocess.run(GS_RUN + ["--print-config"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said = [ln for ln in out.stderr.splitlines() if config.SIDECAR_PRIORITY_ENV in ln]
    assert len(said) == 1 and "normal|low|idle" in said[0] and "using idle" in said[0], out.stderr
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.stdout.splitlines() if ln.strip()}
    assert rows["sidecar_priority"] == ["idle", "default"]
    env[config.SIDECAR_PRIORITY_ENV] = "Normal"
    out = subprocess.run(GS_RUN + ["--print-config"], env=env, capture_output=True, text=True, timeout=60)
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.stdout.splitlines() if ln.strip()}
    assert rows["sidecar_priority"] == ["normal", "environment", config.SIDECAR_PRIORITY_ENV]
    assert config.SIDECAR_PRIORITY_ENV not in out.stderr


def test_the_channel_refuses_a_priority_it_does_not_know():
    d = config.from_environ({}).to_dict()
    assert d["sidecar_priority"] == "idle"
    with pytest.raises(ValueError, match="sidecar_priority"):
        config.Settings.from_dict(dict(d, sidecar_priority="realtime"))


def test_lower_threads_lowers_every_thread_but_those_kept(tmp_path):
    """In a child process: the threads running are lowered but the kept
    ones; what a lowered thread starts later inherits it; what a kept one
    starts later does not."""
    code = r"""
import json, os, threading
from graphsignal.sidecar import priority
halt, go, box = threading.Event(), threading.Event(), []
def work():
    halt.wait()
def spawner():
    go.wait()
    t = threading.Thread(target=work); t.start(); box.append(t.native_id)
ts = [threading.Thread(target=work) for _ in range(2)] + [threading.Thread(target=spawner)]
for t in ts: t.start()
applied = priority.lower_threads("idle", {threading.main_thread().native_id, ts[0].native_id})
late = threading.Thread(target=work); late.start()
go.set(); ts[2].join()
pol = os.sched_getscheduler
print(json.dumps({"applied": applied, "kept": [pol(threading.main_thread().native_id), pol(ts[0].native_id)],
                  "lowered": pol(ts[1].native_id), "by_a_lowered_one": pol(box[0]), "by_a_kept_one": pol(late.native_id)}))
halt.set()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"applied": "idle", "kept": [SCHED_OTHER, SCHED_OTHER], "lowered": SCHED_IDLE,
                                      "by_a_lowered_one": SCHED_IDLE, "by_a_kept_one": SCHED_OTHER}


def test_where_sched_idle_is_refused_nice_19_and_where_both_are_one_line(monkeypatch, caplog):
    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")

    tid = 12345
    calls = []
    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    monkeypatch.setattr(os, "setpriority", lambda which, who, n: calls.append((who, n)))
    assert priority.lower(tid, "idle") == "low" and calls == [(tid, 19)]
    tasks = tempfile.mkdtemp()
    for t in ("1", "2", "3"):
        os.mkdir(os.path.join(tasks, t))
    with caplog.at_level("INFO", logger="graphsignal"):
        assert priority.lower_threads("idle", {1}, tasks) == "low"
    assert [r.getMessage() for r in caplog.records] == [
        "graphsignal: the sidecar runs at nice 19 (SCHED_IDLE was refused)"]
    caplog.clear()
    monkeypatch.setattr(os, "setpriority", refuse)
    with caplog.at_level("INFO", logger="graphsignal"):
        assert priority.lower_threads("idle", {1}, tasks) == "normal"
    assert len(caplog.records) == 1 and "refuses both SCHED_IDLE and nice 19" in caplog.records[0].getMessage()
    assert priority.lower_threads("normal", {1}, tasks) == "normal"


def test_a_thread_that_ends_before_it_is_lowered_refuses_nothing(monkeypatch, caplog):
    # a sidecar thread listed in /proc/self/task can end before its turn: the kernel then answers ESRCH to both
    # calls, which is no refusal (this once put "refuses both SCHED_IDLE and nice 19" in a run's output)
    gone = max(int(t) for t in os.listdir("/proc/self/task")) + 10 ** 6
    assert priority.lower(gone, "idle") == "gone" and priority.lower(gone, "low") == "gone"

    def ended(*a):
        raise ProcessLookupError(errno.ESRCH, "No such process")

    monkeypatch.setattr(os, "sched_setscheduler", ended)
    monkeypatch.setattr(os, "setpriority", ended)
    monkeypatch.setattr(os, "getpriority", ended)
    tasks = tempfile.mkdtemp()
    for t in ("1", "2"):
        os.mkdir(os.path.join(tasks, t))
    with caplog.at_level("INFO", logger="graphsignal"):
        assert priority.lower_threads("idle", {1}, tasks) == "normal"
    assert caplog.records == []


def test_a_starved_drain_counts_what_it_lost():
    """Under SCHED_IDLE, with a busy process on every core, the poller gets
    next to no CPU while a workload writes 400k records/s into a small
    ring: every record is either in the final payload or counted in
    graphsignal_dropped_records."""
    writer = compile_c(os.path.join(ROOT, "scripts", "c", "ring_writer.c"))
    fd, out_file = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    os.unlink(out_file)
    env = quiet_env(GRAPHSIGNAL_RING_CAPACITY="4096", GRAPHSIGNAL_SIGNALS_FILE=out_file)
    env.pop(config.SIDECAR_PRIORITY_ENV, None)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        r = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), writer, "1200000", "400000", "1"], env=env,
                           capture_output=True, text=True, timeout=240)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    try:
        assert r.returncode == 0, r.stderr[-2000:]
        accepted, wdropped = (int(x) for x in r.stdout.split()[:2])  # what went into the ring, what did not
        with open(out_file) as f:
            doc = json.load(f)
    finally:
        if os.path.exists(out_file):
            os.unlink(out_file)
    recorded = dropped = 0
    for m in doc["metrics"]:
        if m["name"] == "cuda_kernels_nanoseconds":
            recorded += sum(fr["samples"] for fr in m["stats"]["frames"])
        elif m["name"] == "graphsignal_dropped_records":
            dropped += m["stats"]["total"]
    print("written 1200000: recorded %d, dropped %d (the writer: %d into the ring, %d dropped)" % (
        recorded, dropped, accepted, wdropped))
    assert accepted + wdropped == 1200000 and dropped == wdropped and recorded == accepted
    assert recorded + dropped == 1200000
