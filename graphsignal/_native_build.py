"""cffi build script for graphsignal._gsnative, the sidecar's native helper.

The helper is compiled from include/graphsignal/probe.h itself, so the ring
layout and every record constant exist once, in C. Python gets the constants
from this module and checks its numpy dtype against the offsets reported
here (see graphsignal.rings.layout).
"""
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE_CANDIDATES = [
    os.path.join(HERE, "..", "include"),  # source tree
    os.path.join(HERE, "_include"),  # installed copy
]

CONSTANTS = """
GRAPHSIGNAL_RING_MAGIC GRAPHSIGNAL_RING_VERSION GRAPHSIGNAL_RING_HEADER_SIZE
GRAPHSIGNAL_RECORD_SIZE GRAPHSIGNAL_RING_DEFAULT_CAPACITY GRAPHSIGNAL_RING_DEFAULT_STRINGS
GRAPHSIGNAL_RING_FLAG_CLOSED GRAPHSIGNAL_RING_MIN_DEFAULT_CAPACITY GRAPHSIGNAL_RING_MIN_CAPACITY
GRAPHSIGNAL_RING_MAX_CAPACITY GRAPHSIGNAL_RING_MAX_STRINGS GRAPHSIGNAL_RING_FLOOR_DIV GRAPHSIGNAL_RING_SHARE_DIV
GRAPHSIGNAL_RING_NAME_ATTEMPTS
GRAPHSIGNAL_KIND_TEST GRAPHSIGNAL_KIND_CUPTI GRAPHSIGNAL_KIND_PROBE GRAPHSIGNAL_KIND_ROCM GRAPHSIGNAL_KIND_NVTX
GRAPHSIGNAL_KIND_INTERPOSE
GRAPHSIGNAL_REC_NAME GRAPHSIGNAL_REC_KERNEL GRAPHSIGNAL_REC_GRAPH GRAPHSIGNAL_REC_MEMCPY
GRAPHSIGNAL_REC_MEMSET GRAPHSIGNAL_REC_SYNC GRAPHSIGNAL_REC_GAUGE GRAPHSIGNAL_REC_COUNTER
GRAPHSIGNAL_REC_HISTOGRAM GRAPHSIGNAL_REC_PROFILE GRAPHSIGNAL_REC_META GRAPHSIGNAL_REC_DEVICE
GRAPHSIGNAL_REC_HISTOGRAM_AGG GRAPHSIGNAL_REC_MEMCPY_SAMPLED GRAPHSIGNAL_REC_MEMSET_SAMPLED
GRAPHSIGNAL_REC_SYNC_AGG GRAPHSIGNAL_REC_PROFILE_AGG GRAPHSIGNAL_REC_TEST
GRAPHSIGNAL_REC_KERNEL_COUNT GRAPHSIGNAL_REC_GRAPH_SAMPLED GRAPHSIGNAL_REC_MEMCPY_COUNT
GRAPHSIGNAL_REC_MEMSET_COUNT
GRAPHSIGNAL_NAME_PLAIN GRAPHSIGNAL_NAME_INSTRUMENT GRAPHSIGNAL_META_CUDA_GRAPH_TRACE_MODE
GRAPHSIGNAL_AGG_COUNT_SUM GRAPHSIGNAL_AGG_MIN_MAX GRAPHSIGNAL_AGG_BIN GRAPHSIGNAL_HIST_SUB_BITS GRAPHSIGNAL_HIST_NBINS
""".split()

# the header's strings C writers and the sidecar agree on
STRINGS = """
GRAPHSIGNAL_SHM_DIR GRAPHSIGNAL_RING_PREFIX GRAPHSIGNAL_RUN_ID_ENV GRAPHSIGNAL_RING_CAPACITY_ENV
GRAPHSIGNAL_RING_MARKER_SUFFIX
""".split()

CDEF = "\n".join(["#define %s ..." % c for c in CONSTANTS]
                 + ["static const char* const %s;" % c for c in STRINGS]) + """
/* sizes and offsets as the C compiler lays them out; see layout.py */
int gs_layout(uint64_t* out, int n);
/* acquire load / release store for the reader's indices */
uint64_t gs_load_acquire(void* p);
void gs_store_release(void* p, uint64_t v);
/* number of consecutive committed slots from index start, below end; slots
   and mask are the reader's own (validated at attach), never the header's */
uint64_t gs_committed(void* slots, uint64_t mask, uint64_t start, uint64_t end);
/* the writers' default ring capacity for this /dev/shm, and its string area */
uint64_t graphsignal_ring_default_capacity(void);
uint64_t graphsignal_ring_strings_for(uint64_t capacity);
/* writer side, for tests and benchmarks (the same code C writers run) */
void* gs_ring_open(const char* name, uint32_t kind, uint64_t capacity, uint64_t strings_size, size_t* out_size);
int gs_ring_write(void* h, uint8_t type, uint8_t sub, uint16_t device, uint32_t name_id, uint64_t value,
                  uint64_t extra);
void* gs_ring_reserve(void* h, uint64_t* index);
void gs_ring_fill(void* slot, uint8_t type, uint8_t sub, uint16_t device, uint32_t name_id, uint64_t value,
                  uint64_t extra);
void gs_ring_commit(void* slot, uint64_t index);
int gs_ring_send_name(void* h, uint32_t id, uint8_t kind, const char* bytes, size_t len);
uint32_t gs_ring_new_name_id(void* h);
void gs_ring_close(void* h);
int gs_munmap(void* p, size_t size);
/* STRINGS by number (tests/integration/test_config.py): 0 GRAPHSIGNAL_SHM_DIR, 1 GRAPHSIGNAL_RING_PREFIX,
   2 GRAPHSIGNAL_RUN_ID_ENV, 3 GRAPHSIGNAL_RING_CAPACITY_ENV; NULL past them */
const char* gs_header_string(int which);

/* probes (graphsignal.probes): the header's own functions */
typedef enum { GRAPHSIGNAL_GAUGE, GRAPHSIGNAL_COUNTER, GRAPHSIGNAL_HISTOGRAM, GRAPHSIGNAL_PROFILE, ... }
    graphsignal_probe_type;
typedef struct graphsignal_probe_entry graphsignal_probe_entry;
graphsignal_probe_entry* graphsignal_probe_register(const char* name, graphsignal_probe_type type,
                                                    const char** tag_keys, const char** tag_values, size_t ntags);
void graphsignal_record(graphsignal_probe_entry* e, uint64_t value);
void graphsignal_add(graphsignal_probe_entry* e, uint64_t delta);
void graphsignal_set(graphsignal_probe_entry* e, double value);
void graphsignal_profile_add_by_name(graphsignal_probe_entry* e, const char* frame_name, uint64_t value);
int graphsignal_probe_type_of(const graphsignal_probe_entry* e);
uint64_t graphsignal_now_ns(void);
"""

SOURCE = r"""
#include <graphsignal/probe.h>

const char* gs_header_string(int which) {
  switch (which) {
    case 0: return GRAPHSIGNAL_SHM_DIR;
    case 1: return GRAPHSIGNAL_RING_PREFIX;
    case 2: return GRAPHSIGNAL_RUN_ID_ENV;
    case 3: return GRAPHSIGNAL_RING_CAPACITY_ENV;
    default: return (const char*)0;
  }
}

#define GS_FIELDS(X) \
  X(sizeof(graphsignal_ring_header)) \
  X(sizeof(graphsignal_ring_record)) \
  X(offsetof(graphsignal_ring_header, magic)) \
  X(offsetof(graphsignal_ring_header, version)) \
  X(offsetof(graphsignal_ring_header, header_size)) \
  X(offsetof(graphsignal_ring_header, record_size)) \
  X(offsetof(graphsignal_ring_header, kind)) \
  X(offsetof(graphsignal_ring_header, capacity)) \
  X(offsetof(graphsignal_ring_header, strings_offset)) \
  X(offsetof(graphsignal_ring_header, strings_size)) \
  X(offsetof(graphsignal_ring_header, writer_pid)) \
  X(offsetof(graphsignal_ring_header, start_ns)) \
  X(offsetof(graphsignal_ring_header, write_index)) \
  X(offsetof(graphsignal_ring_header, read_hint)) \
  X(offsetof(graphsignal_ring_header, read_index)) \
  X(offsetof(graphsignal_ring_header, dropped)) \
  X(offsetof(graphsignal_ring_header, strings_used)) \
  X(offsetof(graphsignal_ring_header, strings_dropped)) \
  X(offsetof(graphsignal_ring_header, next_name_id)) \
  X(offsetof(graphsignal_ring_header, flags)) \
  X(offsetof(graphsignal_ring_record, seq)) \
  X(offsetof(graphsignal_ring_record, type)) \
  X(offsetof(graphsignal_ring_record, sub)) \
  X(offsetof(graphsignal_ring_record, device)) \
  X(offsetof(graphsignal_ring_record, name_id)) \
  X(offsetof(graphsignal_ring_record, value)) \
  X(offsetof(graphsignal_ring_record, extra))

static int gs_layout(uint64_t* out, int n) {
  int i = 0;
#define GS_PUT(v) if (i < n) out[i] = (uint64_t)(v); i++;
  GS_FIELDS(GS_PUT)
#undef GS_PUT
  return i;
}

static uint64_t gs_load_acquire(void* p) { return __atomic_load_n((uint64_t*)p, __ATOMIC_ACQUIRE); }
static void gs_store_release(void* p, uint64_t v) { __atomic_store_n((uint64_t*)p, v, __ATOMIC_RELEASE); }

static uint64_t gs_committed(void* slots_, uint64_t mask, uint64_t start, uint64_t end) {
  graphsignal_ring_record* slots = (graphsignal_ring_record*)slots_;
  uint64_t i = start;
  while (i < end && __atomic_load_n(&slots[i & mask].seq, __ATOMIC_ACQUIRE) == i + 1) i++;
  return i - start;
}

static void* gs_ring_open(const char* name, uint32_t kind, uint64_t capacity, uint64_t strings_size,
                          size_t* out_size) {
  return graphsignal_ring_open(name, kind, capacity, strings_size, out_size);
}
static int gs_ring_write(void* h, uint8_t type, uint8_t sub, uint16_t device, uint32_t name_id, uint64_t value,
                         uint64_t extra) {
  return graphsignal_ring_write((graphsignal_ring_header*)h, type, sub, device, name_id, value, extra);
}
static void* gs_ring_reserve(void* h, uint64_t* index) {
  return graphsignal_ring_reserve((graphsignal_ring_header*)h, index);
}
static void gs_ring_fill(void* slot, uint8_t type, uint8_t sub, uint16_t device, uint32_t name_id, uint64_t value,
                         uint64_t extra) {
  graphsignal_ring_record* s = (graphsignal_ring_record*)slot;
  s->type = type; s->sub = sub; s->device = device; s->name_id = name_id; s->value = value; s->extra = extra;
}
static void gs_ring_commit(void* slot, uint64_t index) {
  graphsignal_ring_commit((graphsignal_ring_record*)slot, index);
}
static int gs_ring_send_name(void* h, uint32_t id, uint8_t kind, const char* bytes, size_t len) {
  return graphsignal_ring_send_name((graphsignal_ring_header*)h, id, kind, bytes, len);
}
static uint32_t gs_ring_new_name_id(void* h) { return graphsignal_ring_new_name_id((graphsignal_ring_header*)h); }
static void gs_ring_close(void* h) { graphsignal_ring_close((graphsignal_ring_header*)h); }
static int gs_munmap(void* p, size_t size) { return munmap(p, size); }
"""


def include_dir() -> str:
    for d in INCLUDE_CANDIDATES:
        if os.path.exists(os.path.join(d, "graphsignal", "probe.h")):
            return os.path.abspath(d)
    raise RuntimeError("graphsignal/probe.h not found in %s" % INCLUDE_CANDIDATES)


ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "graphsignal._gsnative",
    SOURCE,
    include_dirs=[include_dir()],
    extra_compile_args=["-O2", "-std=gnu99"],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.join(HERE, ".."), verbose=False)
