"""Folded stacks, the input of flamegraph.pl and inferno: one line per
stack, frames root first joined by ';', a space, the value (an integer,
nanoseconds). Every StackProfile (graphsignal.export.stacks) is one root
frame named by its title, so a run's GPU activity, its NVTX ranges and
its probe profiles sit side by side in one graph. A frame's ';' becomes
':' and line breaks become spaces (the format has no escapes)."""
from typing import Any, Mapping

from graphsignal.export import stacks as stacks_mod


def _frame(name: str) -> str:
    return name.replace(";", ":").replace("\r", " ").replace("\n", " ").strip() or "(unnamed)"


def render(payload: Mapping[str, Any], use_window: bool = False) -> bytes:
    """The folded stacks' bytes; ValueError when the payload has no
    profile frames."""
    profs = stacks_mod.profiles(payload, use_window)
    lines = []
    for p in profs:
        for stack, value in p.stacks:
            lines.append("%s %d" % (";".join(_frame(f) for f in (p.title,) + stack), value))
    if not lines:
        raise ValueError("nothing to export: the payload has no profile frames%s"
                         % (" in its window" if use_window else ""))
    return ("\n".join(lines) + "\n").encode("utf-8", "replace")
