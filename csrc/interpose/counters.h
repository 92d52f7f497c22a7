/* What the interposer counts, and the only code that runs on a workload's
 * CUDA calls besides the forwarding itself.
 *
 * Hot path (every launch, copy, sync): one lookup in a fixed open-addressed
 * table keyed by the handle (no lock, no allocation once a handle has been
 * seen) and relaxed atomic adds. A handle's first sight does the rare work:
 * its name (one driver call), its slot (one compare-and-swap). A graph's
 * name is computed from its node list once, at instantiation or update,
 * never per launch. A copy's host side is classified pinned, managed or
 * pageable by the host memory registry (hostmem.h), which learns from the
 * allocation calls and never asks the driver per copy.
 *
 * Work put on a capturing stream is not run, so it is not counted as a
 * launch or a copy (the graph's replays count it); whether a stream
 * captures is asked of the driver only while some capture is in progress
 * (cuStreamBeginCapture* and cuStreamEndCapture are hooked for that). */
#ifndef GRAPHSIGNAL_INTERPOSE_COUNTERS_H
#define GRAPHSIGNAL_INTERPOSE_COUNTERS_H

#include <stdint.h>

#include "cuda_abi.h"
#include "hostmem.h"

#define GS_TABLE_BITS 14 /* 16,384 kernels or graph executables; later ones count in `overflow` */
#define GS_TABLE_SIZE (1u << GS_TABLE_BITS)
#define GS_NAME_MAX 64 /* a graph's name: graph_<16 hex>_n<nodes> */

typedef struct {
  uintptr_t key;         /* the handle; 0 = free (atomic) */
  uint64_t count;        /* launches (atomic, relaxed) */
  const char* name;      /* kernels: our copy of the driver's name; set once (atomic) */
  uint64_t flushed;      /* what the flusher has sent of count */
  uint32_t name_id;      /* the ring's name id, flusher only */
  uint64_t sample_tick;  /* graphs: launches seen by the sampler (atomic) */
  uint64_t sampled_n;    /* graphs: replays timed by an event pair (atomic) */
  uint64_t sampled_ns;   /* graphs: their summed GPU time, the host's share taken out (atomic) */
  uint64_t sampled_raw_ns; /* graphs: the event pairs' spans as measured (atomic; the report's) */
  uint64_t sampled_idle;   /* graphs: timed replays whose stream was idle at launch (atomic; the report's) */
  uint64_t est_sent_ns;  /* graphs: estimated GPU time the flusher has sent */
  uint64_t timed_sent;   /* graphs: timed replays the flusher has sent */
  int32_t device;        /* CUDA ordinal of the context current at first sight; set before `name` (atomic) */
  uint32_t name_gen;     /* graphs: bumped at each rename (atomic) */
  uint32_t name_gen_sent; /* graphs: the rename whose name the flusher sent */
  char graph_name[GS_NAME_MAX]; /* graphs: written before `name` points at it */
} gs_slot;

typedef struct {
  gs_slot slots[GS_TABLE_SIZE];
  uint64_t overflow;       /* launches of handles that found no free slot */
  uint64_t used;           /* slots taken */
} gs_table;

/* Synchronizations: CUPTI's CUpti_ActivitySynchronizationType numbering
 * where one exists (the payload's frame names come from it), then the
 * synchronous copies' implicit wait. */
enum { GS_SYNC_EVENT = 1, GS_SYNC_STREAM = 3, GS_SYNC_CONTEXT = 4, GS_SYNC_COPY = 5, GS_SYNC_KINDS = 6 };

/* Copies: CUpti_ActivityMemcpyKind numbering (HTOD 1, DTOH 2, DTOD 8,
 * HTOH 9, PTOP 10), 0 for a unified-address copy whose direction the call
 * does not say. */
enum { GS_COPY_DEFAULT = 0, GS_COPY_HTOD = 1, GS_COPY_DTOH = 2, GS_COPY_DTOD = 8, GS_COPY_HTOH = 9,
       GS_COPY_PTOP = 10, GS_COPY_KINDS = 11 };

typedef struct {
  uint64_t calls, bytes;
} gs_bytes_counter;

/* `ticks`: gs_ticks() units (the TSC where it is invariant, else ns);
 * gs_ticks_to_ns converts a total off the hot path. */
typedef struct {
  uint64_t calls, ticks;
} gs_time_counter;

/* Synchronizations, copies and memsets count per device: the ordinal of the
 * calling thread's current context (gs_current_device: in a process that
 * sees one device, ordinal 0 without asking; else one cuCtxGetCurrent per
 * call, the ordinal cached per thread and context). Devices past
 * GS_MAX_DEVICES count in `devices_over`. */
#define GS_MAX_DEVICES 64

/* Copies count per kind and per class of their source's and destination's
 * host memory (hostmem.h; GS_MEM_NONE for a side that is not host memory
 * or whose memory is not known). */
typedef struct {
  gs_time_counter syncs[GS_SYNC_KINDS];
  gs_bytes_counter copies[GS_COPY_KINDS][GS_MEM_CLASSES][GS_MEM_CLASSES];
  gs_bytes_counter memsets;
} gs_device_counters;

typedef struct {
  gs_table kernels;
  gs_table graphs;
  gs_device_counters dev[GS_MAX_DEVICES];
  uint64_t devices_over;
  uint64_t captured;        /* launches, copies and memsets on capturing streams (not run; not counted above) */
  uint64_t graph_captures;  /* instantiations and updates named */
  uint64_t graphs_unnamed;  /* instantiations whose graph could not be walked */
  int captures_active;      /* cuStreamBeginCapture* minus cuStreamEndCapture (atomic) */
} gs_counters;

extern gs_counters gs_state;

/* The driver functions the interposer calls itself, resolved from the
 * process's libcuda once (driver.c). Any may be null. */
typedef struct {
  gs_CUresult (*func_get_name)(const char**, gs_CUfunction);
  gs_CUresult (*kernel_get_name)(const char**, gs_CUkernel);
  gs_CUresult (*graph_get_nodes)(gs_CUgraph, gs_CUgraphNode*, size_t*);
  gs_CUresult (*node_get_type)(gs_CUgraphNode, int*);
  gs_CUresult (*kernel_node_get_params)(gs_CUgraphNode, gs_KernelNodeParams*);
  gs_CUresult (*child_graph)(gs_CUgraphNode, gs_CUgraph*);
  gs_CUresult (*stream_is_capturing)(gs_CUstream, int*);
  gs_CUresult (*stream_query)(gs_CUstream);
  gs_CUresult (*stream_query_ptsz)(gs_CUstream);
  gs_CUresult (*ctx_get_current)(gs_CUcontext*);
  gs_CUresult (*ctx_get_device)(int*);
  gs_CUresult (*device_get)(int*, int);
  gs_CUresult (*device_get_count)(int*);
  gs_CUresult (*device_get_uuid)(unsigned char*, int);
  gs_CUresult (*mem_get_allocation_props)(gs_MemAllocationProp*, gs_CUmemGenericAllocationHandle);
} gs_driver_fns;

extern gs_driver_fns gs_driver;
void gs_driver_resolve(void* libcuda_handle);

/* The hot path. */
void gs_count_kernel(gs_CUfunction f, gs_CUstream s);
void gs_count_graph(gs_CUgraphExec exec, gs_CUstream s);
void gs_count_sync(int kind, uint64_t ticks);
/* src, dst: the copy's host addresses where the kind says a side is host
 * memory (HTOD: src; DTOH: dst; HTOH: both), classified here; ignored
 * otherwise. */
void gs_count_copy(int kind, uint64_t bytes, const void* src, const void* dst, gs_CUstream s, int async);
void gs_count_memset(uint64_t bytes, gs_CUstream s, int async);

/* The CUDA ordinal of the calling thread's current context (0 when none;
 * always 0, asked of nobody, where the process sees one device). */
int gs_current_device(void);
/* What gs_current_device knows of the device count: 0 nothing yet, 1 one
 * device (no per-call lookup), 2 several (one per call). */
int gs_devices_known(void);

/* The graph executable's slot, taken on first sight (NULL: table full). */
gs_slot* gs_graph_slot(gs_CUgraphExec exec);
void gs_count_graph_slot(gs_slot* slot);
/* Whether work put on `s` now is captured rather than run. */
int gs_stream_capturing(gs_CUstream s);

/* sample.c: GPU time per graph from event pairs on one launch in
 * GRAPHSIGNAL_CUDA_SAMPLE (0 or unset: never). */
typedef struct {
  uint64_t taken, skipped, failed;
} gs_sample_stats;
extern gs_sample_stats gs_sampling;
void gs_sample_setup(void* libcuda_handle, const char* period, const char* rate);
int gs_sample_begin(gs_slot* slot, gs_CUstream s, int per_thread, void** ticket);
void gs_sample_end(void* ticket, gs_CUstream s, int per_thread, int launched);
void gs_sample_drain(void);

/* Rare calls. */
void gs_graph_instantiated(gs_CUgraphExec exec, gs_CUgraph graph);
void gs_graph_updated(gs_CUgraphExec exec, gs_CUgraph graph);
void gs_capture_begun(void);
void gs_capture_ended(void);

/* graph_<16 hex>_n<nodes>: a 64-bit FNV-1a hash of the node types in the
 * driver's order and each kernel node's symbol, child graphs walked in
 * place between '(' and ')' (the CUPTI library's GraphRegistry names graphs
 * the same way, so a graph has one name in every collection). 0 when the
 * graph cannot be walked. */
int gs_describe_graph(gs_CUgraph graph, char* out, size_t n);

uint64_t gs_now_ns(void);

/* Host time on the hot path: a sync's wall time is two reads of this.
 * Where the CPU says its TSC is invariant (x86-64, CPUID 0x80000007
 * EDX bit 8) it is the TSC (one instruction, not clock_gettime's two
 * clock reads and scaling, ~40 ns a pair saved), converted to ns with a
 * ratio measured against CLOCK_MONOTONIC since the library loaded;
 * elsewhere it is CLOCK_MONOTONIC's ns and the conversion is identity. */
extern int gs_tsc;
static inline uint64_t gs_ticks(void) {
#if defined(__x86_64__)
  if (__builtin_expect(gs_tsc, 1)) return __builtin_ia32_rdtsc();
#endif
  return gs_now_ns();
}
/* A total of ticks in ns (never called per CUDA call). */
uint64_t gs_ticks_to_ns(uint64_t ticks);

/* flush.c: under graphsignal-run (GRAPHSIGNAL_RUN_ID set), a thread sends
 * what was counted to this process's interposer ring every
 * GS_FLUSH_MS, and once more at exit; nothing otherwise. */
void gs_flush_setup(void);

#endif
