"""One way to report a problem: one log line and, where a store is given,
one entry in the payload's `errors`, said once per key.

Every source and part of the sidecar reports through a Reporter, so a
condition that repeats every cycle (a missing driver call, a bad ring, an
engine that stopped answering) costs one line, never a flood, and shows
in `errors` where an agent reads it.
"""
import logging
import threading
from typing import Any, Callable, Dict, Hashable, Mapping, Optional, Protocol, Set, TypeVar

T = TypeVar("T")

logger = logging.getLogger("graphsignal")

class ErrorSink(Protocol):
    """Where error entries go: graphsignal.sidecar.store.MetricStore, or anything
    with its add_error."""

    def add_error(self, level: str, message: str, exception: Optional[str] = None,
                  tags: Optional[Mapping[str, str]] = None, ts: Optional[int] = None) -> None: ...


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
MAX_KEYS = 10000  # keys remembered per reporter; beyond, further new problems are not said


class Reporter:
    """Says each problem once per key.

    store: where error entries go (a MetricStore, or anything with
    add_error; None: log lines only). tags: the entries' tags (e.g.
    {"source": "nvml"}). on_error: callable(message), told instead of the
    store (a part that reports through its owner); sink: callable(level,
    message), the same with the entry's level (the supervisor's notes)."""

    def __init__(self, store: Optional[ErrorSink] = None, tags: Optional[Mapping[str, str]] = None,
                 on_error: Optional[Callable[[str], None]] = None,
                 sink: Optional[Callable[[str, str], None]] = None, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys  # keys remembered; beyond, new problems are not said
        self.store = store
        self.tags: Dict[str, str] = dict(tags or {})
        self.on_error = on_error
        self.sink = sink
        self._said: Set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """True the first time key is seen (and remembers it)."""
        with self._lock:
            if key in self._said or len(self._said) >= self.max_keys:
                return False
            self._said.add(key)
            return True

    def said(self, key: Hashable) -> bool:
        return key in self._said

    def forget(self, key: Hashable) -> None:
        """key may be said again (its condition cleared)."""
        with self._lock:
            self._said.discard(key)

    def once(self, key: Hashable, message: str, level: str = "warning", entry: bool = True,
             log_level: Optional[int] = None, tags: Optional[Mapping[str, str]] = None,
             exception: Optional[str] = None, entry_message: Optional[str] = None) -> bool:
        """Logs "graphsignal: <message>" (at log_level, default the level's)
        and, with entry, adds an error entry of `level` (its text
        entry_message, default the message), the first time key is seen.
        Returns whether it was said now."""
        if not self.first(key):
            return False
        self.say(message, level, entry, log_level, tags, exception, entry_message)
        return True

    def say(self, message: str, level: str = "warning", entry: bool = True, log_level: Optional[int] = None,
            tags: Optional[Mapping[str, str]] = None, exception: Optional[str] = None,
            entry_message: Optional[str] = None) -> None:
        """The same, unconditionally (a caller with its own rule for when)."""
        logger.log(_LEVELS.get(level, logging.WARNING) if log_level is None else log_level, "graphsignal: %s",
                   message)
        if entry:
            self.entry(message if entry_message is None else entry_message, level, tags, exception)

    def entry(self, message: str, level: str = "warning", tags: Optional[Mapping[str, str]] = None,
              exception: Optional[str] = None) -> None:
        """Only the error entry (the caller logged already, or logs otherwise)."""
        if self.sink is not None:
            self.sink(level, message)
        elif self.on_error is not None:
            self.on_error(message)
        elif self.store is not None:
            self.store.add_error(level, message, exception=exception,
                                 tags=dict(self.tags, **tags) if tags else self.tags)

    def guard(self, what: str, fn: Callable[..., T], *args: Any, ended: bool = False) -> Optional[T]:
        """fn(*args), or None when it raises: then one warning line and one
        error entry say that `what` failed and the workload runs on (a
        part's failure must stop nothing else); with ended, at the end of
        the run, only that it failed (the workload is no longer running)."""
        try:
            return fn(*args)
        except Exception as e:
            msg = "%s failed: %s: %s%s" % (what, type(e).__name__, e, "" if ended else " (the workload runs on)")
            try:
                self.say(msg, "error", log_level=logging.WARNING)
            except Exception:  # the store itself is what failed: the line is out
                pass
            return None


_module = Reporter()


def once(key: Hashable, message: str, level: str = "warning", log_level: Optional[int] = None) -> bool:
    """Reporter.once for module-level code that has no store (a log line only)."""
    return _module.once(key, message, level, entry=False, log_level=log_level)
