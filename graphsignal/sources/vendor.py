"""What the doors to vendor GPU libraries (NVML, AMD SMI) share: lazy
initialization under a lock, shutdown at exit, a memo of calls the
library cannot answer while the driver runs (not supported, no
permission, missing: never asked again), and each failing function said
once per device through a graphsignal.report.Reporter (a log line, and
the first failure of each also told to on_error so it shows in `errors`).

A subclass names its library (`label`, `module_label`) and implements
_open() (raises BackendUnavailable with the one line users see) and
_close(); its call() uses ask(), give_up(), missing(), not_supported() and
failed().
"""
import atexit
import threading
from typing import Callable, Hashable, Optional, Set

from graphsignal.report import Reporter
from graphsignal.sources.gpu import BackendUnavailable


class VendorLibrary:
    label = "library"  # as log lines name it ("NVML", "AMD SMI")
    module_label = "module"  # the Python package ("nvidia-ml-py", "amdsmi")

    def __init__(self, on_error: Optional[Callable[[str], None]] = None) -> None:
        """on_error(message): told once per (function, device) that fails
        unexpectedly."""
        self._on_error = on_error
        self._lock = threading.Lock()
        self._ready = False
        self._failure: Optional[BackendUnavailable] = None  # once init failed for good
        self._atexit = False
        # (fn, device, variant) whose answer cannot change while the driver
        # runs (not supported, no permission, missing): not asked again
        self._unanswerable: Set[Hashable] = set()
        self.reporter = Reporter(on_error=on_error)

    # -- lifecycle -----------------------------------------------------------
    def init(self) -> None:
        """Initializes the library once; raises BackendUnavailable with the
        one line."""
        with self._lock:
            if self._ready:
                return
            if self._failure is not None:
                raise self._failure
            try:
                self._open()
            except BackendUnavailable as e:
                self._failure = e
                raise
            self._ready = True
            if not self._atexit:
                self._atexit = True
                atexit.register(self.shutdown)

    def shutdown(self) -> None:
        with self._lock:
            if not self._ready:
                return
            self._ready = False
            self._close()

    def _open(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    # -- what call() shares ----------------------------------------------------
    def ask(self, key: Hashable) -> bool:
        """Whether a call with this (fn, device, variant) key is worth
        making (initializing the library first)."""
        if key in self._unanswerable:
            return False
        if not self._ready:
            self.init()
        return True

    def give_up(self, key: Hashable) -> None:
        """Never ask this key again (the driver cannot answer it)."""
        self._unanswerable.add(key)

    def missing(self, fn: str, key: Hashable) -> None:
        self.give_up(key)
        self.reporter.once((fn, None), "%s %s is not in this %s; reported as null" % (
            self.label, fn, self.module_label), "info", entry=False)

    def not_supported(self, fn: str, device: Optional[int], where: str, key: Hashable) -> None:
        self.give_up(key)
        self.reporter.once((fn, device), "%s %s is not supported on %s; reported as null" % (self.label, fn, where),
                           "debug", entry=False)

    def failed(self, fn: str, device: Optional[int], where: str, detail: object) -> None:
        """An unexpected failure: one warning (and, the first time, one
        entry through on_error) per (fn, device)."""
        self.reporter.once((fn, device), "%s %s failed on %s: %s; reported as null" % (self.label, fn, where, detail),
                           entry_message="%s %s failed on %s: %s" % (self.label, fn, where, detail))

    def log_once(self, key: Hashable, level: int, message: str) -> None:
        """A line of the caller's own, once per key (no entry)."""
        self.reporter.once(key, message, entry=False, log_level=level)

