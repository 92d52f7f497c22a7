"""The Werkzeug app serving /signals and /health, and the thread that
serves it.

make_app(state) builds a plain WSGI callable from what it serves, so tests
drive it with werkzeug.test.Client; ServerThread binds and serves it,
retrying a busy port in the background so the workload never waits.
"""
import errno
import logging
import socket
import threading
import time

import orjson
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from graphsignal import __version__
from graphsignal.payload import build_signals

logger = logging.getLogger("graphsignal")

JSON = "application/json"


def _json(obj, status=200):
    return Response(orjson.dumps(obj), status=status, mimetype=JSON)


def make_app(store, windows=None, exposition=None):
    """windows: optional callable(store, seconds) -> dict added to the
    payload for ?window=N (see graphsignal.windows); exposition: what
    serves /metrics (graphsignal.sidecar.exposition.Exposition; default:
    one for this store without engine metrics)."""
    if exposition is None:
        from graphsignal.sidecar.exposition import Exposition

        exposition = Exposition(store)

    def app(environ, start_response):
        req = Request(environ)
        if req.method not in ("GET", "HEAD"):
            resp = _json({"error": "method not allowed: use GET"}, 405)
        elif req.path == "/signals":
            resp = _signals(req)
        elif req.path == "/metrics":
            resp = _metrics(req)
        elif req.path == "/health":
            resp = _json({"status": "ok", "profiler": {"version": __version__},
                          "uptime_ns": store.clock() - store.start_ns})
        else:
            resp = _json({"error": "not found: %s (endpoints: /signals, /metrics, /health)" % req.path}, 404)
        return resp(environ, start_response)

    def _metrics(req):
        engine = req.args.get("engine")
        if engine not in (None, "0", "1"):
            return _json({"error": "engine must be 0 or 1, got %r" % engine}, 400)
        body, content_type = exposition.render(req.headers.get("Accept"), None if engine is None else engine == "1")
        return Response(body, content_type=content_type)

    def _signals(req):
        unknown = sorted(set(req.args) - {"window"})
        if unknown:
            return _json({"error": "unknown query parameter(s): %s (known: window)" % ", ".join(unknown)}, 400)
        extra = None
        if "window" in req.args:
            if windows is None:
                return _json({"error": "windows are not available"}, 400)
            raw_all = req.args.getlist("window")
            raw = raw_all[0]
            if len(raw_all) > 1:
                return _json({"error": "give window once, got %d values" % len(raw_all)}, 400)
            if not (raw.isascii() and raw.isdigit()):
                return _json({"error": "window must be a whole number of seconds, got %r" % raw}, 400)
            seconds = int(raw)
            limit = store.history.maxlen - 1
            if not 1 <= seconds <= limit:
                return _json({"error": "window must be between 1 and %d seconds, got %d" % (limit, seconds)}, 400)
            extra = {"window": windows(store, seconds)}
        return Response(build_signals(store, extra), mimetype=JSON)

    return app


class QuietHandler(WSGIRequestHandler):
    """No per-request log lines: the sidecar's stderr is the workload's."""

    def log_request(self, code="-", size="-"):
        pass

    def log(self, type, message, *args):
        if type == "error":
            logger.debug("graphsignal: server: " + message, *args)


class ServerThread(threading.Thread):
    """Serves app on (host, port). A busy port is retried every
    retry_interval seconds for up to retry_seconds, with one log line; the
    workload runs regardless."""

    def __init__(self, app, host, port, retry_seconds=60.0, retry_interval=1.0, on_error=None):
        threading.Thread.__init__(self, name="graphsignal-server", daemon=True)
        self.app, self.host, self.port = app, host, port
        self.retry_seconds, self.retry_interval = retry_seconds, retry_interval
        self.on_error = on_error
        self.server = None
        self.bound = threading.Event()
        self.failed = None
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._serving = False

    def run(self):
        deadline = time.monotonic() + self.retry_seconds
        warned = False
        while not self._halt.is_set():
            try:
                self.server = self._make_server()
                break
            except OSError as e:
                busy = e.errno == errno.EADDRINUSE
                msg = ("port %d on %s is in use; /signals is not served yet (retrying for %ds; "
                       "pick another with --listen-port)" % (self.port, self.host, self.retry_seconds)
                       if busy else "cannot serve /signals on %s:%d: %s" % (self.host, self.port, e))
                if not warned:
                    warned = True
                    logger.warning("graphsignal: %s", msg)
                    if self.on_error:
                        self.on_error(msg)
                if not busy or time.monotonic() >= deadline:
                    self.failed = msg
                    if busy:
                        final = "gave up on port %d on %s: still in use; /signals is not served" % (
                            self.port, self.host)
                        logger.warning("graphsignal: %s", final)
                        if self.on_error:
                            self.on_error(final)
                    self.bound.set()
                    return
                self._halt.wait(self.retry_interval)
        with self._lock:
            # stop() may have come while we were binding: then never serve
            if self.server is None or self._halt.is_set():
                self.bound.set()
                return
            self.port = self.server._graphsignal_sock.getsockname()[1]
            self._serving = True
        self.bound.set()
        self.server.serve_forever(poll_interval=0.1)

    def _make_server(self):
        # Bind the socket ourselves: werkzeug reports a busy port by printing
        # to stderr and exiting, which would land in the workload's console.
        family, stype, proto, _, addr = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, stype, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(128)
            srv = make_server(self.host, sock.getsockname()[1], self.app, threaded=True, fd=sock.fileno(),
                              request_handler=QuietHandler)
        except BaseException:
            sock.close()
            raise
        srv._graphsignal_sock = sock  # keep the listening socket alive with the server
        return srv

    def stop(self):
        with self._lock:
            self._halt.set()
            serving = self._serving
        if serving:
            self.server.shutdown()  # returns once serve_forever has stopped
        if self.server is not None:
            self.server.server_close()
        self.join(5)
