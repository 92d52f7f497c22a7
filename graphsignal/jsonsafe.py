"""JSON from others (an upload body, a server's answer, a payload file)
parsed without letting its nesting reach the parser.

orjson (3.8 and older, still allowed by our requirements) recurses once
per level with no limit of its own: a body of 150,000 '[' crashes the
process with SIGSEGV, not an exception. loads() measures the nesting on
the text first (depth(): no recursion, vectorized) and refuses anything
deeper than max_depth with TooDeep, a ValueError.
"""
from typing import Any, Union

import orjson

_OPEN = (b"[", b"{")


class TooDeep(ValueError):
    """The text nests objects and lists deeper than allowed."""


_tables = None


def _depth_tables():
    global _tables
    if _tables is None:
        import numpy as np

        step = np.zeros(256, np.int8)
        step[list(b"[{")] = 1
        step[list(b"]}")] = -1
        _tables = (bytes(b for b in range(256) if b not in b'[]{}"'), step)
    return _tables


def depth(data):
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
    import numpy as np

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


def check_depth(data: Union[bytes, bytearray, memoryview], max_depth: int) -> None:
    """Raises TooDeep when data (bytes) nests deeper than max_depth."""
    data = bytes(data) if not isinstance(data, bytes) else data
    if sum(data.count(c) for c in _OPEN) <= max_depth:
        return  # cannot nest deeper than it opens: no need to look closer
    levels = depth(data)
    if levels > max_depth:
        raise TooDeep("objects and lists nest %d levels deep; at most %d are accepted" % (levels, max_depth))


def loads(data: Union[bytes, bytearray, memoryview], max_depth: int) -> Any:
    """orjson.loads(data) for a text whose nesting was checked first;
    raises TooDeep or orjson.JSONDecodeError (both ValueErrors)."""
    check_depth(data, max_depth)
    return orjson.loads(data)
