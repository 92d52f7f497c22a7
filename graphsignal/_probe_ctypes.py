"""graphsignal.probes through ctypes, for a Python that cannot load the cffi
helper: graphsignal-run exposes its own graphsignal package to the
workload's Python (graphsignal.launch.injection.expose_package), which may be another
version than the one graphsignal was installed for (`uv tool install`) and
may lack cffi. The C code is probe.h's, compiled into
lib/libgraphsignal_probes.so (csrc/probe_lib.c) with no Python in it.

`lib` offers the cffi helper's names that probes.py calls, so probes.py
has one code path; `register` builds the C argument arrays.
"""
import ctypes
import os
from typing import Any, List, Optional

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libgraphsignal_probes.so")

try:
    _c = ctypes.CDLL(_PATH)
except OSError as e:
    raise ImportError("graphsignal.probes needs cffi or %s, which this install lacks (%s)" % (_PATH, e))

_P = ctypes.c_void_p
_c.graphsignal_py_register.restype = _P
_c.graphsignal_py_register.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]
_c.graphsignal_py_record.argtypes = [_P, ctypes.c_uint64]
_c.graphsignal_py_record.restype = None
_c.graphsignal_py_add.argtypes = [_P, ctypes.c_uint64]
_c.graphsignal_py_add.restype = None
_c.graphsignal_py_set.argtypes = [_P, ctypes.c_double]
_c.graphsignal_py_set.restype = None
_c.graphsignal_py_profile_add.argtypes = [_P, ctypes.c_char_p, ctypes.c_uint64]
_c.graphsignal_py_profile_add.restype = None
_c.graphsignal_py_type_of.argtypes = [_P]
_c.graphsignal_py_type_of.restype = ctypes.c_int
_c.graphsignal_py_now_ns.argtypes = []
_c.graphsignal_py_now_ns.restype = ctypes.c_uint64
_TYPES = (ctypes.c_int * 4).in_dll(_c, "graphsignal_py_types")


def _unsigned(v: int) -> int:
    # ctypes wraps a negative into 2**64 - v; cffi refuses it: refuse it too
    if v < 0:
        raise OverflowError("can't convert negative number to unsigned")
    return v


class _Lib:
    GRAPHSIGNAL_GAUGE, GRAPHSIGNAL_COUNTER, GRAPHSIGNAL_HISTOGRAM, GRAPHSIGNAL_PROFILE = tuple(_TYPES)
    graphsignal_set = staticmethod(_c.graphsignal_py_set)
    graphsignal_probe_type_of = staticmethod(_c.graphsignal_py_type_of)
    graphsignal_now_ns = staticmethod(_c.graphsignal_py_now_ns)

    @staticmethod
    def graphsignal_record(e: Any, value: int) -> None:
        _c.graphsignal_py_record(e, _unsigned(value))

    @staticmethod
    def graphsignal_add(e: Any, delta: int) -> None:
        _c.graphsignal_py_add(e, _unsigned(delta))

    @staticmethod
    def graphsignal_profile_add_by_name(e: Any, frame: bytes, value: int) -> None:
        _c.graphsignal_py_profile_add(e, frame, _unsigned(value))


lib = _Lib()


def register(name: bytes, type_: int, keys: List[bytes], values: List[bytes]) -> Optional[int]:
    """An entry pointer (an int), or None when probe.h refused it."""
    n = len(keys)
    ckeys = (ctypes.c_char_p * n)(*keys) if n else None
    cvalues = (ctypes.c_char_p * n)(*values) if n else None
    entry: Optional[int] = _c.graphsignal_py_register(name, type_, ckeys, cvalues, n)
    return entry
