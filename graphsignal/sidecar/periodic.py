"""The one periodic driver of the sidecar's exporters, the uploader
(graphsignal.sidecar.upload) and the OTLP exporter
(graphsignal.sidecar.otlp), as OpenTelemetry's periodic exporting reader
drives its exporter: a daemon thread that hands the exporter a store
snapshot each time it is due, and at stop has it make its final export
within a deadline.

An exporter (Exporter) says its thread's name, what its step is called in
a line, and its tick (seconds between two looks); due() says whether
this tick exports (the uploader: every tick, since it gathers new errors
every tick even while it backs off; the OTLP exporter: once an interval,
or sooner after a failure), snapshot() takes the store snapshot it reads
(the uploader's with the series' JSON), export(snapshot) sends it and
shutdown(deadline) makes the final export, its requests ending by the
deadline (time.monotonic()). Pacing, retries and what is kept between
two exports are the exporter's own; the driver only runs it.

Each exporter has a driver of its own: a request of one that hangs to
its timeout never holds the other's. A step that raises (a bug: the
exporters catch their own failures) is one line, once, and the driver
goes on; stop() returns by the deadline whatever the final request does
(the thread is a daemon, left behind).
"""
import threading
import time
from typing import Any, Optional, Protocol, Tuple

from graphsignal.report import Reporter
from graphsignal.signals_model import StoreSnapshot

FINAL_DEADLINE = 2.0  # seconds for the final export at exit
MIN_FINAL = 0.05  # seconds: a final export with less time left is not started


class Exporter(Protocol):
    name: str  # the driver thread's
    what: str  # its step in a line: "upload", "OTLP export"
    tick: float  # seconds between two looks

    def due(self) -> bool: ...

    def snapshot(self) -> StoreSnapshot: ...

    def export(self, snapshot: StoreSnapshot) -> bool: ...

    def shutdown(self, deadline: float) -> bool: ...


def final_timeout(deadline: float, connect: float) -> Tuple[float, float]:
    """(connect, read) timeouts of a request that must end by `deadline`
    (time.monotonic()): the connect one at most `connect`."""
    remaining = max(deadline - time.monotonic(), 0.0)
    return min(connect, remaining), remaining


class PeriodicDriver(threading.Thread):
    """Runs one Exporter (see the module doc); stop() asks for its final
    export and waits for it at most the deadline."""

    def __init__(self, exporter: Exporter) -> None:
        threading.Thread.__init__(self, name=exporter.name, daemon=True)
        self.exporter = exporter
        self._halt = threading.Event()
        self._deadline: Optional[float] = None
        self._reporter = Reporter()

    def run(self) -> None:
        ex = self.exporter
        while not self._halt.wait(ex.tick):
            self._guarded(self._tick)
        deadline = self._deadline or 0.0
        if deadline - time.monotonic() > MIN_FINAL:
            self._guarded(ex.shutdown, deadline)

    def _tick(self) -> None:
        if self.exporter.due():
            self.exporter.export(self.exporter.snapshot())

    def _guarded(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # a bug here must not take the sidecar down: say it once, go on
            self._reporter.once("step", "%s failed: %s: %s" % (self.exporter.what, type(e).__name__, e),
                                entry=False)

    def stop(self, deadline: float = FINAL_DEADLINE) -> None:
        """Asks for the final export and waits for it at most `deadline`
        seconds; a hung request is left behind on the daemon thread."""
        self._deadline = time.monotonic() + deadline
        self._halt.set()
        if self.is_alive():
            self.join(deadline + 0.1)
