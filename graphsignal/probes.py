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
from graphsignal import _gsnative

_ffi = _gsnative.ffi
_lib = _gsnative.lib

__all__ = ["gauge", "counter", "histogram", "profile", "now_ns", "Gauge", "Counter", "Histogram", "Profile"]


def now_ns():
    """Monotonic nanoseconds (CLOCK_MONOTONIC), the clock probe.h uses."""
    return _lib.graphsignal_now_ns()


class _Instrument:
    _type = None

    def __init__(self, name, tags=None):
        tags = dict(tags or {})
        keys = [_ffi.new("char[]", str(k).encode()) for k in tags]
        values = [_ffi.new("char[]", str(v).encode()) for v in tags.values()]
        ckeys = _ffi.new("const char*[]", keys) if keys else _ffi.NULL
        cvalues = _ffi.new("const char*[]", values) if values else _ffi.NULL
        self.name = name
        self.tags = tags
        self._e = _lib.graphsignal_probe_register(name.encode(), self._type, ckeys, cvalues, len(keys))
        if self._e == _ffi.NULL:
            raise ValueError("invalid instrument %r (tags: %d, at most 16)" % (name, len(keys)))

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
