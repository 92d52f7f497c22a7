"""The supervisor -> sidecar channel (graphsignal/sidecar/channel.py): lines
cut whatever the chunking, sends that never block (dropped and counted when
the sidecar is behind, nothing once it is gone), and a cut stream that the
console capture reads exactly as the whole one."""
import re
import socket

from hypothesis import given, settings
from hypothesis import strategies as st

from graphsignal import channel
from graphsignal.sidecar import console
from graphsignal.sidecar.console import ConsoleCapture
from graphsignal.sidecar.store import MetricStore


def reference_cut(data, limit):
    return re.sub(rb"[^\r\n]+", lambda m: m.group(0)[:limit], data)


def cut_in_chunks(data, limit, cuts):
    c = channel.LineCutter(limit)
    out, prev = [], 0
    for k in sorted(set(cuts)) + [len(data)]:
        out.append(c.cut(data[prev:k]))
        prev = k
    return b"".join(out)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300).map(lambda b: b.replace(b"a", b"\n").replace(b"b", b"\r")),
       st.integers(1, 40), st.lists(st.integers(0, 300), max_size=8))
def test_every_line_is_cut_to_the_limit_whatever_the_chunking(data, limit, cuts):
    cuts = [k for k in cuts if k <= len(data)]
    assert cut_in_chunks(data, limit, cuts) == reference_cut(data, limit)


def test_short_lines_pass_as_the_same_object():
    c = channel.LineCutter(100)
    chunk = b"short line\n" * 1000
    assert c.cut(chunk) is chunk


def test_a_huge_line_costs_the_limit():
    c = channel.LineCutter(2000)
    sent = sum(len(c.cut(b"z" * 65536)) for _ in range(3200))  # 200 MB without a newline
    assert sent == 2000
    assert c.cut(b"zz\nnext\n") == b"\nnext\n"


CORPUS = [
    b"ERROR 01-02 03:04:05 [app.py:10] " + b"z" * 50000 + b"\n",
    b"x" * 5000 + b" CUDA error: an illegal memory access was encountered\n",
    b"Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n" + b"    " + b"q" * 9000
    + b"\nValueError: " + b"v" * 7000 + b"\n",
    b"progress " + b"#" * 4000 + b"\r" + b"ERROR: after a long progress line\n",
    b"plain " * 3000 + b"\nNCCL WARN something " + b"w" * 3000 + b"\n",
    b"tail without newline " + b"t" * 6000,
]


def entries_of(stream_bytes, chunk):
    store = MetricStore()
    cap = ConsoleCapture(store, lambda: 1)
    for i in range(0, len(stream_bytes), chunk):
        cap.feed("stderr", stream_bytes[i:i + chunk])
    cap.close_stream("stderr")
    return [(e["level"], e["message"], e["exception"], e["tags"]) for e in store.errors]


def test_the_capture_reads_a_cut_stream_as_the_whole_one():
    # the supervisor cuts lines to this limit; the capture must not tell
    limit = console.MAX_LINE + len(console.CUT) + 1
    whole = b"".join(CORPUS)
    for chunk in (7, 4096, 65536):
        c = channel.LineCutter(limit)
        cut = b"".join(c.cut(whole[i:i + chunk]) for i in range(0, len(whole), chunk))
        assert len(cut) < len(whole) // 4
        assert entries_of(cut, 65536) == entries_of(whole, 65536)
    assert entries_of(whole, 65536)  # the corpus does make entries


def pair():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    return channel.Sender(ours), theirs


def test_a_sidecar_that_does_not_read_costs_drops_never_a_wait():
    sender, theirs = pair()
    for _ in range(200):  # a blocking send would hang here
        sender.data("stdout", b"x" * 60000)
    assert sender.dropped["stdout"] > 0 and not sender.dead
    got = 0
    theirs.setblocking(False)
    try:
        while True:
            tag, payload = channel.receive(theirs)
            assert tag == channel.DATA["stdout"]
            got += len(payload)
    except BlockingIOError:
        pass
    assert got + sender.dropped["stdout"] == 200 * 60000
    # the next chunk that fits announces the gap first
    sender.data("stdout", b"after\n")
    tag, payload = channel.receive(theirs)
    assert tag == channel.GAP and b'"bytes": %d' % sender.dropped["stdout"] in payload
    assert channel.receive(theirs) == (channel.DATA["stdout"], b"after\n")


def test_a_gone_sidecar_stops_the_sending():
    sender, theirs = pair()
    theirs.close()
    sender.data("stderr", b"x\n")
    assert sender.dead
    sender.data("stderr", b"y\n")  # and nothing raises
    sender.closed("stderr")
    assert sender.exit(0) is False


def test_exit_carries_the_status_and_the_gaps_not_yet_announced():
    sender, theirs = pair()
    sender.pending_gap["stderr"] = 12
    assert sender.exit(-9)
    tag, payload = channel.receive(theirs)
    assert tag == channel.EXIT
    assert b'"returncode": -9' in payload and b'"stderr": 12' in payload
    sender.close()
    assert channel.receive(theirs) == (None, None)


def test_config_travels_in_a_memory_file():
    cfg = {"run_id": "abc", "command": ["x"] * 50000, "environ": {"K": "v" * 100000}}
    fd = channel.write_config(cfg)
    assert channel.read_config(fd) == cfg
