"""The import graph keeps its layers: the fleet server (graphsignal.fleet,
graphsignal.cli.server) reaches nothing in the sidecar, the sidecar
nothing in graphsignal-top, and the data model (the series types, the
window maths) nothing of names or presentation. /metrics, OTLP, the
uploader, their periodic driver and the payload read series through
their views only (graphsignal.signals_model), never the store or a
series class; /metrics' rooms each use only the rooms below
it (labels, buckets, lines, layout, cache). Every import counts: inside
functions and under TYPE_CHECKING too."""
import ast
import functools
import os

import pytest

import graphsignal

PKG = os.path.dirname(graphsignal.__file__)

# (modules, prefix: what they may not import)
RULES = [
    ("graphsignal.fleet", "graphsignal.sidecar"),
    ("graphsignal.cli.server", "graphsignal.sidecar"),
    ("graphsignal.sidecar", "graphsignal.top"),
    ("graphsignal.sidecar.series", "graphsignal.naming"),
    ("graphsignal.windowmath", "graphsignal.naming"),
    ("graphsignal.windowmath", "graphsignal.sidecar"),
    ("graphsignal.windowmath", "graphsignal.fleet"),
    ("graphsignal.naming", "graphsignal.sidecar"),
    ("graphsignal.naming", "graphsignal.top"),
    ("graphsignal.naming", "graphsignal.fleet"),
    ("graphsignal.httpserve", "graphsignal.sidecar"),
    ("graphsignal.httpserve", "graphsignal.fleet"),
    # graphsignal-diff reads payloads, never a store, a live sidecar or the fleet
    ("graphsignal.diff", "graphsignal.sidecar"),
    ("graphsignal.diff", "graphsignal.fleet"),
    ("graphsignal.diff", "graphsignal.top"),
    # the supervisor (the workload's environment, the sidecar's start among it) runs the sidecar as
    # another process and starts the workload before any numpy module loads
    ("graphsignal.launch", "graphsignal.sidecar"),
    ("graphsignal.launch", "graphsignal.histo"),
    ("graphsignal.launch", "graphsignal.windowmath"),
    ("graphsignal.launch", "graphsignal.rings.layout"),
    ("graphsignal.launch", "graphsignal.rings.reader"),
    # graphsignal-run --check: the standard library and graphsignal.launch
    ("graphsignal.cli.doctor", "graphsignal.sidecar"),
    ("graphsignal.cli.doctor", "graphsignal.histo"),
    # the sidecar's feed captures the console while the store (numpy) still imports
    ("graphsignal.sidecar.feed", "graphsignal.sidecar.store"),
    ("graphsignal.sidecar.feed", "graphsignal.histo"),
]
# the readers of series views
for _reader in ("graphsignal.sidecar.exposition", "graphsignal.sidecar.otlp", "graphsignal.sidecar.recorded",
                "graphsignal.sidecar.upload", "graphsignal.sidecar.payload", "graphsignal.sidecar.periodic"):
    RULES += [(_reader, "graphsignal.sidecar.series"), (_reader, "graphsignal.sidecar.store")]
# /metrics' rooms, lowest first: each reaches none above it
EXPOSITION = ["graphsignal.sidecar.exposition." + m for m in ("labels", "buckets", "lines", "layout", "cache")]
RULES += [(low, high) for i, low in enumerate(EXPOSITION) for high in EXPOSITION[i + 1:]]


def imports_of(source, module):
    """Every module an import in `source` names (a `from a import b` names
    a.b as well, which may be a module), relative imports resolved against
    `module`."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[:-node.level]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update("%s.%s" % (base, a.name) for a in node.names)
    return out


def modules():
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                yield rel[:-len(".__init__")] if rel.endswith(".__init__") else rel, path


def _under(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def test_the_walker_sees_every_kind_of_import():
    src = ("import graphsignal.top.state\n"
           "from graphsignal import top\n"
           "from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    from graphsignal.sidecar.store import MetricStore\n"
           "def f():\n    from ..sidecar import series\n")
    got = imports_of(src, "graphsignal.fleet.x")
    assert {"graphsignal.top.state", "graphsignal.top", "graphsignal.sidecar.store",
            "graphsignal.sidecar.series"} <= got


@functools.lru_cache(maxsize=None)
def graph():
    """{module: the package's modules it imports}."""
    paths = dict(modules())
    out = {}
    for name, path in paths.items():
        with open(path, encoding="utf-8") as f:
            out[name] = {i for i in imports_of(f.read(), name) if i in paths}
    return out


def reach(g, start):
    """{module reached: the module that imports it on the way}."""
    seen, todo = {start: None}, [start]
    while todo:
        m = todo.pop()
        for i in g.get(m, ()):
            if i not in seen:
                seen[i] = m
                todo.append(i)
    return seen


@pytest.mark.parametrize("rule", RULES, ids=["%s-x->%s" % r for r in RULES])
def test_no_import_crosses_a_layer_not_even_through_another_module(rule):
    scope, banned = rule
    g = graph()
    starts = [m for m in g if _under(m, scope)]
    assert starts, scope
    bad = []
    for m in starts:
        seen = reach(g, m)
        for i in sorted(seen):
            if _under(i, banned):
                path = [i]
                while seen[path[-1]] is not None:
                    path.append(seen[path[-1]])
                bad.append(" -> ".join(reversed(path)))
    assert bad == []
