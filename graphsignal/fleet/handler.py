"""Werkzeug's request handling over a request the connection front
(graphsignal.fleet.serving) has already read whole: its parsing and WSGI
environ, the app run once, and a plain writer of the whole response
(Werkzeug's own waits 10 ms per request for more input to drain; there
is none here). An app that raises is answered 500 with a JSON error, its
reason at debug level."""
import io
import logging

import orjson

from graphsignal.httpserve import QuietHandler

logger = logging.getLogger("graphsignal.fleet")


class _Writer:
    """The handler's wfile: whole writes, each within the socket's timeout."""

    def __init__(self, sock):
        self.sock = sock

    def write(self, data):
        self.sock.sendall(data)
        return len(data)

    def flush(self):
        pass


class Handler(QuietHandler):
    """Werkzeug's request handler over a request already read whole: its
    parsing and WSGI environ, and a plain response writer (Werkzeug's own
    waits 10 ms per request for more input to drain; there is none here)."""

    protocol_version = "HTTP/1.1"
    logger = logging.getLogger("graphsignal.fleet")

    def __init__(self, sock, addr, server, data):  # not BaseRequestHandler's: nothing is left to read
        self.request = self.connection = sock
        self.client_address = addr
        self.server = server
        self.rfile = io.BytesIO(data)
        self.wfile = _Writer(sock)
        self.close_connection = True

    def handle_expect_100(self):
        return True  # the loop said 100 Continue before it read the body

    def run_wsgi(self):
        self.environ = environ = self.make_environ()
        started = []
        chunks = []

        def start_response(status, headers, exc_info=None):
            started[:] = [status, headers]
            return chunks.append

        try:
            it = self.server.app(environ, start_response)
            try:
                chunks.extend(it)
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
        except Exception as e:  # the app answers its own errors; this is the last resort
            logger.debug("graphsignal-server: %s %s failed: %s: %s", self.command, self.path, type(e).__name__, e)
            started[:] = ["500 INTERNAL SERVER ERROR", [("Content-Type", "application/json"),
                                                        ("X-Content-Type-Options", "nosniff")]]
            chunks[:] = [orjson.dumps({"error": "internal error: %s" % type(e).__name__})]
        status, headers = started
        code, _, reason = status.partition(" ")
        body = b"".join(chunks)
        self.send_response(int(code), reason)
        has_length = False
        for k, v in headers:
            lk = k.lower()
            if lk == "connection":
                continue
            has_length = has_length or lk == "content-length"
            self.send_header(k, v)
        if not has_length:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
