"""The import graph of graphsignal's own modules, read from the source (no
module is imported): every import statement counts, inside functions and
under `if TYPE_CHECKING:` too, and importing a module imports the packages
above it."""
import ast
import collections
import os
from typing import Dict, Iterator, List, Optional, Set

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "graphsignal"


def path_of(module: str) -> Optional[str]:
    """The source file of a graphsignal module or package, or None."""
    base = os.path.join(ROOT, *module.split("."))
    for p in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(p):
            return p
    return None


def _parents(module: str) -> Iterator[str]:
    parts = module.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def imports_of(module: str) -> Set[str]:
    """The graphsignal modules `module` imports directly (and the packages
    above them, whose __init__ runs first)."""
    path = path_of(module)
    assert path is not None, module
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    out: Set[str] = set()
    for node in ast.walk(tree):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base]
            # `from pkg import mod` imports pkg.mod when it is a module
            names += [base + "." + a.name for a in node.names if path_of(base + "." + a.name)]
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                while name and path_of(name) is None:  # `import graphsignal.x.attr`: the module is graphsignal.x
                    name = name.rpartition(".")[0]
                if name:
                    out.add(name)
                    out.update(_parents(name))
    out.discard(module)
    return out


def graph(start: List[str]) -> Dict[str, Set[str]]:
    """{module: its direct imports} of every module reachable from start."""
    out: Dict[str, Set[str]] = {}
    todo = list(start)
    while todo:
        m = todo.pop()
        if m in out:
            continue
        out[m] = imports_of(m)
        todo.extend(out[m] - set(out))
    return out


def reachable(module: str) -> Set[str]:
    """Every graphsignal module importing `module` imports, itself left out."""
    return set(graph([module])) - {module}


def cycle_through(g: Dict[str, Set[str]], module: str) -> Optional[List[str]]:
    """A shortest import path from module back to itself in g, or None."""
    prev: Dict[str, str] = {}
    todo = collections.deque([module])
    seen = {module}
    while todo:
        m = todo.popleft()
        for n in sorted(g.get(m, ())):
            if n == module:
                path = [m]
                while path[-1] != module:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [module]
            if n not in seen:
                seen.add(n)
                prev[n] = m
                todo.append(n)
    return None
