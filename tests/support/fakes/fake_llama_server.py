#!/usr/bin/env python3
"""A stand-in for llama-server on machines without llama.cpp: the same
command line (-m, --host, --port, --metrics, -np; the rest is ignored) and
the endpoints scripts/engine_e2e.py and graphsignal-run use: /health (503
"Loading model" for FAKE_LLAMA_LOAD_S seconds, then 200), POST /completion
(sleeps FAKE_LLAMA_TOKEN_MS per token, answers timings.predicted_n and
predicted_ms, its generation time as the real server reports it), and
/metrics (llama-server's names, counters advanced by the completions).
SIGTERM stops it with status 0, as llama-server's handler does."""
import http.server
import json
import os
import signal
import sys
import threading
import time

args = sys.argv[1:]


def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default


port = int(opt("--port", "8080"))
load_s = float(os.environ.get("FAKE_LLAMA_LOAD_S", "0.3"))
token_ms = float(os.environ.get("FAKE_LLAMA_TOKEN_MS", "0.2"))
t_start = time.monotonic()
lock = threading.Lock()
state = {"prompt_tokens": 0, "prompt_s": 0.0, "predicted": 0, "predicted_s": 0.0, "decodes": 0, "running": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if time.monotonic() - t_start < load_s:
            return self._send(503, b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')
        if self.path == "/health":
            return self._send(200, b'{"status":"ok"}')
        if self.path == "/metrics" and "--metrics" in args:
            with lock:
                s = dict(state)
            lines = []
            for name, kind, v in (("prompt_tokens_total", "counter", s["prompt_tokens"]),
                                  ("prompt_seconds_total", "counter", s["prompt_s"]),
                                  ("tokens_predicted_total", "counter", s["predicted"]),
                                  ("tokens_predicted_seconds_total", "counter", s["predicted_s"]),
                                  ("n_decode_total", "counter", s["decodes"]),
                                  ("requests_processing", "gauge", s["running"]),
                                  ("requests_deferred", "gauge", 0)):
                lines += ["# HELP llamacpp:%s stand-in" % name, "# TYPE llamacpp:%s %s" % (name, kind),
                          "llamacpp:%s %s" % (name, v)]
            return self._send(200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")
        self._send(404, b'{"error":"not found"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/completion":
            return self._send(404, b'{"error":"not found"}')
        n = int(body.get("n_predict", 16))
        with lock:
            state["running"] += 1
        time.sleep(n * token_ms / 1000.0)
        with lock:
            state["running"] -= 1
            state["prompt_tokens"] += 8
            state["prompt_s"] += 0.001
            state["predicted"] += n
            state["predicted_s"] += n * token_ms / 1000.0
            state["decodes"] += n
        self._send(200, json.dumps({"content": "x" * n, "tokens_predicted": n,
                                    "timings": {"predicted_n": n, "prompt_n": 8,
                                                "predicted_ms": n * token_ms}}).encode())

    def log_message(self, *a):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # a client that goes away mid-answer (the load generator stopping, the
        # scraper's deadline) is routine for a server: the real llama-server
        # prints nothing, and a traceback here would be an error entry of ours
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        http.server.ThreadingHTTPServer.handle_error(self, request, client_address)


srv = Server(("127.0.0.1", port), Handler)
srv.daemon_threads = True
signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=srv.shutdown).start())
print("main: server is listening on http://127.0.0.1:%d" % port, flush=True)
srv.serve_forever()
sys.exit(0)
