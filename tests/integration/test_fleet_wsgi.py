"""graphsignal-server as a WSGI app under a production server: waitress
(`waitress-serve --call graphsignal.fleet.app:create_app`, the factory
configured by the environment) takes a real upload from graphsignal-run
and serves it back; the app keeps its own caps there (413, 411, 401); a
setting that cannot be used stops the server at start with one line."""
import gzip
import os
import signal
import subprocess
import sys

import orjson
import pytest

from graphsignal.fleet import settings
from support.fleet import request, upload_doc
from support.gsrun import GS_RUN, free_port, get_json, quiet_env, wait_for

pytest.importorskip("waitress")  # graphsignal[server]; the test extra has it

CHILD = """
from graphsignal import probes
import time
c = probes.counter("myapp_requests_total", {"route": "/v1"})
for i in range(150):
    c.add(1)
    time.sleep(0.01)
"""


def waitress_serve():
    """waitress of this Python: its script beside the interpreter, else
    `python -m waitress` (a waitress-serve found on PATH may belong to
    another Python, without what this one has installed, e.g. psycopg in a
    virtual environment made with --system-site-packages)."""
    path = os.path.join(os.path.dirname(sys.executable), "waitress-serve")
    if os.access(path, os.X_OK):
        return [path]
    return [sys.executable, "-m", "waitress"]


class Waitress:
    def __init__(self, tmp_path, **env):
        self.port = free_port()
        self.env = {k: v for k, v in quiet_env().items() if not k.startswith("GRAPHSIGNAL_SERVER_")}
        self.env.update({settings.DB_ENV: str(tmp_path / "fleet.db")}, **env)
        self.err_path = str(tmp_path / "waitress.err")
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(waitress_serve() + ["--listen=127.0.0.1:%d" % self.port, "--threads=4",
                                                             "--call", "graphsignal.fleet.app:create_app"],
                                         env=self.env, stdout=err, stderr=subprocess.STDOUT)

    def up(self):
        assert wait_for(self._health, 30), self.stop()

    def _health(self):
        if self.proc.poll() is not None:
            return False
        try:
            return get_json("http://127.0.0.1:%d/health" % self.port, 0.5)[0] == 200
        except OSError:
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        with open(self.err_path, "rb") as f:
            out = f.read().decode("utf-8", "replace")
        print(out)
        return out


@pytest.fixture
def waitress(tmp_path):
    servers = []

    def start(**env):
        w = Waitress(tmp_path, **env)
        servers.append(w)
        return w
    yield start
    for w in servers:
        w.stop()


def test_graphsignal_run_uploads_through_waitress_and_reads_back(waitress, tmp_path, backend):
    key_file = tmp_path / "keys"
    key_file.write_text("# the fleet's keys\nkey-file-1\n")
    os.chmod(str(key_file), 0o600)
    env = {settings.API_KEYS_ENV: "key-a,key-b", settings.API_KEY_FILE_ENV: str(key_file),
           settings.RETENTION_ENV: "3", settings.SYNC_ENV: "full", settings.DB_ENV: backend.location}
    if backend.password:  # PostgreSQL's, from a file of its own
        (tmp_path / "pw").write_text(backend.password + "\n")
        os.chmod(str(tmp_path / "pw"), 0o600)
        env[settings.DB_PASSWORD_FILE_ENV] = str(tmp_path / "pw")
    w = waitress(**env)
    w.up()
    env = quiet_env(GRAPHSIGNAL_API_KEY="key-a", GRAPHSIGNAL_API_BASE="http://127.0.0.1:%d" % w.port)
    proc = subprocess.run(GS_RUN + ["--listen-port", str(free_port()), sys.executable, "-c", CHILD], env=env,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    status, doc, _ = request(w.port, "GET", "/api/v1/instances", key="key-a")
    assert status == 200 and len(doc["instances"]) == 1, doc
    iid = doc["instances"][0]["instance_id"]
    status, snap, _ = request(w.port, "GET", "/api/v1/signals?instance_id=" + iid, key="key-a")
    assert status == 200
    (req,) = [m for m in snap["metrics"] if m["name"] == "myapp_requests_total"]
    assert req["type"] == "counter" and req["stats"]["total"] == 150 and req["tags"]["route"] == "/v1"
    assert snap["instance"]["uploads"] >= 1
    # each key sees its own; the key file's key is accepted too
    assert request(w.port, "GET", "/api/v1/instances", key="key-file-1")[:2] == (200, {"instances": []})
    assert request(w.port, "GET", "/api/v1/signals?instance_id=" + iid, key="key-b")[0] == 404
    assert request(w.port, "GET", "/api/v1/instances", key="key-z")[0] == 401
    assert w.stop().count("Traceback") == 0


def test_the_app_keeps_its_caps_under_waitress(waitress):
    w = waitress(**{settings.API_KEYS_ENV: "key-a"})
    w.up()
    body = gzip.compress(orjson.dumps(upload_doc("capped")))
    status, out, _ = request(w.port, "POST", "/api/v1/ingest", body=body, key="key-a",
                             headers={"Content-Encoding": "gzip"})
    assert status == 200, out
    # over the body cap: 413 from the app, whatever the WSGI server would take
    big = os.urandom(9 << 20)
    status, out, _ = request(w.port, "POST", "/api/v1/ingest", body=big, key="key-a",
                             headers={"Content-Encoding": "gzip"})
    assert status == 413 and "cap" in out["error"], out
    # a gzip bomb expands past MAX_JSON: 413, nothing stored
    bomb = gzip.compress(b"[" + b" " * (65 << 20) + b"]")
    status, out, _ = request(w.port, "POST", "/api/v1/ingest", body=bomb, key="key-a",
                             headers={"Content-Encoding": "gzip"})
    assert status == 413, out
    assert request(w.port, "GET", "/api/v1/signals?instance_id=capped", key="key-a")[0] == 200
    assert request(w.port, "POST", "/api/v1/ingest", body=body, key=None,
                   headers={"Content-Encoding": "gzip"})[0] == 401


@pytest.mark.parametrize("env,needle", [
    ({}, "no API keys"),
    ({settings.API_KEYS_ENV: "k", settings.SYNC_ENV: "sometimes"},
     "GRAPHSIGNAL_SERVER_SYNC must be one of normal|full, got 'sometimes'"),
    ({settings.API_KEYS_ENV: "k", settings.RETENTION_ENV: "0"},
     "GRAPHSIGNAL_SERVER_RETENTION_DAYS must be between 1 and 3650, got 0"),
    ({settings.API_KEY_FILE_ENV: "/nonexistent/keys"}, "GRAPHSIGNAL_SERVER_API_KEY_FILE /nonexistent/keys:"),
    ({settings.API_KEYS_ENV: "k", settings.DB_ENV: "/proc/graphsignal/x.db"}, "cannot open the database"),
])
def test_a_setting_that_cannot_be_used_stops_the_server_at_start(waitress, env, needle):
    w = waitress(**env)
    assert w.proc.wait(30) != 0
    out = w.stop()
    last = out.strip().splitlines()[-1]
    assert last.startswith("graphsignal.fleet.settings.SettingError: graphsignal-server: ") and needle in last, out


def test_the_command_reads_the_same_variables_and_its_flags_win(tmp_path):
    from graphsignal.cli import server as cli

    env = {settings.DB_ENV: "/tmp/env.db", settings.SYNC_ENV: "FULL", settings.RETENTION_ENV: "3",
           settings.API_KEYS_ENV: "e1"}
    cfg = cli.parse_args([], env)
    assert (cfg.db, cfg.sync, cfg.retention_days, cfg.api_keys) == ("/tmp/env.db", "full", 3.0, ("e1",))
    cfg = cli.parse_args(["--db", "/tmp/flag.db", "--sync", "normal", "--retention-days", "9"], env)
    assert (cfg.db, cfg.sync, cfg.retention_days) == ("/tmp/flag.db", "normal", 9.0)
    with pytest.raises(cli.UsageError, match="GRAPHSIGNAL_SERVER_SYNC must be one of normal|full"):
        cli.parse_args([], dict(env, **{settings.SYNC_ENV: "sometimes"}))
    assert cli.parse_args(["--sync", "full"], dict(env, **{settings.SYNC_ENV: "sometimes"})).sync == "full"
    # the factory takes the same values, checked the same way
    app_env = dict(env, **{settings.DB_ENV: str(tmp_path / "f.db")})
    from graphsignal.fleet.app import create_app
    from werkzeug.test import Client

    c = Client(create_app(app_env))
    assert c.get("/api/v1/instances", headers={"X-API-Key": "e1"}).get_json() == {"instances": []}
    with pytest.raises(settings.SettingError, match="^graphsignal-server: GRAPHSIGNAL_SERVER_RETENTION_DAYS"):
        create_app(dict(app_env, **{settings.RETENTION_ENV: "soon"}))
