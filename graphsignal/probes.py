"""Probes from Python: the same four instrument types as probe.h, through
the same C code (compiled into graphsignal._gsnative) and the same ring.

    from graphsignal import probes
    batch_ns = probes.histogram("myservice_batch_duration_nanoseconds")
    t0 = probes.now_ns()
    ...
    batch_ns.record(probes.now_ns() - t0)

Outside graphsignal-run every instrument is inert (no shared memory, a
call costs one C branch behind the Python call). Values of histograms,
counters and profiles are non-negative integers; gauges take floats.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional

from graphsignal.rings import header  # standard library only; read when an instrument is refused

_lib: Any  # the C functions: the cffi helper's, or the same names through ctypes
_register: Callable[[bytes, int, List[bytes], List[bytes]], Any]  # an entry pointer, or NULL/None when refused
try:
    from graphsignal import _gsnative  # type: ignore[attr-defined]  # compiled: no stubs
except ImportError:
    # A Python without (this version of) cffi: graphsignal-run's package as
    # seen from another interpreter. The same C code, through ctypes.
    from graphsignal import _probe_ctypes
    _lib, _register = _probe_ctypes.lib, _probe_ctypes.register
    BACKEND = "ctypes"
else:
    BACKEND = "cffi"  # which of the two carries the calls (graphsignal-run --check shows it)
    _ffi = _gsnative.ffi
    _lib = _gsnative.lib

    def _cffi_register(name: bytes, type_: int, keys: List[bytes], values: List[bytes]) -> Any:
        ckeys = [_ffi.new("char[]", k) for k in keys]
        cvalues = [_ffi.new("char[]", v) for v in values]
        karr = _ffi.new("const char*[]", ckeys) if ckeys else _ffi.NULL
        varr = _ffi.new("const char*[]", cvalues) if cvalues else _ffi.NULL
        return _lib.graphsignal_probe_register(name, type_, karr, varr, len(keys))

    _register = _cffi_register

__all__ = ["gauge", "counter", "histogram", "profile", "now_ns", "Gauge", "Counter", "Histogram", "Profile"]


def now_ns() -> int:
    """Monotonic nanoseconds (CLOCK_MONOTONIC), the clock probe.h uses."""
    return int(_lib.graphsignal_now_ns())


class _Instrument:
    _type: int  # the probe.h instrument type (each subclass has its own)

    def __init__(self, name: str, tags: Optional[Mapping[str, Any]] = None) -> None:
        tags = dict(tags or {})
        keys = [str(k).encode() for k in tags]
        values = [str(v).encode() for v in tags.values()]
        self.name = name
        self.tags = tags
        self._e = _register(name.encode(), self._type, keys, values)
        if not self._e:  # NULL: refused by probe.h
            raise ValueError("invalid instrument %r (tags: %d, at most %d)" % (
                name, len(keys), header.integer("GRAPHSIGNAL_PROBE_MAX_TAGS")))

    @property
    def active(self) -> bool:
        """True when values go to a graphsignal-run sidecar."""
        return bool(_lib.graphsignal_probe_type_of(self._e) != 0)


class Gauge(_Instrument):
    """A value that is set (a float); the payload shows the last one."""

    _type = _lib.GRAPHSIGNAL_GAUGE

    def set(self, value: float) -> None:
        _lib.graphsignal_set(self._e, value)


class Counter(_Instrument):
    """A count that only grows (non-negative integer steps): a total and,
    over a window, its delta and rate."""

    _type = _lib.GRAPHSIGNAL_COUNTER

    def add(self, delta: int = 1) -> None:
        _lib.graphsignal_add(self._e, delta)


class Histogram(_Instrument):
    """Non-negative integer values (durations in ns, sizes) in log-linear
    bins: count, sum, min, max and quantiles."""

    _type = _lib.GRAPHSIGNAL_HISTOGRAM

    def record(self, value: int) -> None:
        _lib.graphsignal_record(self._e, value)


class Profile(_Instrument):
    """Values per named frame (time per stage, bytes per kind): the
    payload lists the largest frames with their share."""

    _type = _lib.GRAPHSIGNAL_PROFILE

    def __init__(self, name: str, tags: Optional[Mapping[str, Any]] = None) -> None:
        _Instrument.__init__(self, name, tags)
        self._frames: Dict[str, bytes] = {}

    def add(self, frame: str, value: int) -> None:
        b = self._frames.get(frame)
        if b is None:
            b = frame.encode("utf-8", "replace")
            if len(self._frames) < 4096:
                self._frames[frame] = b
        _lib.graphsignal_profile_add_by_name(self._e, b, value)


def gauge(name: str, tags: Optional[Mapping[str, Any]] = None) -> Gauge:
    return Gauge(name, tags)


def counter(name: str, tags: Optional[Mapping[str, Any]] = None) -> Counter:
    return Counter(name, tags)


def histogram(name: str, tags: Optional[Mapping[str, Any]] = None) -> Histogram:
    return Histogram(name, tags)


def profile(name: str, tags: Optional[Mapping[str, Any]] = None) -> Profile:
    return Profile(name, tags)
