"""Helpers to run commands under graphsignal-run in tests."""
import json
import os
import socket
import subprocess
import sys
import tempfile
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
