"""GRAPHSIGNAL_SIGNALS_TOKEN: with it, /signals and /metrics answer only
requests that bear it, graphsignal-top and graphsignal-diff send it from
the same variable, the workload never sees it, and a redirect never
carries it to another server."""
import contextlib
import http.server
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from graphsignal import httpfetch
from support.gsrun import GS_RUN, free_port, quiet_env, wait_for
from support.hostile_http import REFERENCE, console_script

TOKEN = "tok-" + "9f8e7d6c5b4a" * 2
PY = sys.executable


def _status(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None  # not up yet


def test_a_run_with_a_token_serves_only_its_bearers_and_the_clients_send_it(tmp_path):
    port = free_port()
    gate = tmp_path / "gate"
    code = ("import os, sys, time\n"
            "print('workload sees the token:', 'GRAPHSIGNAL_SIGNALS_TOKEN' in os.environ, flush=True)\n"
            "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n")
    env = quiet_env(GRAPHSIGNAL_SIGNALS_TOKEN=TOKEN)
    run = subprocess.Popen(GS_RUN + ["--listen-port", str(port), PY, "-c", code, str(gate)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = "http://127.0.0.1:%d" % port
        assert wait_for(lambda: _status(base + "/health") == 200, timeout=60)
        assert _status(base + "/signals") == 401 and _status(base + "/metrics") == 401
        assert _status(base + "/signals", "wrong") == 401
        assert _status(base + "/signals", TOKEN) == 200 and _status(base + "/metrics", TOKEN) == 200
        top = subprocess.run(console_script("graphsignal-top") + ["--once", "--port", str(port)], env=env,
                             capture_output=True, timeout=60)
        assert top.returncode == 0 and b"unreachable" not in top.stdout, top.stdout[-2000:]
        no_token = subprocess.run(console_script("graphsignal-top") + ["--once", "--port", str(port)],
                                  env=quiet_env(), capture_output=True, timeout=60)
        assert no_token.returncode == 1 and b"HTTP 401" in no_token.stdout
        diff = subprocess.run(console_script("graphsignal-diff") + [REFERENCE, base + "/signals"], env=env,
                              capture_output=True, timeout=60)
        assert diff.returncode == 0, diff.stderr
    finally:
        gate.write_text("")
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert out.splitlines()[0] == b"workload sees the token: False"


@contextlib.contextmanager
def serving(answer):
    """A real HTTP server on 127.0.0.1 whose GETs are answered by
    answer(handler) and whose Authorization headers are kept; yields
    (port, the headers seen)."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            answer(self)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_port, seen
    finally:
        srv.shutdown()
        srv.server_close()


def _ok(h, body=b'{"metrics": []}'):
    h.send_response(200)
    h.end_headers()
    h.wfile.write(body)


def test_a_redirect_never_carries_the_token_elsewhere():
    with serving(_ok) as (other, seen_there):
        def redirect(h):
            h.send_response(302)
            h.send_header("Location", "http://127.0.0.1:%d/signals" % other)
            h.end_headers()

        with serving(redirect) as (first, seen_first):
            body = httpfetch.get("http://127.0.0.1:%d/signals" % first, 5, 10, token=TOKEN)
    assert body == b'{"metrics": []}'
    assert seen_first == ["Bearer " + TOKEN] and seen_there == [None]


@pytest.mark.parametrize("value", [None, ""])
def test_without_the_variable_no_authorization_is_sent(monkeypatch, value):
    monkeypatch.delenv("GRAPHSIGNAL_SIGNALS_TOKEN", raising=False)
    if value is not None:
        monkeypatch.setenv("GRAPHSIGNAL_SIGNALS_TOKEN", value)
    with serving(_ok) as (port, seen):
        httpfetch.get("http://127.0.0.1:%d/" % port, 5, 10)
    assert seen == [None]


def test_a_token_no_header_can_carry_is_one_line_and_nothing_is_served_without_it():
    import os
    import time

    port = free_port()
    env = quiet_env(GRAPHSIGNAL_LOG_LEVEL="warning", GRAPHSIGNAL_SIGNALS_TOKEN=os.fsdecode(b"\xff\xfe"))
    p = subprocess.Popen(GS_RUN + ["--listen-port", str(port), sys.executable, "-c",
                                   "import time; time.sleep(2); raise SystemExit(3)"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.2)
    with pytest.raises(urllib.error.URLError):  # never served without the token it was asked to require
        urllib.request.urlopen("http://127.0.0.1:%d/signals" % port, timeout=2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3 and out == b""
    lines = [ln for ln in err.decode().splitlines() if "GRAPHSIGNAL_SIGNALS_TOKEN" in ln]
    assert len(lines) == 1 and "printable ASCII" in lines[0] and "not served" in lines[0]
