"""A real local HTTP server that records every request it gets, for the
upload and version-check tests; `answer` decides each reply."""
import threading

from werkzeug.wrappers import Request, Response

from graphsignal.sidecar.server import ServerThread


class Recorder:
    def __init__(self, answer=None):
        """answer: callable(request dict) -> (status, body bytes or str)
        (default: 200 and {}); it may sleep to play a hung server."""
        self.answer = answer or (lambda req: (200, b"{}"))
        self.requests = []
        self.lock = threading.Lock()
        self.thread = None

    def app(self, environ, start_response):
        req = Request(environ)
        rec = {"method": req.method, "path": req.path, "query": req.query_string.decode(),
               "headers": dict(req.headers), "body": req.get_data(), "remote": req.remote_addr}
        with self.lock:
            self.requests.append(rec)
        status, body = self.answer(rec)
        return Response(body, status=status, mimetype="application/json")(environ, start_response)

    def __enter__(self):
        self.thread = ServerThread(self.app, "127.0.0.1", 0)
        self.thread.start()
        self.thread.bound.wait(10)
        return self

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.thread.port

    def paths(self):
        with self.lock:
            return [r["path"] for r in self.requests]

    def matching(self, path):
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def __exit__(self, *exc):
        self.thread.stop()
        return False
