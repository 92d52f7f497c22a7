"""The sidecar's clock: the store's time-based work, on its own thread.

Every `interval` seconds while someone reads /signals it serializes what
changed (store.prerender; unread, it sleeps to the next snapshot), and once
every `history_interval` seconds it appends the per-second history snapshot
that windows are differences of (store.take_history). It belongs to the sidecar, not to any writer: if the
poller never starts, or a source hangs, windows still advance.

The poller never prerenders: its time is what keeps the rings from filling,
so serialization stays here and on the readers' threads. Anything else that
prerenders (a test, a tool) makes the clock sleep to the next snapshot
instead of waking every `interval` for the same work.
"""
import logging
import threading
import time
from typing import Any, Callable, Optional

from graphsignal.report import Reporter

logger = logging.getLogger("graphsignal")


class StoreClock:
    def __init__(self, store: Any, interval: float = 0.05, history_interval: float = 1.0,
                 monotonic: Callable[[], float] = time.monotonic, reporter: Optional[Reporter] = None) -> None:
        """interval, history_interval: seconds. reporter: a
        graphsignal.report.Reporter for a failing tick (said once)."""
        self.store = store
        self.interval = interval
        self.history_interval = history_interval
        self.monotonic = monotonic
        self.reporter = reporter
        self._last_history: Optional[float] = None
        self._seen = 0  # store.prerenders after the clock's own last one
        self._others = False  # whether something else prerendered since then
        self._halt = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def tick(self) -> None:
        """One cycle: prerender, and the history snapshot when one is due."""
        now = self.monotonic()
        count = getattr(self.store, "prerenders", 0)
        self._others = count != self._seen
        self.store.prerender()
        self._seen = getattr(self.store, "prerenders", 0)
        if self._last_history is None or now - self._last_history >= self.history_interval:
            self._last_history = now
            self.store.take_history()

    def start(self) -> "StoreClock":
        self._thread = threading.Thread(target=self._run, name="graphsignal-clock", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._halt.is_set():
            t0 = self.monotonic()
            try:
                self.tick()
            except Exception as e:  # keep ticking: one bad cycle must not stop the history
                msg = "clock cycle failed: %s: %s" % (type(e).__name__, e)
                if self.reporter is not None:
                    self.reporter.once(("clock", type(e).__name__, str(e)), msg)
                else:
                    logger.warning("graphsignal: %s", msg)
            self._halt.wait(self._delay(t0))

    def _delay(self, t0: float) -> float:
        """Seconds to the next tick: `interval` while someone reads /signals
        (prerender has work) and nothing else prerenders, else the next
        history snapshot (an idle sidecar's CPU is mostly wakeups)."""
        now = self.monotonic()
        if self.store.being_read() and not self._others:
            return max(0.0, self.interval - (now - t0))
        last = self._last_history if self._last_history is not None else t0
        return max(0.0, min(self.history_interval, self.history_interval - (now - last)))

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(5)
