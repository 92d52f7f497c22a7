"""graphsignal.fleet.serving's pure parts: the strict request-head parser
and the per-tenant scheduler."""
import pytest

from graphsignal.fleet.framing import Reject, parse_head
from graphsignal.fleet.scheduler import Scheduler


def _head(*lines, request_line=b"POST /api/v1/ingest HTTP/1.1"):
    return b"\r\n".join((request_line,) + lines) + b"\r\n\r\n"


def test_a_plain_head_parses():
    h = parse_head(_head(b"Host: x", b"X-API-Key:  k1 ", b"Content-Length: 12", b"x-api-key: k2",
                         b"Expect: 100-continue"))
    assert (h.method, h.target, h.length, h.expect_continue) == ("POST", "/api/v1/ingest", 12, True)
    assert h.get("X-Api-Key") == "k1,k2" and h.get("authorization") is None
    assert parse_head(_head(b"Host: x", request_line=b"GET /health HTTP/1.0")).length == 0
    assert not parse_head(_head(b"Expect: 100-continue", request_line=b"GET / HTTP/1.0")).expect_continue


BAD = [
    ("two lengths", [b"Content-Length: 5", b"Content-Length: 5"], 400, "2 times"),
    ("two differing lengths", [b"Content-Length: 5", b"content-length: 7"], 400, "2 times"),
    ("a list", [b"Content-Length: 5, 5"], 400, "number"),
    ("a sign", [b"Content-Length: +5"], 400, "number"),
    ("negative", [b"Content-Length: -1"], 400, "number"),
    ("hex", [b"Content-Length: 0x10"], 400, "number"),
    ("huge", [b"Content-Length: 99999999999999999999"], 400, "number"),
    ("empty", [b"Content-Length:"], 400, "number"),
    ("length and chunked", [b"Content-Length: 5", b"Transfer-Encoding: chunked"], 400, "together"),
    ("chunked and length", [b"Transfer-Encoding: chunked", b"Content-Length: 5"], 400, "together"),
    ("chunked", [b"Transfer-Encoding: chunked"], 411, "Content-Length"),
    ("identity", [b"Transfer-Encoding: identity"], 411, "Content-Length"),
    ("folded", [b"X-API-Key: a", b" b"], 400, "folded"),
    ("space before colon", [b"Content-Length : 5"], 400, "header line"),
    ("no colon", [b"Content-Length 5"], 400, "header line"),
    ("bare LF", [b"Content-Length: 5\nX: y"], 400, "CRLF"),
    ("bare CR", [b"X: a\rContent-Length: 9"], 400, "CRLF"),
    ("expectation", [b"Expect: something"], 417, "100-continue"),
]


@pytest.mark.parametrize("what,lines,status,needle", BAD, ids=[b[0] for b in BAD])
def test_framing_that_is_not_strictly_http_1_1_is_rejected(what, lines, status, needle):
    with pytest.raises(Reject) as e:
        parse_head(_head(b"Host: x", *lines))
    assert e.value.status == status and needle in str(e.value)


@pytest.mark.parametrize("line", [b"POST /x", b"POST /x HTTP/2.0", b"POST  /x HTTP/1.1", b"P(ST /x HTTP/1.1",
                                  b"POST /x HTTP/1.1 extra", b" POST /x HTTP/1.1"])
def test_bad_request_lines_are_400(line):
    with pytest.raises(Reject) as e:
        parse_head(_head(b"Host: x", request_line=line))
    assert e.value.status == 400


def test_the_scheduler_takes_tenants_in_turn_and_one_job_per_tenant_at_a_time():
    s = Scheduler(inflight=1)
    for i in range(5):
        s.put("a", "a%d" % i)
    s.put("b", "b0")
    s.put("b", "b1")
    s.put("c", "c0")
    got = [s.get(), s.get(), s.get()]
    assert got == ["a0", "b0", "c0"]  # one of each, in the order they first came
    s.done("c")
    s.done("a")
    s.done("b")
    assert [s.get(), s.get()] == ["a1", "b1"]
    s.done("b")
    s.done("a")
    assert [s.get()] == ["a2"]
    s.put("b", "b2")  # a newcomer does not wait behind a's backlog
    s.done("a")
    assert [s.get(), s.get()] == ["b2", "a3"]


def test_the_scheduler_holds_a_tenant_at_its_inflight_limit():
    s = Scheduler(inflight=2)
    for i in range(4):
        s.put("a", i)
    assert [s.get(), s.get()] == [0, 1]
    assert not s.ready  # a is at its limit: nothing to hand out
    s.put("b", "x")
    assert s.get() == "x"
    s.done("a")
    assert s.get() == 2
    left = s.close()
    assert left == [3] and s.get() is None
