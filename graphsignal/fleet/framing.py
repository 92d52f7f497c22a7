"""graphsignal-server's HTTP framing, read strictly before anything
reaches the app (which sees the exact bytes): a request head parsed into
what the connection front (graphsignal.fleet.serving) needs of it, and
the complete error answers the front sends itself.

  framing      Content-Length at most once and all digits, no
               Transfer-Encoding with it (400), no Transfer-Encoding
               (chunked) without it (411), CRLF line ends only, no folded
               header lines (400), a request line of METHOD TARGET
               HTTP/1.1 (or 1.0), Expect only 100-continue (417). Every
               refusal is a Reject: a status and one line saying why.
  answers      simple_response(): a whole JSON {"error": ...} response
               that closes the connection.
"""
import orjson

REASONS = {400: "Bad Request", 408: "Request Timeout", 411: "Length Required", 413: "Content Too Large",
           417: "Expectation Failed", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


class Reject(Exception):
    """A request the loop answers itself: status and message."""

    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status


class Head:
    """What the loop needs of a request head (the app parses it again)."""

    __slots__ = ("method", "target", "headers", "length", "expect_continue")

    def __init__(self, method, target, headers, length, expect_continue):
        self.method, self.target, self.headers = method, target, headers
        self.length, self.expect_continue = length, expect_continue

    def get(self, name):
        """A header's value, repeats joined with ',' (as WSGI environs do),
        or None."""
        values = self.headers.get(name.lower())
        return None if values is None else ",".join(values)


_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_head(head):
    """A request head (bytes up to and including the blank line) as a
    Head; raises Reject for framing that is not strictly HTTP/1.1's."""
    lines = head[:-4].split(b"\r\n")
    for line in lines:
        if b"\r" in line or b"\n" in line:
            raise Reject(400, "bare CR or LF in the request head: lines end with CRLF")
    words = lines[0].split(b" ")
    if len(words) != 3 or not words[0] or not set(words[0]) <= _TOKEN or not words[1] \
            or words[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise Reject(400, "bad request line: expected METHOD TARGET HTTP/1.1")
    headers = {}
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise Reject(400, "folded header lines are not accepted")
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= _TOKEN:
            raise Reject(400, "bad header line %r" % line[:60].decode("latin-1"))
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.strip(b" \t").decode("latin-1"))
    lengths = headers.get("content-length", [])
    if len(lengths) > 1:
        raise Reject(400, "Content-Length is given %d times" % len(lengths))
    if "transfer-encoding" in headers:
        if lengths:
            raise Reject(400, "Content-Length and Transfer-Encoding together")
        raise Reject(411, "Transfer-Encoding is not accepted: send the body with a Content-Length")
    length = 0
    if lengths:
        v = lengths[0]
        if not (v.isascii() and v.isdigit()) or len(v) > 19:
            raise Reject(400, "Content-Length must be a number of bytes, got %r" % v[:40])
        length = int(v)
    expect = ",".join(headers.get("expect", [])).strip().lower()
    if expect and expect != "100-continue":
        raise Reject(417, "Expect %r is not supported (only 100-continue)" % expect[:40])
    return Head(words[0].decode("ascii"), words[1].decode("latin-1"), headers, length,
                expect == "100-continue" and words[2] == b"HTTP/1.1")


def simple_response(status, message, extra=()):
    """A complete JSON error response that closes the connection."""
    body = orjson.dumps({"error": message})
    lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Error")), "Content-Type: application/json",
             "X-Content-Type-Options: nosniff", "Content-Length: %d" % len(body), "Connection: close"] + \
        ["%s: %s" % kv for kv in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
