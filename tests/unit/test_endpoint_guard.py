"""The /signals endpoint guards itself: Host headers that do not name this
machine are refused (DNS rebinding), idle connections are closed, and the
bound URL is logged once so --listen-port 0 is usable."""
import http.client
import logging
import socket
import time

import pytest
from werkzeug.test import Client

from graphsignal.sidecar.server import HostGuard, ServerThread, make_app
from graphsignal.sidecar.store import MetricStore


def status(app, host):
    headers = {} if host is None else {"Host": host}
    return Client(app).get("/signals", headers=headers).status_code


@pytest.mark.parametrize("host", ["localhost", "localhost:18259", "127.0.0.1", "127.0.0.1:18259", "127.9.8.7",
                                  "[::1]:18259", "[::1]", "LOCALHOST:1", "app.localhost:80", "localhost."])
def test_loopback_bind_answers_loopback_names(host):
    assert status(make_app(MetricStore(), host_guard=HostGuard("127.0.0.1")), host) == 200


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:18259", "192.168.1.20:18259",
                                  "localhost.evil.example.com", "127.0.0.1.nip.io", "[2001:db8::1]:18259",
                                  socket.gethostname(), ""])
def test_loopback_bind_refuses_other_hosts(host):
    app = make_app(MetricStore(), host_guard=HostGuard("127.0.0.1"))
    r = Client(app).get("/signals", headers={"Host": host})
    assert r.status_code == 403
    assert "not allowed" in r.get_json()["error"]
    assert Client(app).get("/health", headers={"Host": host}).status_code == 403


def test_a_bound_address_and_its_names_are_allowed():
    guard = HostGuard("10.11.12.13")
    guard.resolve()
    app = make_app(MetricStore(), host_guard=guard)
    assert status(app, "10.11.12.13:18259") == 200
    assert status(app, "localhost:18259") == 200  # an ssh tunnel to the loopback still works
    assert status(app, "evil.example.com") == 403


def test_a_wildcard_bind_allows_this_machines_names_and_addresses():
    guard = HostGuard("0.0.0.0")
    guard.resolve()
    app = make_app(MetricStore(), host_guard=guard)
    assert status(app, socket.gethostname() + ":18259") == 200
    addrs = {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None)}
    for a in addrs:
        assert status(app, "[%s]:1" % a if ":" in a else a + ":1") == 200
    assert status(app, "evil.example.com:18259") == 403


def test_a_request_without_host_is_answered():
    # HTTP/1.0 clients may omit it; browsers (the rebinding threat) never do
    assert Client(make_app(MetricStore(), host_guard=HostGuard("127.0.0.1"))).get(
        "/signals", environ_overrides={"HTTP_HOST": None}).status_code == 200


@pytest.fixture
def served():
    servers = []

    def start(**kw):
        guard = HostGuard("127.0.0.1")
        t = ServerThread(make_app(MetricStore(), host_guard=guard), "127.0.0.1", 0, host_guard=guard, **kw)
        t.start()
        assert t.bound.wait(10) and t.failed is None
        servers.append(t)
        return t
    yield start
    for t in servers:
        t.stop()


def test_over_real_http_a_foreign_host_gets_403(served):
    t = served()
    conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=10)
    conn.request("GET", "/signals", headers={"Host": "evil.example.com"})
    r = conn.getresponse()
    assert r.status == 403
    r.read()
    conn.request("GET", "/signals", headers={"Host": "127.0.0.1:%d" % t.port})  # same connection, kept alive
    r = conn.getresponse()
    assert r.status == 200
    r.read()
    conn.close()


def test_an_idle_connection_is_closed(served):
    t = served(idle_timeout=0.5)
    s = socket.create_connection(("127.0.0.1", t.port))
    s.settimeout(30)  # a safety net far beyond the server's timeout, not a measurement
    assert s.recv(1) == b""  # the server closed it without a request
    s.close()
    # a kept-alive connection that goes quiet after a request is closed too
    s = socket.create_connection(("127.0.0.1", t.port))
    s.settimeout(30)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    assert got.startswith(b"HTTP/1.1 200")
    s.close()
    # and the server still serves others
    conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=10)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200


def test_the_bound_url_is_logged_once(served, caplog):
    logger = logging.getLogger("graphsignal")
    was = logger.propagate
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="graphsignal"):
            t = served()
            deadline = time.monotonic() + 10
            while not caplog.records and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        logger.propagate = was
    lines = [r for r in caplog.records if "serving" in r.getMessage()]
    assert [r.getMessage() for r in lines] == ["graphsignal: serving http://127.0.0.1:%d/signals" % t.port]
    assert lines[0].levelno == logging.WARNING  # port 0 was asked for: shown at the default level


# -- GRAPHSIGNAL_SIGNALS_TOKEN -------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/signals", "/metrics", "/signals?window=1"])
def test_with_a_token_signals_and_metrics_answer_only_its_bearer(path):
    app = make_app(MetricStore(), windows=lambda store, s: {}, token="s3cret-token")
    for auth in (None, "Bearer wrong", "Bearer s3cret-toke", "bearer s3cret-token", "s3cret-token",
                 "Bearer s3cret-token ", "Basic czNjcmV0LXRva2Vu"):
        r = Client(app).get(path, headers={} if auth is None else {"Authorization": auth})
        assert r.status_code == 401, auth
        assert "GRAPHSIGNAL_SIGNALS_TOKEN" in r.get_json()["error"] and "s3cret" not in r.get_data(as_text=True)
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert Client(app).get(path, headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_with_a_token_health_stays_open_and_without_one_nothing_is_asked():
    assert Client(make_app(MetricStore(), token="t")).get("/health").status_code == 200
    assert Client(make_app(MetricStore())).get("/signals").status_code == 200
    assert Client(make_app(MetricStore(), token="")).get("/signals").status_code == 200


@pytest.mark.parametrize("method,path,headers", [
    ("GET", "/signals", {}), ("GET", "/signals?window=5", {}), ("GET", "/signals?window=x", {}),
    ("GET", "/metrics", {}), ("GET", "/health", {}), ("GET", "/nope", {}), ("POST", "/signals", {}),
    ("GET", "/signals", {"Host": "evil.example"})])
def test_every_answer_says_nosniff(method, path, headers):
    """A browser never reads an answer as anything but its declared type,
    whatever the status (as graphsignal-server's answers)."""
    app = make_app(MetricStore(), host_guard=HostGuard("127.0.0.1"))
    r = Client(app).open(path, method=method, headers=headers)
    assert r.headers.get("X-Content-Type-Options") == "nosniff", (path, r.status_code)
