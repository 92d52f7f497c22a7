"""graphsignal.jsonsafe: the nesting of a JSON text read from the text
itself (checked against the parsed value for texts whose strings are full
of brackets, quotes and backslashes), and loads() refusing what nests
deeper than allowed before the parser sees it (orjson 3.8 crashes with
SIGSEGV on ~150,000 levels)."""
import json
import random

import subprocess
import sys

import orjson
import pytest

from graphsignal import jsonsafe
from graphsignal.fleet.ingest import MAX_DEPTH, BadBody, decode
from graphsignal.jsonsafe import depth


def _levels(v):
    if isinstance(v, dict):
        return 1 + max([_levels(x) for x in v.values()] + [0])
    if isinstance(v, list):
        return 1 + max([_levels(x) for x in v] + [0])
    return 0


TRICKY = '[]{}"\\\\ab\n\t\u00e9\u2028/'


def _value(rng, d):
    r = rng.random()
    if d > 9 or r < 0.3:
        if rng.random() < 0.7:
            return "".join(rng.choice(TRICKY) for _ in range(rng.randrange(7)))
        return rng.randrange(-5, 100)
    if r < 0.65:
        return [_value(rng, d + 1) for _ in range(rng.randrange(4))]
    return {"".join(rng.choice(TRICKY) for _ in range(rng.randrange(4))): _value(rng, d + 1)
            for _ in range(rng.randrange(4))}


def test_depth_of_the_text_is_the_depth_of_the_value():
    rng = random.Random(7)
    for _ in range(3000):
        v = _value(rng, 0)
        want = _levels(v)
        for text in (orjson.dumps(v), json.dumps(v).encode(), json.dumps(v, ensure_ascii=True, indent=1).encode()):
            assert depth(text) == want, text


def test_decode_refuses_more_than_max_depth_and_takes_max_depth():
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert decode(ok, None) is not None
    try:
        decode(b"[" + ok + b"]", None)
    except BadBody as e:
        assert e.status == 400 and str(MAX_DEPTH) in str(e)
    else:
        raise AssertionError("33 levels were accepted")


DEEP = b"[" * 200_000 + b"]" * 200_000


def test_loads_refuses_deep_nesting_before_parsing_it():
    with pytest.raises(jsonsafe.TooDeep, match="200000 levels"):
        jsonsafe.loads(DEEP, 32)
    assert jsonsafe.loads(b'{"a": [[1]], "b": "[[[[[[[["}', 3) == {"a": [[1]], "b": "[[[[[[[["}


def test_decode_answers_a_crashing_depth_with_400_in_a_process_that_lives_on():
    code = ("from graphsignal.fleet.ingest import decode, BadBody\n"
            "try:\n    decode(b'[' * 200000 + b']' * 200000, None)\n"
            "except BadBody as e:\n    print(e.status, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("400 body: objects and lists nest 200000"), out


def test_an_invalid_text_is_never_counted_shallower_than_a_parser_would_go():
    # a stray quote or backslash after the deep part cannot hide it
    for tail in (b'"', b'\\', b'\\"', b'"]]]'):
        assert depth(b"[" * 500 + tail) >= 500
