"""graphsignal-top in a real terminal: tmux runs it against a live
sidecar; the test sends keys and reads the screen back. A private tmux
server (-L) keeps the person's own tmux sessions out of reach."""
import os
import shlex
import shutil
import subprocess
import uuid
import sys

import pytest

from support.top_sidecar import Sidecar, free_port, wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    def __init__(self):
        # one server per test: a server being killed by the previous test must
        # not take the next test's new session with it
        self.sock = "gs-top-test-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])

    def __call__(self, *args, check=True):
        r = subprocess.run(["tmux", "-L", self.sock, "-f", os.devnull] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
        if check and r.returncode != 0:
            raise AssertionError("tmux %s: %s" % (" ".join(args), r.stderr.decode()))
        return r.stdout.decode()

    def start(self, name, command, width=160, height=50):
        self("new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command)

    def screen(self, name):
        return self("capture-pane", "-p", "-t", name, check=False)

    def keys(self, name, *keys):
        self("send-keys", "-t", name, *keys)

    def wait(self, name, pred, timeout=15.0):
        """The screen once pred(screen) holds; fails with the last screen."""
        last = [""]

        def check():
            last[0] = self.screen(name)
            return pred(last[0])
        if not wait_for(check, timeout, 0.1):
            raise AssertionError("screen never matched; last screen:\n" + last[0])
        return last[0]

    def kill(self):
        self("kill-server", check=False)


@pytest.fixture(scope="module")
def sidecar():
    with Sidecar() as s:
        yield s


@pytest.fixture
def tmux():
    t = Tmux()
    yield t
    t.kill()


def shell_command(args, pidfile):
    """Runs graphsignal-top in the pane, then reports its exit status and
    the terminal modes it left behind (echo and canonical input must be
    back on) and keeps the pane open for the test to read."""
    top = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "graphsignal.cli.top"] + args)
    script = ("echo $$ > %s; env LANG=C.UTF-8 TERM=xterm-256color %s; rc=$?; "
              "echo; echo EXITED rc=$rc; stty -a | tr ' ' '\\n' | grep -xE -- '-?(echo|icanon)' | tr '\\n' ' '; "
              "echo; echo MODES-END; sleep 60") % (shlex.quote(pidfile), top)
    return "sh -c %s" % shlex.quote(script)


def child_running(ppid, needle):
    """The pid of a child of ppid whose command line contains needle."""
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
        fields = stat[stat.rfind(b")") + 2:].split()
        if int(fields[1]) == ppid and needle in cmd:
            return int(d)
    return None


def visible(screen):
    return [ln for ln in screen.splitlines() if ln.strip()]


def test_keys_tables_details_resize_and_quit(sidecar, tmux, tmp_path):
    tmux.start("top", shell_command(["--port", str(sidecar.port)], str(tmp_path / "pid")))
    s = tmux.wait("top", lambda s: "[k]ernels" in s and "ncclDevKernel" in s and "last " in s)
    assert "CATEGORY" in s and "gemm" in s and "attention" in s, s
    assert "PROBES" in s and "myengine_tokens" in s and "HOST" in s and " GPU" in s and "ENGINE" in s
    assert "q quit" in visible(s)[-1]

    # the selection moves; Enter opens the details of the selected kernel
    tmux.keys("top", "Down", "Down", "Enter")
    s = tmux.wait("top", lambda s: "DETAILS" in s and "per process" in s)
    assert "symbol" in s and "since start" in s and "pid " in s
    assert "category" in s
    tmux.keys("top", "Enter")
    tmux.wait("top", lambda s: "DETAILS" not in s and "CATEGORY" in s)

    # table switches
    tmux.keys("top", "g")
    s = tmux.wait("top", lambda s: "REPLAYS/S" in s and "graph_1" in s)
    tmux.keys("top", "m")
    s = tmux.wait("top", lambda s: "COPIES/S" in s and "memcpy host_to_device (pageable)" in s)
    tmux.keys("top", "s")
    s = tmux.wait("top", lambda s: "CALLS/S" in s and "CATEGORY" not in s and " stream" in s)
    tmux.keys("top", "k")
    s = tmux.wait("top", lambda s: "CATEGORY" in s and "sm90_xmma_gemm" in s)

    # resize: smaller, the frame fits and keeps the table; then back
    tmux("resize-window", "-t", "top", "-x", "90", "-y", "18")
    s = tmux.wait("top", lambda s: len(s.splitlines()) <= 18 and "[k]ernels" in s and "q quit" in s)
    assert max(len(ln) for ln in s.splitlines()) <= 90
    assert "ncclDevKernel" in s or "sm90_xmma" in s
    tmux("resize-window", "-t", "top", "-x", "160", "-y", "50")
    tmux.wait("top", lambda s: "PROBES" in s and "[k]ernels" in s)

    tmux.keys("top", "q")
    s = tmux.wait("top", lambda s: "MODES-END" in s)
    assert "EXITED rc=0" in s
    modes = s[s.index("EXITED"):]
    assert "-echo" not in modes and "-icanon" not in modes and "echo" in modes and "icanon" in modes


def test_unreachable_endpoint_is_shown_and_retried(tmux, tmp_path):
    port = free_port()
    tmux.start("down", shell_command(["--port", str(port)], str(tmp_path / "pid")), width=140, height=30)
    s = tmux.wait("down", lambda s: "unreachable" in s and "retrying" in s)
    assert "127.0.0.1:%d" % port in s and "waiting for data" in s
    tmux.keys("down", "q")
    assert "EXITED rc=0" in tmux.wait("down", lambda s: "MODES-END" in s)


def test_sigterm_restores_the_terminal(tmux, tmp_path):
    pidfile = tmp_path / "pid"
    tmux.start("term", shell_command(["--port", str(free_port())], str(pidfile)), width=120, height=30)
    tmux.wait("term", lambda s: "unreachable" in s)
    # the shell wrote its pid; graphsignal-top is its only child
    shell_pid = int(pidfile.read_text().strip())
    top_pid = wait_for(lambda: child_running(shell_pid, b"graphsignal.cli.top"), 10.0)
    assert top_pid, "graphsignal-top not found under pid %d" % shell_pid
    os.kill(top_pid, 15)
    s = tmux.wait("term", lambda s: "MODES-END" in s)
    assert "EXITED rc=143" in s
    modes = s[s.index("EXITED"):]
    assert "-echo" not in modes and "-icanon" not in modes and "icanon" in modes
