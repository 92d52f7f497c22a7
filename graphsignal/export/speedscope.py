"""speedscope's JSON file format (its published file-format-schema.json):
one "sampled" profile per StackProfile (graphsignal.export.stacks), each
distinct stack one sample whose weight is its value, frames shared."""
from typing import Any, Dict, List, Mapping

import orjson

from graphsignal import __version__
from graphsignal.export import stacks as stacks_mod

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def title_of(payload: Mapping[str, Any]) -> str:
    ctx = payload.get("context") or {}
    parts = ["graphsignal"]
    if isinstance(ctx, dict):
        parts += [str(ctx[k]) for k in ("host.name", "instance.id") if ctx.get(k)]
    return " ".join(parts)


def render(payload: Mapping[str, Any], use_window: bool = False) -> bytes:
    """The speedscope file's bytes; ValueError when the payload has no
    profile frames to show."""
    profs = stacks_mod.profiles(payload, use_window)
    if not profs:
        raise ValueError("nothing to export: the payload has no profile frames%s"
                         % (" in its window" if use_window else ""))
    frames: List[Dict[str, str]] = []
    index: Dict[str, int] = {}
    out = []
    for p in profs:
        samples, weights = [], []
        for stack, value in p.stacks:
            ids = []
            for name in stack:
                i = index.get(name)
                if i is None:
                    i = index[name] = len(frames)
                    frames.append({"name": name})
                ids.append(i)
            samples.append(ids)
            weights.append(value)
        out.append({"type": "sampled", "name": p.title, "unit": p.unit, "startValue": 0,
                    "endValue": min(sum(weights), stacks_mod.I64_MAX), "samples": samples, "weights": weights})
    doc = {"$schema": SCHEMA, "name": title_of(payload), "exporter": "graphsignal-export %s" % __version__,
           "activeProfileIndex": 0, "shared": {"frames": frames}, "profiles": out}
    return orjson.dumps(doc)
