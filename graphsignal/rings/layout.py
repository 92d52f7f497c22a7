"""The numpy mirror of the ring layout in include/graphsignal/probe.h.

Constants come from the compiled helper (graphsignal._gsnative), which is
built from the header itself; the dtypes below are checked against the
offsets the C compiler reports (check_layout) before any ring is read.
"""
import numpy as np

from graphsignal import _gsnative  # type: ignore[attr-defined]  # compiled: no stubs

ffi = _gsnative.ffi
lib = _gsnative.lib

# the strings C writers and the sidecar agree on, as probe.h defines them
# (graphsignal.config repeats them for the supervisor, which starts the
# workload before any native module loads; tests hold the two equal)
SHM_DIR = ffi.string(lib.GRAPHSIGNAL_SHM_DIR).decode("ascii")
RING_PREFIX = ffi.string(lib.GRAPHSIGNAL_RING_PREFIX).decode("ascii")
RUN_ID_ENV = ffi.string(lib.GRAPHSIGNAL_RUN_ID_ENV).decode("ascii")
RING_CAPACITY_ENV = ffi.string(lib.GRAPHSIGNAL_RING_CAPACITY_ENV).decode("ascii")
RING_MARKER_SUFFIX = ffi.string(lib.GRAPHSIGNAL_RING_MARKER_SUFFIX).decode("ascii")
MAGIC = lib.GRAPHSIGNAL_RING_MAGIC
VERSION = lib.GRAPHSIGNAL_RING_VERSION
HEADER_SIZE = lib.GRAPHSIGNAL_RING_HEADER_SIZE
RECORD_SIZE = lib.GRAPHSIGNAL_RECORD_SIZE
DEFAULT_CAPACITY = lib.GRAPHSIGNAL_RING_DEFAULT_CAPACITY
DEFAULT_STRINGS = lib.GRAPHSIGNAL_RING_DEFAULT_STRINGS
FLAG_CLOSED = lib.GRAPHSIGNAL_RING_FLAG_CLOSED
MIN_DEFAULT_CAPACITY = lib.GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY
MIN_CAPACITY = lib.GRAPHSIGNAL_RING_MIN_CAPACITY
MAX_CAPACITY = lib.GRAPHSIGNAL_RING_MAX_CAPACITY
MAX_STRINGS = lib.GRAPHSIGNAL_RING_MAX_STRINGS
RING_NAME_ATTEMPTS = lib.GRAPHSIGNAL_RING_NAME_ATTEMPTS

KIND_TEST = lib.GRAPHSIGNAL_KIND_TEST
KIND_CUPTI = lib.GRAPHSIGNAL_KIND_CUPTI
KIND_PROBE = lib.GRAPHSIGNAL_KIND_PROBE
KIND_ROCM = lib.GRAPHSIGNAL_KIND_ROCM
KIND_NVTX = lib.GRAPHSIGNAL_KIND_NVTX
KIND_INTERPOSE = lib.GRAPHSIGNAL_KIND_INTERPOSE

REC_NAME = lib.GRAPHSIGNAL_REC_NAME
REC_KERNEL = lib.GRAPHSIGNAL_REC_KERNEL
REC_GRAPH = lib.GRAPHSIGNAL_REC_GRAPH
REC_MEMCPY = lib.GRAPHSIGNAL_REC_MEMCPY
REC_MEMSET = lib.GRAPHSIGNAL_REC_MEMSET
REC_SYNC = lib.GRAPHSIGNAL_REC_SYNC
REC_GAUGE = lib.GRAPHSIGNAL_REC_GAUGE
REC_COUNTER = lib.GRAPHSIGNAL_REC_COUNTER
REC_HISTOGRAM = lib.GRAPHSIGNAL_REC_HISTOGRAM
REC_PROFILE = lib.GRAPHSIGNAL_REC_PROFILE
REC_META = lib.GRAPHSIGNAL_REC_META
REC_DEVICE = lib.GRAPHSIGNAL_REC_DEVICE
REC_HISTOGRAM_AGG = lib.GRAPHSIGNAL_REC_HISTOGRAM_AGG
REC_MEMCPY_SAMPLED = lib.GRAPHSIGNAL_REC_MEMCPY_SAMPLED
REC_MEMSET_SAMPLED = lib.GRAPHSIGNAL_REC_MEMSET_SAMPLED
REC_SYNC_AGG = lib.GRAPHSIGNAL_REC_SYNC_AGG
REC_PROFILE_AGG = lib.GRAPHSIGNAL_REC_PROFILE_AGG
REC_KERNEL_COUNT = lib.GRAPHSIGNAL_REC_KERNEL_COUNT
REC_GRAPH_SAMPLED = lib.GRAPHSIGNAL_REC_GRAPH_SAMPLED
REC_MEMCPY_COUNT = lib.GRAPHSIGNAL_REC_MEMCPY_COUNT
REC_MEMSET_COUNT = lib.GRAPHSIGNAL_REC_MEMSET_COUNT
REC_TEST = lib.GRAPHSIGNAL_REC_TEST

NAME_PLAIN = lib.GRAPHSIGNAL_NAME_PLAIN
NAME_INSTRUMENT = lib.GRAPHSIGNAL_NAME_INSTRUMENT
META_CUDA_GRAPH_TRACE_MODE = lib.GRAPHSIGNAL_META_CUDA_GRAPH_TRACE_MODE
AGG_COUNT_SUM = lib.GRAPHSIGNAL_AGG_COUNT_SUM
AGG_MIN_MAX = lib.GRAPHSIGNAL_AGG_MIN_MAX
AGG_BIN = lib.GRAPHSIGNAL_AGG_BIN
HIST_SUB_BITS = lib.GRAPHSIGNAL_HIST_SUB_BITS
HIST_NBINS = lib.GRAPHSIGNAL_HIST_NBINS

HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u8"),
        ("version", "<u4"),
        ("header_size", "<u4"),
        ("record_size", "<u4"),
        ("kind", "<u4"),
        ("capacity", "<u8"),
        ("strings_offset", "<u8"),
        ("strings_size", "<u8"),
        ("writer_pid", "<u8"),
        ("start_ns", "<u8"),
        ("write_index", "<u8"),
        ("read_hint", "<u8"),  # the writers' copy of read_index (probe.h's graphsignal_ring_reserve)
        ("pad_w", "<u8", (6,)),
        ("read_index", "<u8"),
        ("pad_r", "<u8", (7,)),
        ("dropped", "<u8"),
        ("strings_used", "<u8"),
        ("strings_dropped", "<u8"),
        ("next_name_id", "<u8"),
        ("flags", "<u8"),
        ("pad_c", "<u8", (3,)),
    ]
)

RECORD_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("type", "u1"),
        ("sub", "u1"),
        ("device", "<u2"),
        ("name_id", "<u4"),
        ("value", "<u8"),
        ("extra", "<u8"),
    ]
)

# Order of gs_layout()'s output (see _native_build.GS_FIELDS).
_LAYOUT_FIELDS = (
    [("sizeof", "header"), ("sizeof", "record")]
    + [
        ("header", f)
        for f in (
            "magic version header_size record_size kind capacity strings_offset strings_size "
            "writer_pid start_ns write_index read_hint read_index dropped strings_used strings_dropped "
            "next_name_id flags"
        ).split()
    ]
    + [("record", f) for f in "seq type sub device name_id value extra".split()]
)


class LayoutMismatch(RuntimeError):
    pass


def check_layout() -> None:
    """Raises LayoutMismatch if the numpy dtypes disagree with the C layout."""
    out = ffi.new("uint64_t[]", 64)
    n = lib.gs_layout(out, 64)
    if n != len(_LAYOUT_FIELDS):
        raise LayoutMismatch("helper reports %d layout fields, expected %d" % (n, len(_LAYOUT_FIELDS)))
    for i, (what, field) in enumerate(_LAYOUT_FIELDS):
        c = int(out[i])
        if what == "sizeof":
            py = (HEADER_DTYPE if field == "header" else RECORD_DTYPE).itemsize
        else:
            py = (HEADER_DTYPE if what == "header" else RECORD_DTYPE).fields[field][1]  # type: ignore[index]
        if c != py:
            raise LayoutMismatch("%s %s: C says %d, numpy says %d" % (what, field, c, py))
    if HEADER_DTYPE.itemsize != HEADER_SIZE or RECORD_DTYPE.itemsize != RECORD_SIZE:
        raise LayoutMismatch("header/record size constants disagree with the dtypes")


check_layout()

HEADER_OFFSETS = {name: HEADER_DTYPE.fields[name][1] for name in HEADER_DTYPE.names}  # type: ignore[index,union-attr]
