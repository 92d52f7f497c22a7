"""graphsignal.httpserve's quiet request handler, as each server uses it:
no line per request; errors at debug level, under the sidecar's logger
(graphsignal) or graphsignal-server's own (graphsignal.fleet), never the
other's."""
import logging

from werkzeug.test import Client

from graphsignal.fleet import handler
from graphsignal.fleet.app import make_app
from graphsignal.fleet.db import DB
from graphsignal.httpserve import QuietHandler
from graphsignal.sidecar.server import ServerThread


def _log(handler_cls, caplog):
    h = object.__new__(handler_cls)  # only its logging is used
    with caplog.at_level(logging.DEBUG, logger="graphsignal"):
        caplog.clear()
        h.log_request(200, 10)
        h.log("info", "GET / %s", "HTTP/1.1")
        h.log("error", "code %d, message %s", 400, "Bad request")
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


def test_only_errors_are_logged_at_debug_under_each_servers_logger(caplog):
    want = "graphsignal: server: code 400, message Bad request"
    sidecar = ServerThread(None, "127.0.0.1", 0).handler
    assert issubclass(sidecar, QuietHandler)
    assert _log(sidecar, caplog) == [("graphsignal", logging.DEBUG, want)]
    assert issubclass(handler.Handler, QuietHandler)
    assert _log(handler.Handler, caplog) == [("graphsignal.fleet", logging.DEBUG, want)]


def test_the_fleet_app_logs_a_failed_request_as_graphsignal_fleet(tmp_path, caplog, monkeypatch):
    db = DB(str(tmp_path / "s.db"))

    def broken(owner, iid):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(db, "snapshot", broken)
    c = Client(make_app(db, ["k"]))
    with caplog.at_level(logging.ERROR, logger="graphsignal"):
        r = c.get("/api/v1/signals?instance_id=x", headers={"X-API-Key": "k"})
    assert r.status_code == 500 and r.json == {"error": "internal error: RuntimeError"}
    (rec,) = [r for r in caplog.records if "failed" in r.getMessage()]
    assert rec.name == "graphsignal.fleet" and "disk on fire" in rec.exc_text
    db.close()
