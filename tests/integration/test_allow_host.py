"""Reachable behind a name: a profiler bound to 0.0.0.0, as README's
scrape example binds it, scraped over real HTTP through a name that is not
this machine's (a Kubernetes Service name in the Host header, as
Prometheus sends it when its target is that Service): 403 without
--allow-host, 200 with it or with GRAPHSIGNAL_ALLOW_HOSTS, 200 for any
name with --allow-host '*' and one warning line."""
import http.client
import json
import os
import subprocess
import sys

import pytest

from graphsignal import config
from support.gsrun import GS_RUN, free_port, wait_for

SERVICE = "gs.monitoring.svc.cluster.local"
WORKLOAD = [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"]


def get(port, path, host):
    """(status, body) of GET path on 127.0.0.1:port with this Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def up(port):
    """The endpoint answers, and /metrics has its first series (the host source's)."""
    try:
        return b"# TYPE " in get(port, "/metrics", "127.0.0.1:%d" % port)[1]
    except OSError:
        return False


class Run:
    def __init__(self, options=(), **env):
        self.port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHSIGNAL_")}
        environ.update(env)
        self.proc = subprocess.Popen(GS_RUN + ["--listen-host", "0.0.0.0", "--listen-port", str(self.port)]
                                     + list(options) + WORKLOAD, env=environ, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.proc.stdout.readline() == b"up\n"
        assert wait_for(lambda: up(self.port), timeout=30), self.finish()

    def finish(self):
        """(exit status, stderr text)."""
        self.proc.stdin.close()
        rc = self.proc.wait(30)
        err = self.proc.stderr.read().decode()
        self.proc.stdout.close()
        self.proc.stderr.close()
        print(err)
        return rc, err


@pytest.fixture
def running():
    runs = []

    def start(*options, **env):
        r = Run(options, **env)
        runs.append(r)
        return r
    yield start
    for r in runs:
        if r.proc.poll() is None:
            r.finish()


def scrape_both(port, host):
    """The statuses of /metrics and /signals through `host`."""
    m_status, m_body = get(port, "/metrics", host)
    s_status, s_body = get(port, "/signals", host)
    if m_status == 200:
        assert b"# TYPE " in m_body
    if s_status == 200:
        assert "metrics" in json.loads(s_body)
    if s_status == 403:
        assert "--allow-host" in json.loads(s_body)["error"]
    return m_status, s_status


def test_a_service_name_gets_403_without_allow_host(running):
    r = running()
    assert scrape_both(r.port, "%s:%d" % (SERVICE, r.port)) == (403, 403)
    assert scrape_both(r.port, "127.0.0.1:%d" % r.port) == (200, 200)  # the machine's own still pass
    assert r.finish()[0] == 0


def test_allow_host_lets_that_name_through_and_no_other(running):
    r = running("--allow-host", SERVICE, "--allow-host", "gs.monitoring")
    for host in (SERVICE, "%s:%d" % (SERVICE, r.port), SERVICE.upper() + ".", "gs.monitoring:80"):
        assert scrape_both(r.port, host) == (200, 200), host
    assert scrape_both(r.port, "other.monitoring.svc.cluster.local:%d" % r.port) == (403, 403)
    rc, err = r.finish()
    assert rc == 0 and "Host check" not in err


def test_the_environment_names_the_same(running):
    r = running(**{config.ALLOW_HOSTS_ENV: " %s , 10.96.0.15 " % SERVICE})
    assert scrape_both(r.port, "%s:%d" % (SERVICE, r.port)) == (200, 200)
    assert scrape_both(r.port, "10.96.0.15:%d" % r.port) == (200, 200)
    assert scrape_both(r.port, "evil.example.com") == (403, 403)
    assert r.finish()[0] == 0


def test_star_turns_the_check_off_with_one_warning_line(running):
    r = running("--allow-host", "*")
    for host in ("%s:%d" % (SERVICE, r.port), "evil.example.com", "[2001:db8::1]:80"):
        assert scrape_both(r.port, host) == (200, 200), host
    rc, err = r.finish()
    lines = [ln for ln in err.splitlines() if "Host check" in ln]
    assert rc == 0 and len(lines) == 1 and "--allow-host '*'" in lines[0] and "DNS rebinding" in lines[0], err


def test_a_bad_name_in_the_environment_is_one_line_and_left_out(running):
    r = running(**{config.ALLOW_HOSTS_ENV: "%s,gs.svc:18259,*.svc" % SERVICE})
    assert scrape_both(r.port, SERVICE) == (200, 200)
    assert scrape_both(r.port, "gs.svc") == (403, 403)
    rc, err = r.finish()
    lines = [ln for ln in err.splitlines() if config.ALLOW_HOSTS_ENV in ln]
    assert rc == 0 and len(lines) == 1 and "without a port" in lines[0] and "only * alone" in lines[0], err
