"""The tree's layers, held by a walk over every import (at module level,
inside functions and under TYPE_CHECKING alike):

  base      graphsignal/*.py (config, channel, naming, window maths, the
            signals model, histo, ...), rings/
  sources   sources/ (what the sidecar polls)
  rooms     launch/ (the supervisor), sidecar/, fleet/ (graphsignal-server),
            top/ (graphsignal-top), export/ (graphsignal-export), diff/
            (graphsignal-diff): each may use the layers below, none another
            room
  commands  cli/ (cli/doctor.py too: graphsignal-run --check), which wire
            rooms up

A lower layer never imports a higher one, and no room imports another."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "graphsignal")

ROOMS = ("graphsignal.launch", "graphsignal.sidecar", "graphsignal.fleet", "graphsignal.top", "graphsignal.export",
         "graphsignal.diff")
COMMANDS = ("graphsignal.cli",)


def modules():
    """{dotted module name: path} of the package."""
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = os.path.join(dirpath, f)
    return out


def imports_of(name, path):
    """Every graphsignal module `name` imports, with its line."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append((base, node.lineno))
            out += [(base + "." + a.name, node.lineno) for a in node.names]
    return [(m, line) for m, line in out if m == "graphsignal" or m.startswith("graphsignal.")]


def under(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def layer(module, known):
    """(rank, room) of a module: 0 base, 1 sources, 2 a room, 3 commands;
    None for a name that is no module of ours (an attribute imported
    with `from graphsignal.x import y`)."""
    if module not in known:
        return None
    if any(under(module, c) for c in COMMANDS):
        return 3, None
    for room in ROOMS:
        if under(module, room):
            return 2, room
    if under(module, "graphsignal.sources"):
        return 1, None
    return 0, None


def violations():
    known = modules()
    bad = []
    for name, path in sorted(known.items()):
        here = layer(name, known)
        for target, line in imports_of(name, path):
            there = layer(target, known)
            if there is None or target == name:
                continue
            if there[0] > here[0] or (there[0] == here[0] == 2 and there[1] != here[1]):
                bad.append("%s:%d imports %s" % (os.path.relpath(path, ROOT), line, target))
    return bad


def test_no_import_goes_up_a_layer_or_across_rooms():
    assert violations() == []


def test_the_walk_sees_what_it_must():
    known = modules()
    # the walk finds imports at every depth, TYPE_CHECKING ones included
    found = dict(imports_of("graphsignal.sidecar.process", known["graphsignal.sidecar.process"]))
    assert "graphsignal.sidecar.store" in found  # imported inside a method
    assert layer("graphsignal.cli.server", known) == (3, None)
    assert layer("graphsignal.fleet.app", known) == (2, "graphsignal.fleet")
    # a room's own package is the room's: /metrics' rooms (sidecar/exposition/) are the sidecar's
    for room in ("labels", "buckets", "lines", "layout", "cache"):
        assert layer("graphsignal.sidecar.exposition." + room, known) == (2, "graphsignal.sidecar")
    assert layer("graphsignal.sidecar.exposition", known) == (2, "graphsignal.sidecar")
    assert layer("graphsignal.sidecar.recorded", known) == (2, "graphsignal.sidecar")
    assert layer("graphsignal.jsonsafe", known) == (0, None)  # dumps lives there, below every room
    assert layer("graphsignal.config", known) == (0, None)
    # the rooms split along their seams keep their layers
    assert layer("graphsignal.diff.compare", known) == (2, "graphsignal.diff")
    assert layer("graphsignal.diff.collections", known) == (2, "graphsignal.diff")
    assert layer("graphsignal.cli.doctor", known) == (3, None)
    assert layer("graphsignal.config_values", known) == (0, None)
    assert layer("graphsignal.launch.workload_env", known) == (2, "graphsignal.launch")
    assert layer("graphsignal.launch.sidecar_start", known) == (2, "graphsignal.launch")
    for name in ("feed", "grouping", "refused"):
        assert layer("graphsignal.sidecar." + name, known) == (2, "graphsignal.sidecar")
    for name in ("tables", "text"):
        assert layer("graphsignal.top." + name, known) == (2, "graphsignal.top")
    # the upload's model and its generated checker are the base's (the sidecar and the fleet both read them);
    # the exporters' driver is the sidecar's, the fleet's front its own rooms
    for name in ("upload_model", "typecheck"):
        assert layer("graphsignal." + name, known) == (0, None)
    assert layer("graphsignal.sidecar.periodic", known) == (2, "graphsignal.sidecar")
    for name in ("framing", "scheduler", "handler", "rows"):
        assert layer("graphsignal.fleet." + name, known) == (2, "graphsignal.fleet")
    for name in ("prometheus_text", "nvml_library"):
        assert layer("graphsignal.sources." + name, known) == (1, None)
    # and a rule it must enforce: a room importing another is reported
    assert layer("graphsignal.sidecar.store", known)[1] != layer("graphsignal.top.state", known)[1]
