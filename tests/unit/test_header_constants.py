"""Every constant C writers and the sidecar share is defined once, in
include/graphsignal/probe.h: the sidecar reads it through the compiled
helper (graphsignal.rings.layout), the supervisor from the header's text
(graphsignal.rings.header). Walks the header's #defines itself, so a new
record type or ring constant the helper does not carry fails here."""
import os
import re
import subprocess
import sys

import pytest

from graphsignal import _native_build, envcheck
from graphsignal.rings import header
from graphsignal.rings import layout as L

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE_H = os.path.join(ROOT, "include", "graphsignal", "probe.h")

# what rings and their records are made of: every #define of these families
SHARED = re.compile(r"^#define[ \t]+(GRAPHSIGNAL_(?:RING|RECORD|REC|KIND|AGG|HIST|META|NAME|SHM|RUN_ID)_?\w*)[ \t]",
                    re.M)
C_ONLY = {
    "GRAPHSIGNAL_RING_ROOM_UNKNOWN",  # graphsignal_ring_room's answer for a statvfs that failed, never in a ring
}


def shared_names():
    with open(PROBE_H) as f:
        names = SHARED.findall(f.read())
    return sorted(n for n in names if not n.endswith("_") and n not in C_ONLY)  # a trailing _: the header's own


def helper_value(name):
    v = getattr(L.lib, name)
    return v if isinstance(v, int) else L.ffi.string(v).decode("ascii")


def test_the_walk_finds_every_record_type():
    names = shared_names()
    for rec in ("REC_MEMCPY_SAMPLED", "REC_MEMSET_SAMPLED", "REC_SYNC_AGG", "REC_KERNEL", "REC_TEST"):
        assert "GRAPHSIGNAL_" + rec in names
    assert "GRAPHSIGNAL_SHM_DIR" in names and "GRAPHSIGNAL_RING_MAX_CAPACITY" in names
    assert len(names) > 40


@pytest.mark.parametrize("name", shared_names())
def test_the_helper_carries_every_shared_constant_with_the_headers_value(name):
    assert name in _native_build.CONSTANTS + _native_build.STRINGS
    # the header's text as C reads it, and as the compiler built it into the helper
    assert header.constants()[name] == helper_value(name)


def test_the_helper_carries_nothing_the_header_does_not_define():
    with open(PROBE_H) as f:
        defined = set(re.findall(r"^#define[ \t]+(GRAPHSIGNAL_\w+)", f.read(), re.M))
    assert set(_native_build.CONSTANTS + _native_build.STRINGS) <= defined


def test_record_types_are_distinct_and_fit_the_type_byte():
    types = {n: header.constants()[n] for n in shared_names() if n.startswith("GRAPHSIGNAL_REC_")}
    assert len(set(types.values())) == len(types)
    assert all(isinstance(t, int) and 0 < t < 256 for t in types.values())
    assert L.REC_MEMCPY_SAMPLED == types["GRAPHSIGNAL_REC_MEMCPY_SAMPLED"]


def test_the_header_reader_reads_the_forms_the_header_uses():
    text = "\n".join([
        '#define GRAPHSIGNAL_A 0x31474e4952534721ULL /* "!GSRING1" */',
        "#define GRAPHSIGNAL_B (64u << 20) /* bytes */",
        "#define GRAPHSIGNAL_C 200u    /* used by tests",
        "                                 and benchmarks */",
        '#define GRAPHSIGNAL_D "/dev/shm"',
        "#define GRAPHSIGNAL_E(x) (x)",
        "#define GRAPHSIGNAL_F ((int64_t)(~(uint64_t)0 >> 1))",
        "#define GRAPHSIGNAL_G 5",
    ])
    assert header.parse(text) == {"GRAPHSIGNAL_A": 0x31474E4952534721, "GRAPHSIGNAL_B": 64 << 20,
                                  "GRAPHSIGNAL_C": 200, "GRAPHSIGNAL_D": "/dev/shm", "GRAPHSIGNAL_G": 5}


def test_envcheck_holds_the_ring_capacity_to_the_headers_bounds():
    kind, lo, hi = envcheck.NUMERIC[L.RING_CAPACITY_ENV][:3]
    assert (kind, lo, hi) == (int, L.MIN_CAPACITY, L.MAX_CAPACITY)
    assert envcheck.parse(L.RING_CAPACITY_ENV, str(L.MIN_CAPACITY)) == (L.MIN_CAPACITY, None)
    assert envcheck.parse(L.RING_CAPACITY_ENV, str(L.MAX_CAPACITY)) == (L.MAX_CAPACITY, None)
    assert envcheck.parse(L.RING_CAPACITY_ENV, str(L.MIN_CAPACITY - 1))[0] is None
    assert envcheck.parse(L.RING_CAPACITY_ENV, str(L.MAX_CAPACITY + 1))[0] is None


def test_the_supervisors_reader_loads_no_native_module():
    code = ("import sys; from graphsignal import envcheck; "
            "print(sorted(m for m in ('numpy', 'cffi', '_cffi_backend', 'graphsignal._gsnative') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_refused_instrument_says_the_headers_tag_limit():
    from graphsignal import probes

    limit = header.integer("GRAPHSIGNAL_PROBE_MAX_TAGS")  # the C code refuses one more, whatever this reads
    probes.gauge("header_tags_ok", tags={"k%d" % i: "v" for i in range(limit)})
    with pytest.raises(ValueError, match=r"tags: %d, at most %d\)" % (limit + 1, limit)):
        probes.gauge("header_tags_over", tags={"k%d" % i: "v" for i in range(limit + 1)})
