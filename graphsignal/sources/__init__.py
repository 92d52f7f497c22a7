"""Data sources: one module each, with setup / poll / shutdown.

A Source is polled on its own thread (SourceThread) every `interval`
seconds. A failure in setup stops that source with one log line and one
error entry; a failure in poll is logged once per distinct message and
polling goes on. Nothing a source does can stop another source or the
workload.
"""
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from graphsignal import config
from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")


class SourceUnavailable(Exception):
    """Raised by setup() when the source cannot run here (no driver, no
    library, nothing to scrape). The message is the one line users see;
    quiet: nothing of its kind is on this host at all (no NVIDIA driver on
    a CPU machine), so it is said at info level, not on every run."""

    def __init__(self, message: str = "", quiet: bool = False) -> None:
        Exception.__init__(self, message)
        self.quiet = quiet


def _no_pid() -> Optional[int]:
    return None


def _always() -> bool:
    return True


@dataclass(frozen=True)
class SourceContext:
    """What a source is given of its run, and all it may know of the
    sidecar: the store it writes, the run's settings (config.Settings: a
    source reads its options there, never in the environment), its root
    process (root_pid() -> pid or None; alive() -> whether it still runs),
    and the engine's metrics URL and engine name (None without an engine)."""

    store: Any
    settings: config.Settings = field(default_factory=config.Settings)
    root_pid: Callable[[], Optional[int]] = _no_pid
    alive: Callable[[], bool] = _always
    metrics_url: Optional[str] = None
    engine: Optional[str] = None


class Source:
    name = "source"
    interval = 1.0  # seconds between polls
    # seconds stop() waits for a poll in flight after interrupt() (None: stop's timeout)
    stop_wait: Optional[float] = None

    def setup(self) -> None:
        pass

    def poll(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        pass

    def interrupt(self) -> None:
        """Called from another thread when shutdown begins: a poll blocked
        on something outside (an engine's endpoint) should return now."""


class SourceThread(threading.Thread):
    def __init__(self, source: Source, store: Any = None, report_errors: bool = True) -> None:
        threading.Thread.__init__(self, name="graphsignal-" + source.name, daemon=True)
        self.source = source
        self.store = store
        self.report_errors = report_errors
        self._halt = threading.Event()
        self.reporter = Reporter(store if report_errors else None, {"source": source.name})
        self.available: Optional[bool] = None

    def _report(self, level: str, message: str) -> None:
        self.reporter.once(message, message, level)

    def run(self) -> None:
        try:
            self.source.setup()
            self.available = True
        except SourceUnavailable as e:
            self.available = False
            self._report("info" if e.quiet else "warning", "%s: %s" % (self.source.name, e))
            return
        except Exception as e:  # a bug in a source must not take the sidecar down
            self.available = False
            self._report("error", "%s setup failed: %s: %s" % (self.source.name, type(e).__name__, e))
            return
        next_t = time.monotonic()
        while not self._halt.is_set():
            try:
                self.source.poll()
            except Exception as e:
                self._report("error", "%s poll failed: %s: %s" % (self.source.name, type(e).__name__, e))
            next_t += self.source.interval
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t = time.monotonic()
                delay = 0
            self._halt.wait(delay)
        self._shutdown()

    def _shutdown(self) -> None:
        try:
            self.source.shutdown()
        except Exception as e:
            self._report("error", "%s shutdown failed: %s: %s" % (self.source.name, type(e).__name__, e))

    def stop(self, timeout: float = 5.0, final_poll: bool = False) -> None:
        """Stops the thread; with final_poll, polls once more first (so a
        short run's last second is not lost). A poll still in flight after
        `timeout` is left to finish on its own (the thread is a daemon):
        shutdown never waits longer for a source, and then there is no
        final poll."""
        self._halt.set()
        try:
            self.source.interrupt()
        except Exception as e:
            self._report("error", "%s interrupt failed: %s: %s" % (self.source.name, type(e).__name__, e))
        if self.is_alive():
            wait = self.source.stop_wait
            self.join(timeout if wait is None else min(timeout, wait))
        if self.is_alive():
            logger.debug("graphsignal: %s still polling at shutdown; not waiting for it", self.source.name)
            return
        if final_poll and self.available:
            try:
                self.source.poll()
            except Exception as e:
                self._report("error", "%s poll failed: %s: %s" % (self.source.name, type(e).__name__, e))
