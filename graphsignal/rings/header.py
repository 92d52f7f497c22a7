"""The constants of include/graphsignal/probe.h, read from the header's text.

For the supervisor, which starts the workload before any native module (or
numpy) loads; the sidecar reads the same constants through the compiled
helper (graphsignal.rings.layout). It reads the copy that ships in the
package (the one the helper was built with in the same install), else the
source tree's. Only the forms the header uses are read: a number (with C's
u/L suffixes), (a << b), and a plain string; every other #define is left
out, and tests/unit/test_header_constants.py holds each constant read here
equal to the helper's.

Standard library only.
"""
import functools
import os
import re
from typing import Dict, Optional, Union

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CANDIDATES = (
    os.path.join(_PACKAGE, "_include", "graphsignal", "probe.h"),  # installed with the package
    os.path.join(_PACKAGE, "..", "include", "graphsignal", "probe.h"),  # source tree
)

_DEFINE = re.compile(r"^#define[ \t]+(GRAPHSIGNAL_\w+)[ \t]+(.*?)[ \t]*(?:/\*.*)?$", re.M)
_NUMBER = r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*"
_INT = re.compile(r"^%s$" % _NUMBER)
_SHIFT = re.compile(r"^\(\s*%s\s*<<\s*%s\s*\)$" % (_NUMBER, _NUMBER))
_STRING = re.compile(r'^"([^"\\]*)"$')

Value = Union[int, str]


def path() -> str:
    """The probe.h this module reads."""
    for p in CANDIDATES:
        if os.path.exists(p):
            return os.path.abspath(p)
    raise RuntimeError("graphsignal/probe.h not found in %s" % (CANDIDATES,))


def parse_value(text: str) -> Optional[Value]:
    """A #define's value as C reads it, for the forms the header uses; None
    for any other."""
    m = _INT.match(text)
    if m:
        return int(m.group(1), 0)
    m = _SHIFT.match(text)
    if m:
        return int(m.group(1), 0) << int(m.group(2), 0)
    m = _STRING.match(text)
    if m:
        return m.group(1)
    return None


def parse(text: str) -> Dict[str, Value]:
    """{name: value} of the header text's readable #defines."""
    out: Dict[str, Value] = {}
    for m in _DEFINE.finditer(text):
        v = parse_value(m.group(2))
        if v is not None:
            out[m.group(1)] = v
    return out


@functools.lru_cache(maxsize=None)
def constants() -> Dict[str, Value]:
    """{name: value} of probe.h's readable #defines (read once)."""
    with open(path(), encoding="ascii") as f:
        return parse(f.read())


def integer(name: str) -> int:
    """The integer constant `name` of probe.h (KeyError if it has none)."""
    v = constants()[name]
    if not isinstance(v, int):
        raise KeyError("%s is not an integer in %s" % (name, path()))
    return v


def string(name: str) -> str:
    """The string constant `name` of probe.h (KeyError if it has none)."""
    v = constants()[name]
    if not isinstance(v, str):
        raise KeyError("%s is not a string in %s" % (name, path()))
    return v
