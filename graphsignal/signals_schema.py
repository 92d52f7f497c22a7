"""The JSON Schema of GET /signals, generated from the payload's TypedDicts
(graphsignal.signals_model) and shipped in the package as
graphsignal/schema/signals.schema.json.

Every object is closed (no key beyond its own), every key its TypedDict
requires is required, and a metric's stats are those of its type. The
committed file is what generate() writes (a test holds them equal); after
changing the model:

    python3 -m graphsignal.signals_schema --write

This module imports nothing of the sidecar; validating needs the
jsonschema package (the tests have it; the runtime does not).
"""
import argparse
import json
import os
import sys
import typing
from typing import Any, Dict, List, Optional

from graphsignal import signals_model

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema", "signals.schema.json")
DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID = "https://graphsignal.com/schemas/signals.schema.json"

_SCALARS: Dict[Any, Dict[str, Any]] = {str: {"type": "string"}, int: {"type": "integer"},
                                       float: {"type": "number"}, bool: {"type": "boolean"},
                                       type(None): {"type": "null"}}


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


class _Generator:
    def __init__(self) -> None:
        self.defs: Dict[str, Dict[str, Any]] = {}

    def of(self, t: Any) -> Dict[str, Any]:
        """The schema of one annotation."""
        if t is Any:
            return {}
        if t in _SCALARS:
            return dict(_SCALARS[t])
        if _is_typeddict(t):
            if t.__name__ not in self.defs:
                self.defs[t.__name__] = {}  # a placeholder while its keys are generated
                self.defs[t.__name__] = self.typeddict(t)
            return {"$ref": "#/$defs/" + t.__name__}
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Literal:
            return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
        if origin is typing.Union:
            subs = [self.of(a) for a in args]
            if all(list(s) == ["type"] for s in subs):  # Optional[float]: {"type": ["number", "null"]}
                return {"type": [s["type"] for s in subs]}
            return {"anyOf": subs}
        if origin is list:
            return {"type": "array", "items": self.of(args[0])}
        if origin is dict:
            if args[0] is not str:
                raise TypeError("JSON objects have string keys, not %r" % (args[0],))
            out: Dict[str, Any] = {"type": "object"}
            if args[1] is not Any:
                out["additionalProperties"] = self.of(args[1])
            return out
        raise TypeError("no JSON Schema for %r" % (t,))

    def typeddict(self, t: Any) -> Dict[str, Any]:
        hints = typing.get_type_hints(t)
        out: Dict[str, Any] = {"type": "object"}
        doc = (t.__doc__ or "").strip()
        if doc and not doc.startswith(t.__name__ + "("):  # not the default one TypedDict writes
            out["description"] = " ".join(doc.split())
        out["properties"] = {k: self.of(v) for k, v in hints.items()}
        out["required"] = [k for k in hints if k in t.__required_keys__]
        out["additionalProperties"] = False
        return out


def generate() -> Dict[str, Any]:
    """The schema of the Signals document, from graphsignal.signals_model."""
    g = _Generator()
    top = g.of(signals_model.Signals)
    name = top["$ref"].rsplit("/", 1)[1]
    root: Dict[str, Any] = {"$schema": DIALECT, "$id": ID, "title": "GET /signals"}
    root.update(g.defs.pop(name))
    root["$defs"] = dict(sorted(g.defs.items()))
    return root


def dumps(schema: Dict[str, Any]) -> str:
    """The file's text (keys in the model's order, so a diff of the file
    reads as a diff of the model)."""
    return json.dumps(schema, indent=2, ensure_ascii=True) + "\n"


def load() -> Dict[str, Any]:
    """The schema shipped with the package."""
    with open(PATH, encoding="utf-8") as f:
        schema: Dict[str, Any] = json.load(f)
    return schema


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m graphsignal.signals_schema", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write %s" % os.path.relpath(PATH))
    args = ap.parse_args(argv)
    text = dumps(generate())
    if not args.write:
        sys.stdout.write(text)
        return 0
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    with open(PATH, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
