"""The native rooms' shape (csrc/): each source file a room of at most 600
lines, each header opening with what it is, and no circle among the rooms
of the CUPTI library: a room (x.h with its x.cpp) includes only rooms
below it, so each can be built and tested with what it stands on (as
tests/support/cbuild.py's shim builds the translator, the NVTX path
interning and the parameter decoding without the rest)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CSRC = os.path.join(ROOT, "csrc")
CUPTI = os.path.join(CSRC, "cupti")
MAX_LINES = 600


def _sources():
    for d, _, files in os.walk(CSRC):
        for f in files:
            if f.endswith((".c", ".cpp", ".h")):
                yield os.path.join(d, f)


def _rooms():
    """room -> rooms it includes (csrc/cupti, x.h and x.cpp as one room)."""
    deps = {}
    for f in os.listdir(CUPTI):
        if not f.endswith((".h", ".cpp")):
            continue
        room = os.path.splitext(f)[0]
        with open(os.path.join(CUPTI, f)) as fh:
            text = fh.read()
        deps.setdefault(room, set()).update(
            os.path.splitext(inc)[0] for inc in re.findall(r'^#include "([^"/]+)"', text, re.M)
            if os.path.exists(os.path.join(CUPTI, inc)) and os.path.splitext(inc)[0] != room)
    return deps


def _cycle(deps):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(deps.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(deps):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def test_every_native_source_is_a_room_of_at_most_600_lines():
    long = {}
    for path in _sources():
        with open(path) as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            long[os.path.relpath(path, ROOT)] = n
    assert not long, long


def test_every_native_header_opens_with_what_it_is():
    bare = []
    for path in _sources():
        if path.endswith(".h"):
            with open(path) as f:
                first = f.readline()
            if not first.startswith(("//", "/*")):
                bare.append(os.path.relpath(path, ROOT))
    assert not bare, bare


def test_the_cupti_library_rooms_include_no_circle():
    deps = _rooms()
    assert {"nvtx_paths", "nvtx_stacks", "nvtx_flusher", "nvtx_gpu", "api_params", "api_table"} <= set(deps)
    assert _cycle(deps) is None, " -> ".join(_cycle(deps))


def test_the_rooms_below_stand_without_those_above():
    deps = _rooms()

    def below(room):
        seen, todo = set(), [room]
        while todo:
            for m in deps.get(todo.pop(), ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen

    # path interning: no ring, no stacks, no CUPTI collector
    assert below("nvtx_paths") <= {"nvtx_limits", "nvtx_text", "log"}
    # GPU attribution reads the stacks and adds to paths; the collection above tells it what to do
    assert "nvtx_ranges" not in below("nvtx_gpu") and "nvtx_flusher" not in below("nvtx_gpu")
    # parameter decoding: below the dispatcher, the table below both
    assert "api_callbacks" not in below("api_params")
    assert below("api_table") <= {"host_memory", "driver_api"}
    assert "api_callbacks" not in below("host_memory")


def test_a_circle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
