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
from graphsignal.rings import header  # standard library only; read when an instrument is refused

try:
    from graphsignal import _gsnative  # type: ignore[attr-defined]  # compiled: no stubs
except ImportError:
    # A Python without (this version of) cffi: graphsignal-run's package as
    # seen from another interpreter. The same C code, through ctypes.
    from graphsignal._probe_ctypes import lib as _lib, register as _register
    BACKEND = "ctypes"
else:
    BACKEND = "cffi"  # which of the two carries the calls (graphsignal-run --check shows it)
    _ffi = _gsnative.ffi
    _lib = _gsnative.lib

    def _register(name, type_, keys, values):
        ckeys = [_ffi.new("char[]", k) for k in keys]
        cvalues = [_ffi.new("char[]", v) for v in values]
        karr = _ffi.new("const char*[]", ckeys) if ckeys else _ffi.NULL
        varr = _ffi.new("const char*[]", cvalues) if cvalues else _ffi.NULL
        return _lib.graphsignal_probe_register(name, type_, karr, varr, len(keys))

__all__ = ["gauge", "counter", "histogram", "profile", "now_ns", "Gauge", "Counter", "Histogram", "Profile"]


def now_ns():
    """Monotonic nanoseconds (CLOCK_MONOTONIC), the clock probe.h uses."""
    return _lib.graphsignal_now_ns()


class _Instrument:
    _type = None

    def __init__(self, name, tags=None):
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
    def active(self):
        """True when values go to a graphsignal-run sidecar."""
        return _lib.graphsignal_probe_type_of(self._e) != 0


class Gauge(_Instrument):
    _type = _lib.GRAPHSIGNAL_GAUGE

    def set(self, value):
        _lib.graphsignal_set(self._e, value)


class Counter(_Instrument):
    _type = _lib.GRAPHSIGNAL_COUNTER

    def add(self, delta=1):
        _lib.graphsignal_add(self._e, delta)


class Histogram(_Instrument):
    _type = _lib.GRAPHSIGNAL_HISTOGRAM

    def record(self, value):
        _lib.graphsignal_record(self._e, value)


class Profile(_Instrument):
    _type = _lib.GRAPHSIGNAL_PROFILE

    def __init__(self, name, tags=None):
        _Instrument.__init__(self, name, tags)
        self._frames = {}

    def add(self, frame, value):
        b = self._frames.get(frame)
        if b is None:
            b = frame.encode("utf-8", "replace")
            if len(self._frames) < 4096:
                self._frames[frame] = b
        _lib.graphsignal_profile_add_by_name(self._e, b, value)


def gauge(name, tags=None):
    return Gauge(name, tags)


def counter(name, tags=None):
    return Counter(name, tags)


def histogram(name, tags=None):
    return Histogram(name, tags)


def profile(name, tags=None):
    return Profile(name, tags)
