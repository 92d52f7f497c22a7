"""What the sidecar hears from the supervisor (graphsignal.channel), from
its first moments: the workload's console bytes into the error capture,
the gaps where the supervisor could not keep up, and at the end the
workload's exit status; the workload as the sources see it (Workload);
and the store before it exists (EarlyStore), so the capture runs from the
workload's first byte while the sidecar still imports the rest.

It guards against losing or misreading what the channel carries: a gap is
counted (graphsignal_dropped_console_bytes) and said once per stream, and
the line it broke is not joined across it; a malformed message is read as
empty; the calls made before the store exists are bounded and replayed
with their time; a signal reaches the workload only, never a process that
reused its pid (a pidfd, else the pid's start time).
"""
import json
import logging
import os
import select
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from graphsignal import channel
from graphsignal.channel import describe_status, start_time
from graphsignal.report import Reporter
from graphsignal.rings import stale

if TYPE_CHECKING:
    from graphsignal.sidecar.console import ConsoleCapture

logger = logging.getLogger("graphsignal")

DROPPED_CONSOLE_METRIC = "graphsignal_dropped_console_bytes"
PROCESS_TREE_CPU = "process_cpu_time_nanoseconds"  # the host source's series, scope=process_tree


class Workload:
    """The supervisor's child as the sources see it (pid, poll()); its exit
    status arrives through the channel."""

    def __init__(self, pid: int, start_time: Optional[int] = None, pidfd: Optional[int] = None) -> None:
        self.pid = pid
        self.start_time = start_time
        self.pidfd = pidfd
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self.returncode

    def signal(self, sig: int) -> None:
        """Sends sig to the workload, never to a process that reused its pid."""
        if self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass
            return
        if self.start_time is not None and start_time(self.pid) == self.start_time:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill_group(self) -> None:
        """SIGKILL to the workload's process group (its own, made by the
        supervisor), then to the workload itself. The group is signalled
        only while the workload, its leader, is alive: then its id cannot
        name another group."""
        try:
            if self.alive() and os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.signal(signal.SIGKILL)

    def alive(self) -> bool:
        if self.pidfd is not None:
            r, _, _ = select.select([self.pidfd], [], [], 0)
            return not r
        return self.start_time is not None and start_time(self.pid) == self.start_time and stale.pid_alive(self.pid)

    def wait_gone(self, timeout: float) -> bool:
        """True once the workload has exited (pidfd readable, or the pid no
        longer names it), within timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pidfd is not None:
                r, _, _ = select.select([self.pidfd], [], [], max(0.0, deadline - time.monotonic()))
                if r:
                    return True
                continue
            if not stale.pid_alive(self.pid):
                return True
            time.sleep(0.05)
        return False


class EarlyStore:
    """Stands in for the MetricStore while the sidecar imports the rest, so
    the console capture runs from the workload's first byte: calls are
    kept (bounded, with their time) and replayed into the store once it is
    attached, then passed straight through."""

    MAX_CALLS = 10000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Optional[List[Tuple[str, Tuple[Any, ...], Dict[str, Any]]]] = []
        self._store: Any = None  # the MetricStore, once attached
        self.dropped = 0

    def clock(self) -> int:
        store = self._store
        return store.clock() if store is not None else time.time_ns()

    def attach(self, store: Any) -> None:
        with self._lock:
            for name, args, kwargs in self._calls or ():
                try:
                    getattr(store, name)(*args, **kwargs)
                except Exception as e:
                    logger.debug("graphsignal: replaying %s: %s", name, e)
            self._calls = None
            self._store = store

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        store = self._store
        if store is not None:
            return getattr(store, name)

        def record(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if self._store is not None:
                    return getattr(self._store, name)(*args, **kwargs)
                kwargs.setdefault("ts", time.time_ns())
                if self._calls is not None and len(self._calls) < self.MAX_CALLS:
                    self._calls.append((name, args, kwargs))
                else:
                    self.dropped += 1
        return record


class Feed(threading.Thread):
    """Reads the channel from the sidecar's first moments: console bytes
    into the capture, gaps, and at the end the workload's exit status.
    `ended` is True when the exit arrived, False when the channel closed
    first (the supervisor is gone)."""

    def __init__(self, sock: socket.socket, child: Workload) -> None:
        threading.Thread.__init__(self, name="graphsignal-channel", daemon=True)
        self.sock = sock
        self.child = child
        self.store = EarlyStore()
        self.console: Optional["ConsoleCapture"] = None
        self.ended: Optional[bool] = None
        self._gap_reporter = Reporter(self.store, {"source": "sidecar"})

    def start_console(self) -> None:
        from graphsignal.sidecar import console

        self.console = console.ConsoleCapture(self.store, lambda: self.child.pid)

    def run(self) -> None:
        try:
            self.ended = self._serve()
        except Exception as e:
            logger.warning("graphsignal: the console channel failed: %s: %s", type(e).__name__, e)
            self.ended = False

    def _serve(self) -> bool:
        while True:
            tag, payload = channel.receive(self.sock)
            if tag is None or payload is None:
                return False
            stream = channel.STREAM_OF.get(tag)
            if stream is not None:
                if self.console is not None:
                    self.console.feed(stream, payload)
            elif tag == channel.GAP:
                d = _json(payload)
                self._gap(d.get("stream"), d.get("bytes"))
            elif tag == channel.CLOSED:
                if self.console is not None:
                    self.console.close_stream(payload.decode("ascii", "replace"))
            elif tag == channel.EXIT:
                # From now on the supervisor waits for our final work, as
                # long as it hears from us (channel.HEARTBEAT).
                threading.Thread(target=channel.beat_until_closed, args=(self.sock,), name="graphsignal-heartbeat",
                                 daemon=True).start()
                d = _json(payload)
                for stream, n in (d.get("gaps") or {}).items():
                    self._gap(stream, n)
                cpu = d.get("cpu_ns")
                if isinstance(cpu, int) and not isinstance(cpu, bool) and 0 <= cpu < 1 << 62:
                    # the tree's CPU at the end, exact (wait4): what sampling missed of its last interval
                    self.store.raise_counter(PROCESS_TREE_CPU, {"process.root_pid": str(self.child.pid),
                                                                "scope": "process_tree"}, cpu)
                rc = d.get("returncode")
                if isinstance(rc, int):
                    self.child.returncode = rc
                    self._record_exit(rc)
                    self.store.set_ended(d.get("ended_ns"), rc)
                return True

    def _gap(self, stream: Any, n: Any) -> None:
        if stream not in channel.DATA or not isinstance(n, int) or n <= 0:
            return
        self.store.add_counter(DROPPED_CONSOLE_METRIC, {"stream": stream}, n)
        if self.console is not None:
            self.console.close_stream(stream)  # what follows a gap is not the same line or traceback
        self._gap_reporter.once(stream, "console error capture fell behind on %s: %d bytes went through to the "
                                "console unscanned (counted in %s)" % (stream, n, DROPPED_CONSOLE_METRIC))

    def _record_exit(self, rc: int) -> None:
        pid = str(self.child.pid)
        if rc < 0:
            self.store.add_error("error", "process %s was %s" % (pid, describe_status(rc)),
                                 tags={"process.pid": pid, "exit.signal": str(-rc)})
        elif rc != 0:
            self.store.add_error("error", "process %s exited with code %d" % (pid, rc),
                                 tags={"process.pid": pid, "exit.code": str(rc)})


def _json(payload: bytes) -> Dict[str, Any]:
    try:
        d = json.loads(payload)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
