"""Helpers to run commands under graphsignal-run in tests."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

GS_RUN = [sys.executable, "-m", "graphsignal.cli.run"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def quiet_env(**extra):
    env = dict(os.environ)
    env["GRAPHSIGNAL_LOG_LEVEL"] = "error"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_wrapped(cmd, *, options=(), env=None, timeout=120, input=None, listen_port=None, prefix=()):
    """Runs cmd under graphsignal-run (itself started by `prefix`, e.g. an
    unshare wrapper, when given); returns (CompletedProcess, final /signals
    payload as a dict, or None when none was written)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="gs-signals-")
    os.close(fd)
    os.unlink(path)
    env = dict(env if env is not None else quiet_env())
    env["GRAPHSIGNAL_SIGNALS_FILE"] = path
    opts = list(options)
    if "--listen-port" not in opts:
        opts += ["--listen-port", str(listen_port or free_port())]
    try:
        proc = subprocess.run(list(prefix) + GS_RUN + opts + list(cmd), env=env, capture_output=True, timeout=timeout, input=input)
        signals = None
        if os.path.exists(path):
            with open(path, "rb") as f:
                signals = json.load(f)
        return proc, signals
    finally:
        if os.path.exists(path):
            os.unlink(path)


def get_json(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, json.loads(r.read())


def json_or_none(url, timeout=2.0):
    """The document at url, or None while nothing (or nothing valid) answers
    there: an endpoint that is not up yet, or has gone."""
    try:
        return get_json(url, timeout)[1]
    except (urllib.error.URLError, ConnectionError, OSError, ValueError):
        return None


def wait_for(pred, timeout=20.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return pred()


def metrics(signals, name, **tags):
    return [m for m in signals["metrics"] if m["name"] == name and all(m["tags"].get(k) == v for k, v in tags.items())]


def rings_of(*pids):
    """The /dev/shm files named as graphsignal's rings (gs-<run>-<pid>-...) of these processes: what a test
    that must leave no ring behind looks at, whatever tests running beside it (other pytest workers) create."""
    marks = ["-%d-" % int(p) for p in pids]
    return {f for f in os.listdir("/dev/shm") if f.startswith("gs-") and any(m in f for m in marks)}


def wait_code(flag, cap=30):
    """Python lines for a workload that waits (at most `cap` s) until the file `flag` exists: a test releases it
    (Release) once the sidecar has shown what the test checks, however late a loaded machine lets that come."""
    return ("import os as _os, time as _time\n_end = _time.monotonic() + %r\n"
            "while not _os.path.exists(%r) and _time.monotonic() < _end: _time.sleep(0.02)\n" % (cap, flag))


class Release:
    """A flag file (path; not there yet) that a thread creates once pred() holds, or after `timeout` s (the
    workload then goes on, and the test's own asserts say what was missing); `code` is the workload's wait for
    it (wait_code). seen: whether pred() held. A test waits for what it tests, never for a fixed time:

        with Release(lambda: ...) as rel:
            run_wrapped([sys.executable, "-c", rel.code + WORKLOAD], ...)
    """

    def __init__(self, pred, timeout=30.0, interval=0.05):
        fd, self.path = tempfile.mkstemp(prefix="gs-release-")
        os.close(fd)
        os.unlink(self.path)
        self.pred, self.timeout, self.interval = pred, timeout, interval
        self.code = wait_code(self.path, cap=timeout + 5)
        self.seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        deadline = time.monotonic() + self.timeout
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                self.seen = bool(self.pred())
            except Exception:
                self.seen = False
            if self.seen:
                break
            self._stop.wait(self.interval)
        open(self.path, "w").close()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(self.timeout + 5)
        if os.path.exists(self.path):
            os.unlink(self.path)
        return False


def run_released_by_stderr(make_cmd, needle, *, env, timeout=120):
    """Runs make_cmd(wait) (wait: the Python lines of a workload's wait for its release, wait_code) with its output
    captured, and releases the workload once `needle` (bytes) shows on its stderr, at most 30 s after it starts:
    for what the sidecar reports on the shared stderr while the workload runs. A CompletedProcess."""
    out, err = [], []

    def pump(stream, into):
        for chunk in iter(lambda: stream.read1(65536), b""):
            into.append(chunk)

    with Release(lambda: needle in b"".join(list(err))) as rel:
        cmd = make_cmd(rel.code)
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pumps = [threading.Thread(target=pump, args=(p.stdout, out), daemon=True),
                 threading.Thread(target=pump, args=(p.stderr, err), daemon=True)]
        for t in pumps:
            t.start()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
        finally:
            for t in pumps:
                t.join(10)
            p.stdout.close()
            p.stderr.close()
    return subprocess.CompletedProcess(cmd, p.returncode, b"".join(out), b"".join(err))
