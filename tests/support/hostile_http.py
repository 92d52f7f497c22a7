"""A hostile HTTP endpoint on 127.0.0.1 for the clients of /signals
(graphsignal-diff, graphsignal-top): each mode answers every request the
same wrong way, so a test can point a real client at it.

    with HostileServer("trickle") as srv:
        subprocess.run(["graphsignal-diff", srv.url, ...])

Modes: "binary" (200, bytes with NUL, ESC and invalid UTF-8), "nohttp" (no
status line, raw bytes with terminal escapes), "html" (200, a web page),
"shape" (200, JSON that is not a payload), "inside" (200, a payload's
outline with the wrong things inside and terminal escapes), "deep" (200, JSON nested too
deep to parse), "huge" (200, Content-Length of 2 GB and bytes until the
client leaves), "endless" (200, no length, bytes until the client leaves),
"trickle" (200, one body byte a second), "trickle_head" (one byte of the
status line a second), "error" (500 whose JSON error has terminal escapes),
"error_huge" (500 whose body never ends), "payload" (200, the bytes given
as `body`: a real payload with hostile strings inside), "late" (200, `body`
whole, after `late` seconds of silence), "late_nowindow" (as "late", but a
request with ?window gets a 400 after that silence, as an old sidecar's).
"""
import json
import os
import socket
import sys
import threading

ESCAPES = b"\x1b[2J\x1b]0;pwned\x07\x1b[31m"  # clear screen, set the title, red
BINARY = b"\x00\x01\x02\xff\xfe" + ESCAPES + b"\x89PNG\r\n\x1a\n\x00\x00"
CHUNK = b"0" * (1 << 20)
REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "reference",
                         "signals-example.json")


def escapes_inside(path=REFERENCE):
    """The payload at `path` with terminal escapes in a kernel's name and in a tag."""
    with open(path) as f:
        doc = json.load(f)
    (k,) = [m for m in doc["metrics"] if m["name"] == "cuda_kernels_nanoseconds"]
    k["stats"]["frames"].append({"name": "evil\x1b]0;pwned\x07\x1b[2J\u009b", "value": 10 ** 12, "samples": 5})
    k["tags"]["x\x1b[31m"] = "y\x1b[0m"
    return json.dumps(doc).encode()


def console_script(name):
    """The installed console script (graphsignal-diff, graphsignal-top) beside
    this Python, as a user runs it; the module's main where none is installed."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(path, os.X_OK):
        return [path]
    return [sys.executable, "-m", "graphsignal.cli." + name.split("-", 1)[1]]


def assert_clean(data):
    """Nothing a server sent reaches the terminal raw: valid UTF-8 without
    control characters but newlines."""
    text = data.decode("utf-8")
    bad = [c for c in text if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
    assert not bad, text
    assert "pwned" not in text or "\\x1b]0;pwned\\x07" in text, text
    return text


class HostileServer:
    def __init__(self, mode, body=b"", late=0.0):
        self.mode = mode
        self.body = body
        self.late = late
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d/signals" % self.port
        self.stop = threading.Event()
        self.requests = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)
        return False

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
            self.requests += 1
            if self.mode.startswith("late"):
                self._late(conn, head)
            else:
                getattr(self, "_" + self.mode)(conn)
        except OSError:  # the client went away: what the endless modes wait for
            pass
        finally:
            conn.close()

    def _ok(self, conn, body, ctype="application/json"):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % (ctype.encode(), len(body)) + body)

    def _late(self, conn, head):
        if self.stop.wait(self.late):
            return
        if self.mode == "late_nowindow" and b"window=" in head.split(b"\r\n", 1)[0]:
            body = b'{"error": "unknown query parameter(s): window"}'
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(body) + body)
            return
        self._ok(conn, self.body)

    def _payload(self, conn):
        self._ok(conn, self.body)

    def _binary(self, conn):
        self._ok(conn, BINARY * 8, "application/octet-stream")

    def _nohttp(self, conn):
        conn.sendall(BINARY + b"\r\n" + BINARY)

    def _html(self, conn):
        self._ok(conn, b"<!DOCTYPE html>\n<html><head><title>Login</title></head><body>" + ESCAPES
                 + b"</body></html>\n", "text/html")

    def _shape(self, conn):
        self._ok(conn, b'{"status": "ok", "data": [1, 2, 3]}')

    def _inside(self, conn):
        self._ok(conn, b'{"metrics": [1, "\\u001b[2J", null, {"name": {"\\u001b]0;x": 1}, "stats": 5}], '
                       b'"resources": 5, "errors": "\\u001b[31m", "window": {"metrics": 7}}')

    def _deep(self, conn):
        self._ok(conn, b"[" * 300000 + b"]" * 300000)  # orjson 3.8 recurses into SIGSEGV at ~150,000

    def _endless_body(self, conn):
        while not self.stop.is_set():
            conn.sendall(CHUNK)

    def _huge(self, conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2147483648\r\n\r\n")
        self._endless_body(conn)

    def _endless(self, conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
        self._endless_body(conn)

    def _drip(self, conn, data):
        for i in range(len(data)):
            conn.sendall(data[i:i + 1])
            if self.stop.wait(1.0):
                return

    def _trickle(self, conn):
        body = b'{"metrics": []}' + b" " * 100000
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        self._drip(conn, body)

    def _trickle_head(self, conn):
        self._drip(conn, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 100000 + b"\r\n\r\n{}")

    def _error(self, conn):
        body = b'{"error": "' + ESCAPES.replace(b"\x1b", b"\\u001b").replace(b"\x07", b"\\u0007") + b'"}'
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)

    def _error_huge(self, conn):
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\n\r\n")
        self._endless_body(conn)
