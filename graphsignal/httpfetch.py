"""Bounded reads of /signals payloads for graphsignal-diff and graphsignal-top,
from an endpoint that may be hostile or broken.

get(url, timeout, deadline, since) returns the body's bytes or raises
FetchError with one printable line (no control characters, no bytes the
server sent):
- at most max_bytes (MAX_BYTES) are read: a larger Content-Length is
  refused before the body, a longer body is cut off there;
- `timeout` bounds each connect and read, `deadline` the whole request
  (redirects included): a server that sends one byte a second, in its
  status line, its headers or its body, is cut off at the deadline (the
  socket is shut down from a timer, which wakes the blocked read); with
  `since` (a time.monotonic() reading) the deadline counts from then, so
  that several requests of one command share it and the command ends
  within it however many URLs are slow;
- an answer that is not HTTP, an HTTP error (its JSON "error" detail,
  read bounded and escaped), a refused or lost connection: one line each.

parse_signals(data) turns bytes (a file's or an endpoint's) into a payload
dict or raises FetchError saying what the bytes are instead: empty, an
HTML page, binary data, not JSON, JSON of another shape. Control
characters in the payload's strings (a kernel name "\u001b[2J") come back
escaped as text (\x1b[2J), so that no reader prints them to a terminal;
a sidecar's own payloads have none (it cleans names as they arrive), and
are not walked.
"""
import http.client
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Union

import orjson

from graphsignal import config, jsonsafe
from graphsignal.textsafe import clean

MAX_BYTES = 256 << 20  # real payloads are a few MB; 256 MB is far beyond any store's bounds
MAX_ERROR_BODY = 64 << 10  # of an HTTP error's body, for its JSON "error" detail
MAX_DEPTH = 64  # levels of nesting: a payload has 6, a window 8 (jsonsafe: deeper would crash orjson)
MAX_LINE = 300  # characters of anything a server said that a message quotes
CHUNK = 1 << 20
# what a control character in a JSON string looks like in the raw bytes: an
# escape \u0000-\u001f, \u007f-\u009f, or DEL and C1 characters as they are
_CONTROL_IN_JSON = re.compile(rb"\\u00[0189][0-9a-fA-F]|\\u007[fF]|\x7f|\xc2[\x80-\x9f]")


_FROM_ENV: Any = object()  # token: GRAPHSIGNAL_SIGNALS_TOKEN when set


class FetchError(Exception):
    """One printable line; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        Exception.__init__(self, message)
        self.status = status


def _quote(text: object) -> str:
    text = clean(text)
    return text if len(text) <= MAX_LINE else text[:MAX_LINE] + "..."


def _mb(n: int) -> str:
    return "%d MB" % (n >> 20) if n >= 1 << 20 else "%d bytes" % n


class _Deadline:
    """Shuts down every socket of one request when the time is up. Sockets
    are watched through a dup of their descriptor, so a socket that TLS
    wrapped (and detached) is still reached; the dups are closed at the end."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        return self.end - time.monotonic()

    def connect(self, address: Any, timeout: Any = None, source_address: Any = None, *args: Any,
                **kwargs: Any) -> socket.socket:
        """http.client's _create_connection, with connect bounded by what is left."""
        left = self.left()
        if left <= 0:
            raise socket.timeout("timed out")
        t = left if not isinstance(timeout, (int, float)) else min(timeout, left)
        sock = socket.create_connection(address, t, source_address, *args, **kwargs)
        if isinstance(timeout, (int, float)):
            sock.settimeout(timeout)
        with self._lock:
            if self.expired:
                sock.close()
                raise socket.timeout("timed out")
            self._socks.append(sock.dup())
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            for s in self._socks:
                s.close()
            self._socks = []


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    def hooked(http_class: Any) -> Callable[..., Any]:
        def make(host: str, **kw: Any) -> Any:
            conn = http_class(host, **kw)
            conn._create_connection = deadline.connect
            return conn
        return make

    class HTTP(urllib.request.HTTPHandler):
        def do_open(self, http_class: Any, req: Any, **kw: Any) -> Any:
            return urllib.request.HTTPHandler.do_open(self, hooked(http_class), req, **kw)

    class HTTPS(urllib.request.HTTPSHandler):
        def do_open(self, http_class: Any, req: Any, **kw: Any) -> Any:
            return urllib.request.HTTPSHandler.do_open(self, hooked(http_class), req, **kw)

    # no proxies: the endpoint is local or on the operator's own network
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), HTTP(), HTTPS())


def _read(resp: Any, limit: int) -> bytearray:
    buf = bytearray()
    while True:
        chunk = resp.read(min(CHUNK, limit + 1 - len(buf)))
        if not chunk:
            return buf
        buf += chunk
        if len(buf) > limit:
            raise FetchError("the answer is larger than %s (a /signals payload is a few MB)" % _mb(limit))


def _error_detail(e: urllib.error.HTTPError) -> str:
    try:
        detail = jsonsafe.loads(e.read(MAX_ERROR_BODY), MAX_DEPTH).get("error")
    except Exception:  # the body is whatever the server sent; the status is enough
        return ""
    return ": " + _quote(detail) if isinstance(detail, str) and detail else ""


def get(url: str, timeout: float, deadline: float, max_bytes: int = MAX_BYTES, token: Optional[str] = _FROM_ENV,
        since: Optional[float] = None) -> bytes:
    """The body at `url` (bytes, at most max_bytes), within `timeout`
    seconds per connect or read and `deadline` seconds in all, counted
    from `since` (time.monotonic(); default: now). token: the bearer
    token to send (default: GRAPHSIGNAL_SIGNALS_TOKEN when set); never
    sent on to where a redirect points."""
    if token is _FROM_ENV:
        token = os.environ.get(config.SIGNALS_TOKEN_ENV) or None
    why = config.token_problem(token)
    if why:
        raise FetchError(why)
    left = deadline if since is None else deadline - (time.monotonic() - since)
    if left <= 0:
        raise FetchError("no complete answer within %g s" % deadline)
    d = _Deadline(left)
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        if token:
            req.add_unredirected_header("Authorization", "Bearer " + token)
        with _opener(d).open(req, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            if length is not None and length.strip().isdigit() and int(length) > max_bytes:
                raise FetchError("the answer is %s, larger than %s (a /signals payload is a few MB)"
                                 % (_mb(int(length)), _mb(max_bytes)))
            data = _read(resp, max_bytes)
        if d.expired:
            raise socket.timeout("timed out")
        return bytes(data)
    except FetchError:
        raise
    except urllib.error.HTTPError as e:
        try:
            detail = "" if d.expired else _error_detail(e)
        finally:
            e.close()
        raise FetchError("HTTP %d%s" % (e.code, detail), status=e.code)
    except Exception as e:  # whatever the connection or the bytes on it raised: one line
        if d.expired:
            raise FetchError("no complete answer within %g s" % deadline)
        raise FetchError(reason(e))
    finally:
        d.close()


def reason(e: BaseException) -> str:
    """One line for an exception of urllib, http.client or the socket."""
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        r = e.reason
        if isinstance(r, BaseException):
            return reason(r)
        return _quote(r)
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is graphsignal-run running with this --listen-port?)"
    if isinstance(e, socket.gaierror):
        return "unknown host (%s)" % _quote(e.strerror or e)
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, http.client.RemoteDisconnected):
        return "the connection closed without an answer"
    if isinstance(e, http.client.IncompleteRead):
        return "the answer ended early (the connection closed)"
    if isinstance(e, (http.client.BadStatusLine, http.client.UnknownProtocol)):
        return "not an HTTP answer"
    if isinstance(e, http.client.LineTooLong):
        return "not an HTTP answer (a line too long)"
    if isinstance(e, http.client.InvalidURL):
        return "not a valid URL (%s)" % _quote(e)
    if isinstance(e, http.client.HTTPException):
        return "a broken HTTP answer (%s)" % type(e).__name__
    if isinstance(e, ConnectionError):
        return "connection lost (%s)" % type(e).__name__
    if isinstance(e, OSError) and e.strerror:
        return _quote(e.strerror)
    if isinstance(e, MemoryError):
        return "out of memory"
    return "%s: %s" % (type(e).__name__, _quote(e))


def _looks_binary(data: Union[bytes, bytearray]) -> bool:
    head = bytes(data[:4096])
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 4  # a character cut at the sample's end is not binary
    return False


def parse_signals(data: Union[bytes, bytearray]) -> Dict[str, Any]:
    """bytes -> a /signals payload (a dict with a metrics list), or
    FetchError saying what the bytes are instead."""
    try:
        doc = jsonsafe.loads(data, MAX_DEPTH)
    except (jsonsafe.TooDeep, orjson.JSONDecodeError) as e:
        first = bytes(data[:64]).lstrip()
        if not first:
            raise FetchError("empty, not a /signals payload")
        if first.startswith(b"<"):
            raise FetchError("an HTML or XML page, not JSON (is this the /signals endpoint?)")
        if _looks_binary(data):
            raise FetchError("binary data, not JSON")
        if isinstance(e, jsonsafe.TooDeep):
            raise FetchError("not a /signals payload: %s" % e)
        raise FetchError("not JSON (%s)" % _quote(e))
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), list):
        raise FetchError("JSON, but not a /signals payload (no metrics list)")
    if _CONTROL_IN_JSON.search(data):
        _clean_strings(doc)
    return doc


def _clean_strings(doc: Dict[str, Any]) -> None:
    """Every string of doc (keys too) with control characters escaped, in
    place; a loop, not recursion (JSON may nest deeper than Python's stack)."""
    stack: List[Any] = [doc]
    while stack:
        c = stack.pop()
        if isinstance(c, dict):
            items = list(c.items())
            c.clear()
            for k, v in items:
                if isinstance(v, str):
                    v = clean(v, multiline=True)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
                c[clean(k, multiline=True)] = v
        else:
            for i, v in enumerate(c):
                if isinstance(v, str):
                    c[i] = clean(v, multiline=True)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
