"""What the supervisor hands the sidecar: a config document and a channel.
Here, outside both processes' packages, because both import it.

The config (the run's facts and its config.Settings, to_dict()) is one JSON document in an unlinked memory file whose
descriptor the sidecar inherits (any size, never blocks the supervisor,
and not on a command line where `ps` would show the workload's
arguments). The channel is an AF_UNIX SOCK_SEQPACKET pair: every message
is one tag byte and its payload, delivered whole and in order.

  b"1" + bytes   a chunk of the workload's stdout, as the supervisor wrote it through
  b"2" + bytes   the same for stderr
  b"g" + JSON    {"stream", "bytes"}: that many bytes of the stream were not
                 sent (the sidecar was behind); the stream goes on after a gap
  b"c" + name    the stream ended (EOF, or handed to a detached pump)
  b"x" + JSON    {"returncode", "gaps", "ended_ns", "cpu_ns"}: the workload has exited
                 (ended_ns: when the supervisor reaped it, epoch ns; cpu_ns: its CPU time
                 and its reaped descendants', from wait4); the last message

and one message the other way, from the sidecar once it has the exit:

  b"h"           a heartbeat, every BEAT_INTERVAL seconds while the sidecar
                 works on its final payload, upload or linger: the
                 supervisor waits for those as long as they come (up to its
                 overall limit), and not much longer once they stop (a
                 sidecar that is SIGSTOPped or hung must not hold the exit)

Sending never blocks: a message the sidecar has no room for is dropped and
counted (the console pump must never wait for the profiler), and once the
sidecar is gone nothing more is sent. Lines are cut to a limit before they
are sent (LineCutter): the console capture never looks past the first
bytes of a line, so a 200 MB line costs the channel a few kilobytes. EOF at the sidecar's end before b"x"
means the supervisor died. Also here, for both processes: logging set-up,
the sidecar's exit status for "said why already", and how a status and a
process's identity are read. Standard library only: the supervisor imports
this before the workload starts.
"""
import errno
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from graphsignal import procfs

DATA = {"stdout": b"1", "stderr": b"2"}
STREAM_OF = {b"1": "stdout", b"2": "stderr"}
GAP = b"g"
CLOSED = b"c"
EXIT = b"x"
HEARTBEAT = b"h"
BEAT_INTERVAL = 0.5  # seconds between the sidecar's heartbeats after the exit
CHUNK = 1 << 16  # bytes the pumps read at once; a message is at most CHUNK + 1
SEND_BUFFER = 1 << 20  # bytes of console the kernel holds for a busy sidecar (capped by net.core.wmem_max)

# The console capture (graphsignal.sidecar.console) keeps a line's first
# MAX_LINE bytes and marks the rest cut with CUT: a little more than that
# is all the channel carries of any line (LINE_LIMIT).
MAX_LINE = 2048
CUT = b" [cut]"
LINE_LIMIT = MAX_LINE + len(CUT) + 1
EXIT_REPORTED = 75  # the sidecar's exit status when it has said itself, in one line, why it stopped

_FLAGS = getattr(socket, "MSG_DONTWAIT", 0x40) | getattr(socket, "MSG_NOSIGNAL", 0x4000)


def pair() -> Tuple[socket.socket, socket.socket]:
    """(supervisor end, sidecar end); the sidecar's end is inheritable."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    except OSError:
        pass
    theirs.set_inheritable(True)
    return ours, theirs


class LineCutter:
    """Cuts every line of a stream to its first `limit` bytes, whatever the
    chunking (a line ends at \\n or \\r, which are kept). Costs two C-speed
    passes over a chunk and Python work per limit-sized stretch, not per
    line."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.run = 0  # length of the current (unfinished) line so far

    def cut(self, data: bytes) -> bytes:
        limit, n = self.limit, len(data)
        out: Optional[List[bytes]] = None  # pieces kept, once something has been cut
        keep_from = 0  # start of the bytes not yet added to out
        pos, run = 0, self.run
        while pos < n:
            if run >= limit:  # past the limit: skip to the line's end
                e = _first_eol(data, pos)
                if out is None:
                    out = []
                out.append(data[keep_from:pos])
                if e < 0:
                    run += n - pos
                    keep_from = pos = n
                    break
                keep_from, pos, run = e, e + 1, 0
                continue
            budget = limit - run  # bytes this line may still have
            end = min(n, pos + budget + 1)
            j = max(data.rfind(b"\n", pos, end), data.rfind(b"\r", pos, end))
            if j >= 0:
                # every line ending in [pos, j] is within the limit
                pos, run = j + 1, 0
            elif pos + budget < n:
                if out is None:
                    out = []
                out.append(data[keep_from:pos + budget])
                keep_from = pos = pos + budget
                run = limit
            else:
                run += n - pos
                pos = n
        self.run = run
        if out is None:
            return data
        out.append(data[keep_from:])
        return b"".join(out)


def _first_eol(data: bytes, pos: int) -> int:
    a, b = data.find(b"\n", pos), data.find(b"\r", pos)
    if a < 0:
        return b
    return a if b < 0 else min(a, b)


class Sender:
    """The supervisor's end. One pump thread per stream calls data() and
    closed() for its own stream, so the per-stream state needs no lock.
    line_limit: lines are cut to this many bytes (None: sent whole)."""

    def __init__(self, sock: socket.socket, line_limit: Optional[int] = None) -> None:
        self.sock = sock
        self.dead = False  # the sidecar is gone: nothing is sent any more
        self.pending_gap = {"stdout": 0, "stderr": 0}  # bytes dropped and not yet announced
        self.dropped = {"stdout": 0, "stderr": 0}  # bytes dropped in all
        self.cutters = {name: LineCutter(line_limit) for name in DATA} if line_limit else None

    def _send(self, tag: bytes, payload: bytes) -> bool:
        if self.dead:
            return False
        try:
            self.sock.sendmsg([tag, payload], [], _FLAGS)
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            if e.errno == errno.EMSGSIZE:
                return False
            self.dead = True  # EPIPE, ECONNRESET, EBADF: the sidecar has exited
            return False

    def data(self, stream: str, chunk: bytes) -> None:
        if self.dead:
            return
        if self.cutters is not None:
            chunk = self.cutters[stream].cut(chunk)
            if not chunk:
                return
        gap = self.pending_gap[stream]
        if gap and not self._send(GAP, json.dumps({"stream": stream, "bytes": gap}).encode()):
            self._drop(stream, len(chunk))
            return
        self.pending_gap[stream] = 0
        if not self._send(DATA[stream], chunk):
            self._drop(stream, len(chunk))

    def _drop(self, stream: str, n: int) -> None:
        self.pending_gap[stream] += n
        self.dropped[stream] += n

    def closed(self, stream: str) -> None:
        self._send(CLOSED, stream.encode())

    def exit(self, returncode: int, ended_ns: Optional[int] = None, cpu_ns: Optional[int] = None) -> bool:
        """The last message; the gaps not yet announced travel with it. Waits
        (up to 2 s) for room: this one must arrive if the sidecar lives."""
        payload = json.dumps({"returncode": returncode, "gaps": self.pending_gap, "ended_ns": ended_ns,
                              "cpu_ns": cpu_ns}).encode()
        if self.dead:
            return False
        try:
            self.sock.settimeout(2.0)
            self.sock.sendmsg([EXIT, payload], [], getattr(socket, "MSG_NOSIGNAL", 0x4000))
            return True
        except OSError:
            self.dead = True
            return False

    def heard(self) -> bool:
        """True when a heartbeat came from the sidecar since the last call
        (never blocks; reads whatever is queued)."""
        heard = False
        try:
            self.sock.setblocking(False)  # exit() set a timeout, which would make recv wait for data first
        except OSError:
            return False
        while True:
            try:
                msg = self.sock.recv(64)
            except InterruptedError:
                continue
            except OSError:  # nothing queued (EAGAIN), or the sidecar is gone
                return heard
            if not msg:
                return heard
            heard = heard or msg[:1] == HEARTBEAT

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def beat_until_closed(sock: socket.socket, interval: float = BEAT_INTERVAL) -> None:
    """The sidecar's heartbeat loop (a daemon thread's body): ends when the
    supervisor's end is gone, or with the process."""
    while True:
        try:
            sock.sendmsg([HEARTBEAT], [], _FLAGS)
        except (BlockingIOError, InterruptedError):
            pass  # a full queue already says we are alive
        except OSError:
            return
        time.sleep(interval)


def receive(sock: socket.socket) -> Tuple[Optional[bytes], Optional[bytes]]:
    """(tag, payload) of the next message, or (None, None) at EOF."""
    while True:
        try:
            msg = sock.recv(CHUNK + 64)
        except InterruptedError:
            continue
        except ConnectionResetError:
            return None, None
        if not msg:
            return None, None
        return msg[:1], msg[1:]


def write_config(cfg: Dict[str, Any]) -> int:
    """An inheritable descriptor of an unlinked file holding cfg as JSON."""
    data = json.dumps(cfg).encode()
    try:
        fd = os.memfd_create("graphsignal-sidecar-config", 0)
    except (AttributeError, OSError):
        f = tempfile.TemporaryFile()
        fd = os.dup(f.fileno())
        f.close()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def read_config(fd: int) -> Any:
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    return json.loads(b"".join(chunks))


# -- shared by both processes ---------------------------------------------------------
def setup_logging(level: int) -> None:
    """graphsignal's log lines go to stderr, at `level` (a logging level:
    config.log_level_of() before Settings exist, Settings.log_level after)."""
    logger = logging.getLogger("graphsignal")
    logger.setLevel(level)
    if not logger.handlers:
        h = logging.StreamHandler(sys.stderr)
        # messages quote engines and workloads: no control bytes reach the terminal
        from graphsignal.textsafe import SafeFormatter

        h.setFormatter(SafeFormatter("%(message)s"))
        logger.addHandler(h)
    logger.propagate = False
    logging.getLogger("werkzeug").setLevel(logging.ERROR)


def describe_status(rc: int) -> str:
    """'exit code 1' / 'killed by SIGKILL' for a Popen-style returncode."""
    if rc >= 0:
        return "exit code %d" % rc
    try:
        return "killed by %s" % signal.Signals(-rc).name
    except ValueError:
        return "killed by signal %d" % -rc


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (with the pid, it
    names one process even after the pid is reused)."""
    return procfs.start_time(pid)
