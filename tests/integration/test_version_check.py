"""The once-per-run version check, against a real local HTTP server as
GRAPHSIGNAL_API_BASE: what the request carries (the version, nothing
else), one line for a newer release, silence for every failure, the off
switch, and that it never holds graphsignal-run's exit."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from support.gsrun import GS_RUN, free_port, wait_for
from support.recorder import Recorder

from graphsignal import __version__
from graphsignal.sidecar import version_check

VERSION = "/api/v1/version"


def env_for(base, **extra):
    env = dict(os.environ)
    for k in ("GRAPHSIGNAL_LOG_LEVEL", "GRAPHSIGNAL_DISABLE_VERSION_CHECK", "GRAPHSIGNAL_API_KEY"):
        env.pop(k, None)  # the default log level: what a user sees
    env["GRAPHSIGNAL_API_BASE"] = base
    env.update(extra)
    return env


def run(env, seconds=2.0, timeout=120, until_asked=None):
    """graphsignal-run of a workload that prints hello and sleeps `seconds`. With until_asked (a Recorder), the
    workload first waits (at most 30 s) until the recorder has the version request: the sidecar starts after the
    workload, and on a loaded machine it may ask later than a fixed sleep lasts. proc.released is when it was seen."""
    flag = None
    code = "import time, sys; print('hello'); sys.stdout.flush(); time.sleep(%r)" % seconds
    if until_asked is not None:
        flag = os.path.join(tempfile.mkdtemp(prefix="gs-version-asked-"), "asked")  # ours, mode 0700
        code = ("import os, time, sys; print('hello'); sys.stdout.flush(); end = time.monotonic() + 30\n"
                "while not os.path.exists(%r) and time.monotonic() < end: time.sleep(0.02)\n"
                "time.sleep(%r)" % (flag, seconds))
    released = []

    def release():
        wait_for(lambda: until_asked.matching(VERSION), 30)
        released.append(time.monotonic())
        open(flag, "w").close()

    t = threading.Thread(target=release, daemon=True) if flag else None
    if t:
        t.start()
    try:
        proc = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", code], env=env,
                              capture_output=True, timeout=timeout)
    finally:
        if t:
            t.join(35)
            shutil.rmtree(os.path.dirname(flag), ignore_errors=True)
    proc.released = released[0] if released else None
    return proc


@pytest.fixture(scope="module")
def baseline():
    """What graphsignal-run says at the default log level on this machine
    with the check off (e.g. that there is no NVIDIA driver)."""
    # as long as the runs it is compared with: the sidecar starts after the
    # workload, and what it says about this machine needs it to be up
    proc = run(env_for("http://127.0.0.1:9", GRAPHSIGNAL_DISABLE_VERSION_CHECK="1"), seconds=1.5)
    return sorted(proc.stderr.decode().splitlines())


def answers(version_reply):
    def answer(req):
        if req["path"] == VERSION:
            return version_reply(req) if callable(version_reply) else version_reply
        return 200, b"{}"
    return answer


def test_a_newer_release_is_one_line_and_the_request_carries_only_our_version(baseline):
    with Recorder(answers((200, b'{"latest": "99.0.0"}'))) as rec:
        proc = run(env_for(rec.base, GRAPHSIGNAL_API_KEY="secret-key"), until_asked=rec)
        assert proc.returncode == 0 and proc.stdout == b"hello\n"
        lines = sorted(proc.stderr.decode().splitlines())
        assert lines == sorted(baseline + ["graphsignal: version 99.0.0 is available (this is %s): "
                                           "pip install -U graphsignal" % __version__])
        (req,) = rec.matching(VERSION)
        assert req["method"] == "GET" and req["query"] == "current=%s" % __version__
        assert req["body"] == b""
        headers = {k.lower(): v for k, v in req["headers"].items()}
        assert headers["user-agent"] == "graphsignal/%s" % __version__
        assert not {"x-api-key", "authorization", "cookie"} & set(headers)
        host = socket.gethostname()
        assert all(host not in v for k, v in headers.items() if k != "host")
        assert set(headers) <= {"host", "user-agent", "accept", "accept-encoding", "connection"}


@pytest.mark.parametrize("reply", [
    (500, b'{"error": "down"}'),
    (200, b"<html>a captive portal</html>"),
    (200, b'["not", "an", "object"]'),
    (200, b'{"latest": "99.0.0rc1"}'),
    (200, b'{"latest": "%s"}' % __version__.encode()),
    (301, b""),
])
def test_failures_and_non_answers_are_silent(reply, baseline):
    with Recorder(answers(reply)) as rec:
        proc = run(env_for(rec.base), seconds=1.5, until_asked=rec)
        assert rec.matching(VERSION)
    assert proc.returncode == 0 and proc.stdout == b"hello\n"
    assert sorted(proc.stderr.decode().splitlines()) == baseline


def test_an_unreachable_server_is_silent(baseline):
    proc = run(env_for("http://127.0.0.1:%d" % free_port()), seconds=1.5)
    assert proc.returncode == 0 and proc.stdout == b"hello\n"
    assert sorted(proc.stderr.decode().splitlines()) == baseline


def test_disable_version_check_turns_it_off(baseline):
    with Recorder(answers((200, b'{"latest": "99.0.0"}'))) as rec:
        proc = run(env_for(rec.base, GRAPHSIGNAL_DISABLE_VERSION_CHECK="1"), seconds=1.5)
        assert sorted(proc.stderr.decode().splitlines()) == baseline and rec.requests == []


def test_a_hung_server_never_holds_the_exit(baseline):
    with Recorder(answers(lambda req: (time.sleep(30), (200, b'{"latest": "99.0.0"}'))[1])) as rec:
        # the workload runs on until the sidecar has asked (a workload that is already gone gets no sidecar at
        # all, so no version check either), then 1.5 s more
        proc = run(env_for(rec.base), seconds=1.5, until_asked=rec)
        took = time.monotonic() - proc.released
        assert rec.matching(VERSION)
    assert proc.returncode == 0 and proc.stdout == b"hello\n"
    assert sorted(proc.stderr.decode().splitlines()) == baseline
    assert took < 20, took  # from the request to the exit: the server would have answered after 30 s


def test_only_a_higher_final_release_is_news():
    assert version_check.newer("0.1.1", "0.1.0")
    assert version_check.newer("0.10.0", "0.9.3")
    assert version_check.newer("1.0", "0.99.99")
    assert not version_check.newer("0.1.0", "0.1.0")
    assert not version_check.newer("0.0.9", "0.1.0")
    assert not version_check.newer("2.0.0rc1", "0.1.0")
    assert not version_check.newer("2.0.0.dev3", "0.1.0")
    assert not version_check.newer(None, "0.1.0")
    assert not version_check.newer(12, "0.1.0")
    assert not version_check.newer("lots", "0.1.0")
