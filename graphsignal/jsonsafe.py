"""JSON from others (an upload body, a server's answer, a payload file)
parsed without letting its nesting reach the parser; and ours written
without a number or a string making it fail (dumps).

orjson (3.8 and older, still allowed by our requirements) recurses once
per level with no limit of its own: a body of 150,000 '[' crashes the
process with SIGSEGV, not an exception. loads() measures the nesting on
the text first (depth(): no recursion, vectorized) and refuses anything
deeper than max_depth with TooDeep, a ValueError.
"""
import sys
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

import orjson

from graphsignal.textsafe import utf8

_OPEN = (b"[", b"{")
_JSON_OPT = orjson.OPT_SERIALIZE_NUMPY
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integers


def _json_safe(obj: Any) -> Any:
    """obj with every int outside orjson's 64-bit range as a float (inf,
    which JSON lacks, as None), and every string UTF-8 can carry."""
    if isinstance(obj, str):
        return utf8(obj)
    if isinstance(obj, int) and not isinstance(obj, bool):
        if _INT_MIN <= obj <= _INT_MAX:
            return obj
        try:
            return float(obj)
        except OverflowError:
            return None
    if isinstance(obj, dict):
        return {utf8(k) if isinstance(k, str) else k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    np = sys.modules.get("numpy")  # an array exists only where numpy was imported
    if np is not None and isinstance(obj, np.ndarray) and obj.dtype == object:
        return [_json_safe(v) for v in obj.tolist()]
    return obj


def dumps(obj: Any) -> bytes:
    """orjson.dumps (numpy values too) that never fails on a number or a
    string: integers beyond 64 bits become floats (JSON integers are exact
    up to 2**64 - 1, orjson's range; graphsignal.sidecar.store's module
    doc), text that was not UTF-8 U+FFFD. Raises orjson.JSONEncodeError
    (a TypeError) for what JSON cannot hold at all (a complex, an
    object)."""
    try:
        return orjson.dumps(obj, option=_JSON_OPT)
    except orjson.JSONEncodeError:
        return orjson.dumps(_json_safe(obj), option=_JSON_OPT)


class TooDeep(ValueError):
    """The text nests objects and lists deeper than allowed."""


_tables: "Optional[Tuple[bytes, npt.NDArray[np.int8]]]" = None
Text = Union[bytes, bytearray, memoryview]  # a JSON text's bytes


def _depth_tables() -> "Tuple[bytes, npt.NDArray[np.int8]]":
    global _tables
    if _tables is None:
        import numpy as np

        step = np.zeros(256, np.int8)
        step[list(b"[{")] = 1
        step[list(b"]}")] = -1
        _tables = (bytes(b for b in range(256) if b not in b'[]{}"'), step)
    return _tables


def depth(data: bytes) -> int:
    """How deep objects and lists nest in a JSON text (bytes): the
    top-level container is level 1. Works on the text, not the parsed
    value: no recursion, and about 30 ms for a 9 MB, 50,000-series body
    where walking the parsed value takes 250 ms. In valid JSON a backslash
    occurs only inside strings and starts an escape, so removing escaped
    backslashes, then escaped quotes, leaves quotes that open and close
    strings only; brackets between an opening and a closing one are text.
    On a text that is not valid JSON the count is exact up to the first
    error, which is as far as any parser gets, so it never says less than
    a parser would recurse."""
    import numpy as np  # noqa: F811

    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    drop, step = _depth_tables()
    a = np.frombuffer(data.translate(None, drop), np.uint8)
    if not len(a):
        return 0
    inside = np.bitwise_xor.accumulate(a == ord('"'))  # True from an opening quote up to its closing one
    steps = step[a]
    steps[inside] = 0
    return int(np.cumsum(steps, dtype=np.int64).max())


def check_depth(data: Text, max_depth: int) -> None:
    """Raises TooDeep when data (bytes) nests deeper than max_depth."""
    data = bytes(data)  # (a bytes is not copied)
    if sum(data.count(c) for c in _OPEN) <= max_depth:
        return  # cannot nest deeper than it opens: no need to look closer
    levels = depth(data)
    if levels > max_depth:
        raise TooDeep("objects and lists nest %d levels deep; at most %d are accepted" % (levels, max_depth))


def loads(data: Text, max_depth: int) -> Any:
    """orjson.loads(data) for a text whose nesting was checked first;
    raises TooDeep or orjson.JSONDecodeError (both ValueErrors)."""
    check_depth(data, max_depth)
    return orjson.loads(data)
