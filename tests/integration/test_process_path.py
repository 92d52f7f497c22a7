"""graphsignal-run's two processes (issue 13): a profiler crash never
reaches the workload; killing graphsignal-run ends the run; signals sent to
its process group arrive once; descendants that outlive the workload keep
their console; a terminal passes through (pty, window size, job control);
start-up imports nothing heavy; rings a dead run left are removed."""
import fcntl
import json
import os
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
import uuid

import pytest

from support.gsrun import GS_RUN, free_port, get_json, quiet_env, run_wrapped, wait_for
from graphsignal.rings import stale

PY = sys.executable
STOPPED_LINE = "graphsignal: the profiler stopped (killed by %s); the workload runs on, unprofiled"


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if int(stat[stat.rfind(b")") + 2:].split()[1]) == pid:
            out.append((int(d), cmd))
    return out


def sidecar_of(sup_pid):
    for pid, cmd in children(sup_pid):
        if any(b"graphsignal.sidecar.process" in a for a in cmd):
            return pid
    return None


def serving(port):
    try:
        return get_json("http://127.0.0.1:%d/health" % port)[0] == 200
    except OSError:
        return False


def start(cmd, env=None, port=None, **kw):
    port = free_port() if port is None else port
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(port)] + cmd, env=env or quiet_env(),
                         stdout=kw.pop("stdout", subprocess.PIPE), stderr=kw.pop("stderr", subprocess.PIPE),
                         stdin=kw.pop("stdin", subprocess.DEVNULL), start_new_session=True, **kw)
    return p, port


def up(p, port):
    """The sidecar's pid once its endpoint answers."""
    assert wait_for(lambda: serving(port) or p.poll() is not None, 60), "the endpoint never came up"
    assert p.poll() is None
    pid = sidecar_of(p.pid)
    assert pid
    return pid


# -- crash isolation ---------------------------------------------------------------------

GATED = textwrap.dedent(r"""
    import os, sys, time
    gate = sys.argv[1]
    for i in range(20):
        print("before %d" % i, flush=True)
    sys.stdout.buffer.write(bytes(range(256)) + b"\n")
    sys.stdout.flush()
    while not os.path.exists(gate):
        time.sleep(0.01)
    for i in range(50):
        print("after %d" % i, flush=True)
        time.sleep(0.01)
    sys.exit(7)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_dead_sidecar_never_reaches_the_workload(sig, tmp_path):
    gate = tmp_path / "gate"
    gate.write_text("")
    bare = subprocess.run([PY, "-c", GATED, str(gate)], capture_output=True, timeout=60)
    gate.unlink()
    p, port = start([PY, "-c", GATED, str(gate)])
    sidecar = up(p, port)
    os.kill(sidecar, sig)
    line = p.stderr.readline().decode()  # the supervisor saw it die before the workload goes on
    gate.write_text("")
    out, err = p.communicate(timeout=60)
    assert p.returncode == bare.returncode == 7
    assert out == bare.stdout and len(out) > 800
    assert line == STOPPED_LINE % signal.Signals(sig).name + "\n"
    assert err == b""


def test_an_exception_in_the_sidecar_costs_one_line(tmp_path):
    # a numpy that cannot be imported, for the sidecar only (the workload
    # does not import it): the sidecar fails while it starts. It comes
    # through the user site, which is graphsignal's environment too (the
    # workload's PYTHONPATH never reaches the sidecar): a .pth there puts
    # the broken numpy first.
    broken = tmp_path / "broken"
    (broken / "numpy").mkdir(parents=True)
    (broken / "numpy" / "__init__.py").write_text("raise ImportError('numpy is broken here on purpose')\n")
    user_site = tmp_path / "userbase" / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "broken_numpy.pth").write_text("import sys; sys.path.insert(0, %r)\n" % str(broken))
    gate = tmp_path / "gate"
    gate.write_text("")
    env = quiet_env(PYTHONUSERBASE=str(tmp_path / "userbase"))
    env.pop("PYTHONNOUSERSITE", None)
    if subprocess.run([PY, "-c", "import site, sys; sys.exit(not site.ENABLE_USER_SITE)"], env=env).returncode:
        pytest.skip("this Python reads no user site (a virtual environment): nothing here reaches only the sidecar")
    bare = subprocess.run([PY, "-c", GATED, str(gate)], capture_output=True, timeout=60, env=env)
    gate.unlink()
    p, port = start([PY, "-c", GATED, str(gate)], env=env)
    if not select.select([p.stderr], [], [], 60)[0]:  # fail, never hang, when the line does not come
        p.kill()
        pytest.fail("graphsignal-run said nothing within 60 s")
    line = p.stderr.readline().decode()
    gate.write_text("")
    out, err = p.communicate(timeout=60)
    assert p.returncode == bare.returncode == 7
    assert out == bare.stdout
    assert line == ("graphsignal: the profiler stopped (ImportError: numpy is broken here on purpose); the workload "
                    "runs on, unprofiled\n")
    assert err == b""


def test_a_signal_cuts_the_linger_short_and_the_file_is_written(tmp_path):
    path = tmp_path / "signals.json"
    env = quiet_env(GRAPHSIGNAL_LINGER="600", GRAPHSIGNAL_SIGNALS_FILE=str(path))
    p, port = start([PY, "-c", "print('done', flush=True)"], env=env)
    assert p.stdout.readline() == b"done\n"
    assert wait_for(path.exists, 60)  # written before the linger starts
    assert wait_for(lambda: serving(port), 30)  # lingering: served after the workload exited
    os.kill(p.pid, signal.SIGINT)
    assert p.wait(60) == 0  # long before 600 s; the workload's status
    assert json.loads(path.read_text())["profiler"]
    assert not serving(port)


def test_killing_graphsignal_run_ends_the_run_with_sigterm(tmp_path):
    mark = tmp_path / "term"
    child = textwrap.dedent(r"""
        import signal, sys, time
        def on_term(s, f):
            open(sys.argv[1], "w").write("TERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("ready", flush=True)
        time.sleep(120)
    """)
    p, port = start([PY, "-c", child, str(mark)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout.readline() == b"ready\n"
    up(p, port)
    os.kill(p.pid, signal.SIGKILL)
    assert p.wait(30) == -signal.SIGKILL
    assert wait_for(mark.exists, 30)
    assert mark.read_text() == "TERM"


# -- signals once -------------------------------------------------------------------------

COUNT_SIGNALS = textwrap.dedent(r"""
    import signal, sys, time
    def on(s, f):
        sys.stdout.write("got %d\n" % s); sys.stdout.flush()
        if s == signal.SIGUSR2:
            sys.exit(0)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, on)
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
""")


def test_a_signal_to_the_process_group_reaches_the_workload_once():
    p, port = start([PY, "-c", COUNT_SIGNALS], stderr=subprocess.DEVNULL)
    assert p.stdout.readline() == b"ready\n"
    pgid = os.getpgid(p.pid)
    assert pgid == p.pid  # graphsignal-run leads its group, as under a shell or a batch system
    lines = []
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        os.killpg(pgid, s)
        lines.append(p.stdout.readline().decode().strip())
    # A second copy of any of them would be forwarded before SIGUSR2 (the
    # supervisor takes pending signals lowest number first, in order).
    os.kill(p.pid, signal.SIGUSR2)
    rest = p.stdout.read().decode().split()
    assert p.wait(30) == 0
    assert lines == ["got %d" % s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)]
    assert rest == ["got", str(int(signal.SIGUSR2))]


def test_without_a_shell_a_stopped_workload_is_left_to_whoever_stopped_it():
    child = "import os, sys; print(os.getpid(), flush=True); sys.stdin.readline(); print('resumed', flush=True)"
    p, port = start([PY, "-c", child], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    pid = int(p.stdout.readline())
    os.kill(pid, signal.SIGSTOP)
    state = lambda q: open("/proc/%d/stat" % q).read().rsplit(")", 1)[1].split()[0]  # noqa: E731
    assert wait_for(lambda: state(pid) == "T", 30)
    assert state(p.pid) != "T"  # no job-control shell would ever continue graphsignal-run
    os.kill(pid, signal.SIGCONT)
    out, _ = p.communicate(b"go\n", timeout=60)  # a stopped graphsignal-run would time out here
    assert out == b"resumed\n" and p.returncode == 0


# -- descendants that outlive the workload -------------------------------------------------

def test_a_daemon_keeps_its_console_after_the_workload_exits(tmp_path):
    gate = tmp_path / "gate"
    daemon = textwrap.dedent(r"""
        import os, sys, time
        for i in range(5):
            print("tick %d" % i, flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.01)
        for i in range(5, 10):
            print("tick %d" % i, flush=True)
            time.sleep(0.01)
        sys.stderr.write("daemon done\n")
    """)
    parent = textwrap.dedent(r"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=True)
        print("parent exits", flush=True)
        sys.exit(5)
    """)
    p, port = start([PY, "-c", parent, daemon, str(gate)])
    # graphsignal-run returns with the workload's status while the daemon
    # waits for the gate (a hang here would mean it waits for the daemon)
    assert p.wait(60) == 5
    gate.write_text("")
    out = p.stdout.read()
    err = p.stderr.read()
    lines = out.decode().splitlines()
    assert lines[0] == "parent exits" or "parent exits" in lines
    assert [ln for ln in lines if ln.startswith("tick")] == ["tick %d" % i for i in range(10)]
    assert err == b"daemon done\n"


# -- the terminal ----------------------------------------------------------------------------

TTY_CHILD = textwrap.dedent(r"""
    import json, os, signal, sys, time
    def on_winch(s, f):
        sys.stdout.write("winch %s\n" % (tuple(os.get_terminal_size(1)),))
        sys.stdout.flush()
    signal.signal(signal.SIGWINCH, on_winch)
    print(json.dumps({"isatty": [os.isatty(i) for i in (0, 1, 2)],
                      "stdout": tuple(os.get_terminal_size(1)), "stderr": tuple(os.get_terminal_size(2)),
                      "fg": os.tcgetpgrp(0) == os.getpgrp()}))
    sys.stdout.write("\x1b[1;32mgreen\x1b[0m plain \xe9\n")
    print("first")  # no flush: line by line only if stdout is a terminal
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    print("second")
    while not os.path.exists(sys.argv[1] + ".2"):
        time.sleep(0.01)
""")


class Terminal:
    """A pty made the controlling terminal of a new session: what a terminal
    emulator gives a shell."""

    def __init__(self, rows=33, cols=101):
        self.master, slave = os.openpty()
        self.resize(rows, cols)
        self.slave = slave
        self.buf = b""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)

    def resize(self, rows, cols):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def spawn(self, argv, env):
        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        p = subprocess.Popen(argv, env=env, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                             start_new_session=True, preexec_fn=ctty)
        os.close(self.slave)
        self.reader.start()
        return p

    def _read(self):
        while True:
            try:
                b = os.read(self.master, 65536)
            except OSError:
                return
            if not b:
                return
            with self.lock:
                self.buf += b

    def output(self):
        with self.lock:
            return self.buf

    def wait_for(self, needle, timeout=60):
        assert wait_for(lambda: needle in self.output(), timeout), self.output()


def run_in_terminal(argv, tmp_path, tag):
    gate = str(tmp_path / ("gate-" + tag))
    term = Terminal()
    p = term.spawn(argv + [gate], quiet_env(PYTHONIOENCODING="utf-8"))
    term.wait_for(b"first")
    assert b"second" not in term.output()
    open(gate, "w").close()
    term.wait_for(b"second")
    before_resize = term.output()
    term.resize(20, 77)
    term.wait_for(b"winch (77, 20)")
    open(gate + ".2", "w").close()
    assert p.wait(60) == 0
    return before_resize, term.output()


def test_a_terminal_passes_through(tmp_path):
    bare, bare_all = run_in_terminal([PY, "-c", TTY_CHILD], tmp_path, "bare")
    got, got_all = run_in_terminal(GS_RUN + ["--listen-port", str(free_port()), PY, "-c", TTY_CHILD], tmp_path,
                                   "wrapped")
    info = json.loads(got.split(b"\r\n", 1)[0])
    assert info == {"isatty": [True, True, True], "stdout": [101, 33], "stderr": [101, 33], "fg": True}
    assert b"\x1b[1;32mgreen\x1b[0m plain \xc3\xa9\r\n" in got
    assert got == bare  # byte for byte, the terminal's own output processing included
    # a resize reaches the workload with the new size (perhaps after one
    # SIGWINCH that still saw the old one: see Supervisor._sync_winsize)
    assert got_all.rstrip().endswith(b"winch (77, 20)")


def test_errors_are_caught_from_a_terminal_too(tmp_path):
    path = tmp_path / "signals.json"
    term = Terminal()
    code = "import sys; print('\\x1b[33mworking\\x1b[0m'); raise ValueError('shard 3 is missing')"
    p = term.spawn(GS_RUN + ["--listen-port", str(free_port()), PY, "-c", code],
                   quiet_env(GRAPHSIGNAL_SIGNALS_FILE=str(path)))
    assert p.wait(60) == 1
    term.wait_for(b"ValueError: shard 3 is missing")
    errors = json.loads(path.read_text())["errors"]
    (e,) = [e for e in errors if e["tags"].get("error.kind") == "exception"]
    assert e["message"] == "ValueError: shard 3 is missing" and e["tags"]["stream"] == "stderr"


def test_pipes_stay_pipes_when_there_is_no_terminal():
    proc, _ = run_wrapped([PY, "-c", "import os; print([os.isatty(i) for i in (0, 1, 2)])"], input=b"")
    assert proc.stdout == b"[False, False, False]\n"


@pytest.mark.parametrize("fd", [0, 1, 2])
def test_a_stream_we_were_started_without_is_closed_for_the_workload_too(fd):
    code = ("import os, sys\nout = int(sys.argv[1])\nfor fd in (0, 1, 2):\n    try:\n        os.fstat(fd)\n"
            "        state = 'open'\n    except OSError:\n        state = 'closed'\n"
            "    os.write(out, b'%d %s\\n' % (fd, state.encode()))\n")

    def run(argv):
        r, w = os.pipe()
        try:
            p = subprocess.Popen(argv + [str(w)], env=quiet_env(), pass_fds=(w,), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 preexec_fn=lambda: os.close(fd))
        finally:
            os.close(w)
        assert p.wait(60) == 0
        with os.fdopen(r, "rb") as f:
            return f.read()
    bare = run([PY, "-c", code])
    assert b"%d closed" % fd in bare
    assert run(GS_RUN + ["--listen-port", str(free_port()), PY, "-c", code]) == bare


@pytest.mark.skipif(shutil.which("tmux") is None or shutil.which("bash") is None, reason="needs tmux and bash")
def test_job_control_in_a_real_shell(tmp_path):
    sock = "gs-h13-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])

    def tmux(*args):
        return subprocess.run(["tmux", "-L", sock, "-f", os.devnull] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=10).stdout.decode()

    def screen():
        return tmux("capture-pane", "-p", "-t", "s")

    counter = tmp_path / "count.py"
    counter.write_text("import itertools, time\nfor i in itertools.count():\n"
                       "    print('count', i, flush=True)\n    time.sleep(0.1)\n")
    env = "env GRAPHSIGNAL_LOG_LEVEL=error PS1='$ ' bash --norc --noprofile"
    tmux("new-session", "-d", "-s", "s", "-x", "120", "-y", "40", env)
    try:
        run = " ".join(shlex.quote(a) for a in GS_RUN + ["--listen-port", str(free_port()), PY, str(counter)])
        tmux("send-keys", "-t", "s", run, "Enter")
        assert wait_for(lambda: "count 3" in screen(), 60), screen()
        tmux("send-keys", "-t", "s", "C-z")
        assert wait_for(lambda: "Stopped" in screen(), 30), screen()
        stopped_at = max(int(w) for w in screen().split("count ")[1:] for w in [w.split()[0]] if w.isdigit())
        tmux("send-keys", "-t", "s", "fg", "Enter")
        assert wait_for(lambda: "count %d" % (stopped_at + 3) in screen(), 60), screen()
        tmux("send-keys", "-t", "s", "C-c")
        assert wait_for(lambda: "KeyboardInterrupt" in screen(), 30), screen()
        tmux("send-keys", "-t", "s", "echo rc=$?", "Enter")
        assert wait_for(lambda: "rc=130" in screen(), 30), screen()
        assert screen().count("KeyboardInterrupt") == 1  # ^C reached the workload once
    finally:
        tmux("kill-server")


# -- start-up ---------------------------------------------------------------------------------

def test_nothing_heavy_is_imported_by_graphsignal_run():
    out = subprocess.run([PY, "-X", "importtime", "-m", "graphsignal.cli.run", "--listen-port", str(free_port()),
                          "true"], capture_output=True, text=True, env=quiet_env(), timeout=60)
    assert out.returncode == 0
    modules = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines()
               if line.startswith("import time:")}
    assert "graphsignal" in modules
    assert modules & {"numpy", "cffi", "werkzeug", "orjson", "psutil", "requests", "pynvml", "_gsnative"} == set()


def test_thread_pools_are_capped_in_the_sidecar_only(tmp_path):
    child = ("import os, sys, time; print(os.environ.get('OPENBLAS_NUM_THREADS'), "
             "os.environ.get('OMP_NUM_THREADS'), flush=True); sys.stdin.read()")
    p, port = start([PY, "-c", child], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert p.stdout.readline() == b"None None\n"
        sidecar = up(p, port)
        with open("/proc/%d/environ" % sidecar, "rb") as f:
            env = f.read().split(b"\0")
        assert b"OPENBLAS_NUM_THREADS=1" in env and b"OMP_NUM_THREADS=1" in env
    finally:
        p.stdin.close()
    assert p.wait(60) == 0


def test_listen_port_zero_says_where_it_listens():
    p, _ = start([PY, "-c", "import sys; sys.stdin.read()"], env=quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning"),
                 port=0, stdin=subprocess.PIPE)
    try:
        url = None
        for line in iter(p.stderr.readline, b""):
            if b"serving http://" in line:
                url = line.decode().split("serving ", 1)[1].strip()
                break
        assert url and url.startswith("http://127.0.0.1:") and url.endswith("/signals")
        assert get_json(url)[0] == 200
    finally:
        p.stdin.close()
    assert p.wait(60) == 0


# -- redaction ----------------------------------------------------------------------------------

def test_secrets_on_command_lines_are_not_served(tmp_path):
    gate = tmp_path / "gate"
    grandchild = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
    parent = "import subprocess, sys; subprocess.run([sys.executable, '-c'] + sys.argv[1:4])"
    p, port = start([PY, "-c", parent, grandchild, str(gate), "--hf-token=hf_GRANDSECRET", "--api-key",
                     "sk-live-ROOTSECRET"], stderr=subprocess.DEVNULL)
    url = "http://127.0.0.1:%d/signals" % port

    def command_lines():
        try:
            body = get_json(url)[1]
        except OSError:
            return None
        lines = [r["attributes"].get("process.command_line") for r in body["resources"] if r["kind"] == "process"]
        # the grandchild's resource (from the host source's poll) is there
        return lines if len([line for line in lines if line and "--hf-token" in line]) >= 2 else None
    try:
        lines = wait_for(command_lines, 60)
        assert lines, "the grandchild never showed up in /signals"
        raw = json.dumps(get_json(url)[1])
    finally:
        gate.write_text("")
    assert p.wait(60) == 0
    assert "SECRET" not in raw
    assert any("--api-key ***" in line for line in lines if line)
    assert any(line.endswith("--hf-token=***") for line in lines if line)


# -- rings a dead run left behind -----------------------------------------------------------------

def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_stale_rings_are_found_by_lock_and_writer(tmp_path):
    d = str(tmp_path)
    gone = dead_pid()
    live_run = "a1a1a1a1a1a1"
    fd = stale.hold_run_lock(live_run, d)  # a run whose profiler still lives
    over_run, no_lock_run, own = "b2b2b2b2b2b2", "c3c3c3c3c3c3", "d4d4d4d4d4d4"
    open(stale.lock_path(over_run, d), "w").close()  # left by a run that is over: nobody holds it
    names = ["gs-%s-%d-cupti" % (live_run, gone), "gs-%s-%d-cupti" % (over_run, gone),
             "gs-%s-%d-probe" % (over_run, os.getpid()), "gs-%s-%d-cupti" % (no_lock_run, gone),
             "gs-%s-%d-probe" % (own, gone), "gs-not-a-ring", "other-file"]
    for n in names:
        open(os.path.join(d, n), "w").close()
    fresh = "gs-%s-%d-probe" % (no_lock_run, gone)  # maybe a sidecar from before run locks is about to read it
    open(os.path.join(d, fresh), "w").close()
    old = time.time() - stale.UNLOCKED_AGE - 10
    os.utime(os.path.join(d, "gs-%s-%d-cupti" % (no_lock_run, gone)), (old, old))
    removed = stale.remove_stale(own, d)
    left = set(os.listdir(d))
    # the over run's dead writer goes; its live writer and therefore its lock stay
    assert set(removed) == {"gs-%s-%d-cupti" % (over_run, gone), "gs-%s-%d-cupti" % (no_lock_run, gone)}
    assert "gs-%s-%d-probe" % (over_run, os.getpid()) in left and "gs-%s.run" % over_run in left
    assert {"gs-%s-%d-cupti" % (live_run, gone), "gs-%s.run" % live_run, "gs-%s-%d-probe" % (own, gone),
            "gs-not-a-ring", "other-file", fresh} <= left
    os.unlink(os.path.join(d, "gs-%s-%d-probe" % (over_run, os.getpid())))
    assert stale.remove_stale(own, d) == ["gs-%s.run" % over_run]  # the lock goes with its last ring
    os.close(fd)  # the live run ends: its dead writer's ring is stale now
    assert sorted(stale.remove_stale(own, d)) == ["gs-%s-%d-cupti" % (live_run, gone), "gs-%s.run" % live_run]


def test_a_dead_sidecars_rings_go_at_exit_and_the_next_run_clears_older_ones(tmp_path):
    shm = stale.SHM_DIR
    old_run = uuid.uuid4().hex[:12]
    old = ["gs-%s-%d-cupti" % (old_run, dead_pid()), "gs-%s.run" % old_run]
    for n in old:
        open(os.path.join(shm, n), "w").close()
    # the workload leaves a ring of its own run; the sidecar is killed, so
    # only the supervisor can remove it
    child = textwrap.dedent(r"""
        import os, sys
        run = os.environ["GRAPHSIGNAL_RUN_ID"]
        open("/dev/shm/gs-%s-%d-test" % (run, os.getpid()), "w").close()
        print(run, flush=True)
        sys.stdin.read()
    """)
    p, port = start([PY, "-c", child], stdin=subprocess.PIPE)
    try:
        run_id = p.stdout.readline().decode().strip()
        sidecar = up(p, port)
        # the sidecar cleared the earlier run's leftovers when it started
        assert wait_for(lambda: not any(os.path.exists(os.path.join(shm, n)) for n in old), 30)
        assert os.path.exists(stale.lock_path(run_id))
        os.kill(sidecar, signal.SIGKILL)
        assert p.stderr.readline().decode() == STOPPED_LINE % "SIGKILL" + "\n"
    finally:
        p.stdin.close()
        for n in old:
            if os.path.exists(os.path.join(shm, n)):
                os.unlink(os.path.join(shm, n))
    assert p.wait(60) == 0
    assert [n for n in os.listdir(shm) if n.startswith("gs-" + run_id)] == []
