"""Numeric environment variables, checked once by graphsignal-run.

A value that is not a number in its range gets one clear line and its
default, and is not passed on to the workload: the writers inside it (the
probe header, the CUPTI library) then use their defaults and stay quiet,
instead of each process reading a bad value on its own.
"""
import logging
import math
from typing import List, Mapping, MutableMapping, Optional, Tuple, Union

from graphsignal.config import LINGER_ENV
from graphsignal.rings import header

logger = logging.getLogger("graphsignal")

# The ring writers' own bounds (probe.h), read from the header's text: the
# supervisor loads no native module.
RING_CAPACITY_ENV = header.string("GRAPHSIGNAL_RING_CAPACITY_ENV")
RING_CAPACITY_BOUNDS = (header.integer("GRAPHSIGNAL_RING_MIN_CAPACITY"),
                        header.integer("GRAPHSIGNAL_RING_MAX_CAPACITY"))

# name: (kind, lowest, highest, unit, default as users read it)
NUMERIC = {
    RING_CAPACITY_ENV: (int, *RING_CAPACITY_BOUNDS, "records per ring", "sized from the free space of /dev/shm"),
    LINGER_ENV: (float, 0, 3600, "seconds", "0"),
    "GRAPHSIGNAL_PROBE_CUDA_INTERVAL_MS": (int, 10, 3_600_000, "milliseconds", "1000"),
    # the CUPTI library's own ranges (csrc/cupti/collector.cpp, CollectorConfig::from_env);
    # tests/integration/test_cupti_env_bounds.py holds them equal against the built library
    "GRAPHSIGNAL_CUPTI_FLUSH_MS": (int, 10, 60000, "milliseconds", "the library's"),
    "GRAPHSIGNAL_CUPTI_MAX_BUFFERS": (int, 2, 4096, "buffers", "the library's"),
    "GRAPHSIGNAL_CUPTI_CALLBACKS": (int, 0, 1, "0 or 1", "1"),
    "GRAPHSIGNAL_CUPTI_HANDOFF": (int, 0, 1, "0 or 1", "1"),
    "GRAPHSIGNAL_CUPTI_PINNED": (int, 0, 1, "0 or 1", "0"),
    "GRAPHSIGNAL_CUPTI_SAMPLE_MS": (int, 0, 60000, "milliseconds", "20"),
    "GRAPHSIGNAL_CUPTI_SAMPLE_PERIOD_MS": (int, 10, 3_600_000, "milliseconds", "1000"),
    # the CUDA driver interposer's (--cuda-trace light; csrc/interpose/interpose.c, setup)
    "GRAPHSIGNAL_CUDA_SAMPLE": (int, 0, 1_000_000, "one graph launch in N timed, 0 none", "16"),
    "GRAPHSIGNAL_CUDA_SAMPLE_RATE": (int, 0, 1_000_000, "timed launches a second at most, 0 no cap", "100"),
}


# Variables earlier versions read and this one does not: set, each gets one
# line saying what happens instead (and is not passed on).
_NO_GRAPH_SAMPLING = ("switching CUPTI's graph tracing at run time crashed CUDA 13.0 workloads (driver 580) inside "
                      "cuGraphLaunch, so every CUDA graph replay is traced")
RETIRED = {
    "GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_MS": _NO_GRAPH_SAMPLING,
    "GRAPHSIGNAL_CUPTI_GRAPH_SAMPLE_PERIOD_MS": _NO_GRAPH_SAMPLING,
    "GRAPHSIGNAL_CUPTI_GRAPH_PROBE": _NO_GRAPH_SAMPLING,
}


def parse(name: str, raw: str) -> Tuple[Optional[Union[int, float]], Optional[str]]:
    """(value, None) for a valid value of `name`, else (None, the line
    that says why)."""
    kind, lo, hi, unit, default = NUMERIC[name]
    text = raw.strip()
    value: Optional[Union[int, float]] = None
    try:
        if kind is int:
            if text.isascii() and text.isdigit():
                value = int(text)
        elif text.isascii() and "_" not in text:  # float() also reads other scripts' digits and 1_0
            v = float(text)
            if math.isfinite(v):
                value = v
    except ValueError:
        value = None
    if value is not None and lo <= value <= hi:
        return value, None
    what = "a whole number" if kind is int else "a number"
    return None, "%s=%s is not %s from %s to %s (%s); using the default (%s)" % (
        name, _printable(raw), what, lo, hi, unit, default)


def value(environ: Mapping[str, str], name: str) -> Optional[Union[int, float]]:
    """The valid value of `name` in environ, or None (unset or bad)."""
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    return parse(name, raw)[0]


def sanitize(environ: MutableMapping[str, str], log: Optional[logging.Logger] = None) -> List[str]:
    """Checks every numeric variable in environ (a dict, changed in
    place): a bad value is removed, with one line each, and so is a
    variable no longer read (RETIRED). Returns the lines."""
    lines: List[str] = []
    for name, instead in RETIRED.items():
        if name in environ:
            del environ[name]
            said = "%s is no longer read: %s" % (name, instead)
            lines.append(said)
            (log or logger).warning("graphsignal: %s", said)
    for name in NUMERIC:
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        v, why = parse(name, raw)
        if why:
            del environ[name]
            lines.append(why)
            (log or logger).warning("graphsignal: %s", why)
    return lines


def _printable(raw: str) -> str:
    # repr escapes control characters: the line is safe to print to a terminal
    return repr(raw[:60]) + ("..." if len(raw) > 60 else "")
