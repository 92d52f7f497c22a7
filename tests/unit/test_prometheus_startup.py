"""The scraper while an engine starts and when it recovers, against a real
HTTP server on 127.0.0.1 whose answers are scripted per request (status,
body): "not up yet" (connection refused, HTTP 503 while the model loads,
as llama-server does) is start-up: one line that names the address and
what it answered, and one `info` entry; a failure after the engine has
answered is reported once (a warning); each is marked resolved in
`errors`, with one line, when a scrape succeeds again."""
import http.server
import json
import logging
import os
import socket
import threading

import pytest

from graphsignal.sidecar.payload import build_signals
from graphsignal.sources import prometheus
from graphsignal.sidecar.store import MetricStore

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "engines")

with open(os.path.join(DATA, "llamacpp_2_live.txt"), encoding="utf-8") as _f:
    LLAMACPP = _f.read().split("\n", 1)[1].encode()  # without the fixture's SOURCE line
# llama-server's answer while it loads the model (server.cpp: the "Loading model" error body)
LOADING = (503, b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')


class Scripted:
    """A real HTTP server: the n-th GET gets answers[n] (the last answer
    repeats); `served` counts requests."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.served = 0
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                status, body = owner.answers[min(owner.served, len(owner.answers) - 1)]
                owner.served += 1
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/metrics" % self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def scripted():
    made = []

    def make(answers):
        s = Scripted(answers)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def make_source(url, engine="llamacpp"):
    clock = [0.0]
    store = MetricStore()
    src = prometheus.PrometheusSource(store, url, engine, clock=lambda: clock[0])
    src.setup()
    return src, store, clock


def poll_at(src, clock, ticks):
    for t in ticks:
        clock[0] = float(t)
        src.poll()


def up(store):
    return store.lookup(prometheus.UP_METRIC, "gauge")[0].value


def errors(store):
    return json.loads(build_signals(store))["errors"]


def test_http_503_while_loading_is_one_line_and_an_info_entry_then_resolved(scripted, caplog):
    srv = scripted([LOADING] * 4 + [(200, LLAMACPP)])
    src, store, clock = make_source(srv.url)
    with caplog.at_level(logging.INFO, logger="graphsignal"):
        poll_at(src, clock, range(0, 10))
        assert srv.served == 4 and up(store) == 0  # attempts at 0, 1, 3, 7 s (the backoff)
        (e,) = errors(store)
        assert e["level"] == "info" and e["resolved_ns"] is None and e["tags"]["url"] == srv.url
        assert srv.url in e["message"] and "HTTP 503" in e["message"] and "--metrics-port" in e["message"]
        poll_at(src, clock, range(10, 16))
    assert srv.served == 5 and up(store) == 1  # the next attempt, at 15 s, got the metrics
    assert store.lookup("llamacpp:tokens_predicted_total")[0].total == 112
    (e,) = errors(store)
    assert e["resolved_ns"] is not None and e["count"] == 1  # said once, not once per attempt
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 2, lines  # when it started failing, and when it answered
    assert "no engine metrics yet: %s answers HTTP 503" % srv.url in lines[0]
    assert "%s: answering" % srv.url in lines[1]
    assert store.lookup(prometheus.FAILURES_METRIC)[0].total == 4


def test_connection_refused_then_503_then_200_is_start_up(scripted):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: refused
    src, store, clock = make_source("http://127.0.0.1:%d/metrics" % port)
    poll_at(src, clock, range(0, 8))
    assert up(store) == 0 and src.failures >= 3
    srv = scripted([LOADING, (200, LLAMACPP)])
    src.url = srv.url  # the engine's server comes up (same source, same history)
    poll_at(src, clock, range(8, 24))
    assert up(store) == 1 and srv.served == 2  # attempts at 15 s and 23 s
    assert {e["level"] for e in errors(store)} == {"info"}  # starting is no error,
    assert all(e["resolved_ns"] is not None for e in errors(store))  # and it is over
    assert "refuses connections" in errors(store)[0]["message"]


def test_503_for_longer_than_never_up_warn_is_said_once_and_resolved_on_recovery(scripted, caplog):
    srv = scripted([LOADING])
    src, store, clock = make_source(srv.url)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poll_at(src, clock, range(0, int(prometheus.NEVER_UP_WARN) + 30))
    (first, e) = errors(store)
    assert first["level"] == "info" and e["level"] == "warning"
    assert "HTTP 503" in e["message"] and "loading" in e["message"] and e["resolved_ns"] is None
    assert len(caplog.records) == 2  # at once, and after NEVER_UP_WARN
    srv.answers = [(200, LLAMACPP)]
    poll_at(src, clock, range(int(prometheus.NEVER_UP_WARN) + 30, int(prometheus.NEVER_UP_WARN) + 40))
    assert up(store) == 1
    for e in errors(store):
        assert isinstance(e["resolved_ns"], int) and e["resolved_ns"] >= e["last_ns"]


def test_failure_after_the_engine_answered_is_reported_then_resolved(scripted, caplog):
    # up; then 503 (not start-up any more: the engine did answer); then up again
    srv = scripted([(200, LLAMACPP), LOADING, LOADING, (200, LLAMACPP)])
    src, store, clock = make_source(srv.url)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poll_at(src, clock, [0, 1])
        (e,) = errors(store)
        assert "failed: HTTP 503" in e["message"] and e["resolved_ns"] is None and up(store) == 0
        assert e["tags"] == {"source": "prometheus", "url": srv.url}
        poll_at(src, clock, [2, 3, 4])  # 503 at 2 s, backoff to 4 s
    assert srv.served == 4 and up(store) == 1
    (e,) = errors(store)
    assert e["count"] == 1  # the second 503 is the same, current failure: not a new entry
    assert e["resolved_ns"] is not None
    assert len(caplog.records) == 2  # the failure and the recovery


def test_the_same_failure_coming_back_is_current_again_without_a_second_log_line(scripted, caplog):
    bad = (500, b"internal error")
    srv = scripted([(200, LLAMACPP), bad, (200, LLAMACPP), bad, (200, LLAMACPP)])
    src, store, clock = make_source(srv.url)
    with caplog.at_level(logging.WARNING, logger="graphsignal"):
        poll_at(src, clock, [0, 1, 2])  # good, bad, good (the bad one backs off 1 s)
        (e,) = errors(store)
        assert e["resolved_ns"] is not None
        poll_at(src, clock, [3])  # bad again, 3 s after the first: within LOG_REPEAT
        (e,) = errors(store)
        assert e["count"] == 2 and e["resolved_ns"] is None
        assert len(caplog.records) == 2  # the first failure and its recovery; not this one
        poll_at(src, clock, [4])
        assert errors(store)[0]["resolved_ns"] is not None
        srv.answers.append(bad)
        srv.answers.append((200, LLAMACPP))
        poll_at(src, clock, [4 + prometheus.LOG_REPEAT])  # a minute later: logged again
        poll_at(src, clock, [4 + prometheus.LOG_REPEAT + 1])
    assert len(caplog.records) == 4
    (e,) = errors(store)
    assert e["count"] == 3 and e["resolved_ns"] is not None


def test_resolution_touches_only_the_scrapers_own_entries():
    store = MetricStore()
    store.add_error("error", "process 7 exited with code 1", tags={"source": "sidecar"})
    store.add_error("warning", "scraping x failed: HTTP 500", tags={"source": "prometheus", "url": "x"})
    store.add_error("warning", "scraping y failed: HTTP 500", tags={"source": "prometheus", "url": "y"})
    assert store.resolve_errors({"source": "prometheus", "url": "x"}) == 1
    assert [e["resolved_ns"] is not None for e in store.errors] == [False, True, False]
    assert store.resolve_errors({"source": "prometheus", "url": "x"}) == 0  # already resolved
