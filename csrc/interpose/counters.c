/* The interposer's counting (see counters.h for the contract). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "counters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

gs_counters gs_state;
gs_driver_fns gs_driver;

#define RELAXED __ATOMIC_RELAXED

uint64_t gs_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The tick clock (counters.h). The calibration's first point is taken when
 * the library loads; each conversion takes a second one, so the ratio is
 * measured over the whole run (its error: a read's ~50 ns over the run). */
int gs_tsc;
static uint64_t g_tsc0, g_ns0;

#if defined(__x86_64__)
#include <cpuid.h>
static int tsc_invariant(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return 0;
  return (d >> 8) & 1u;
}
#else
static int tsc_invariant(void) { return 0; }
#endif

static void calibration_point(uint64_t* tsc, uint64_t* ns) {
#if defined(__x86_64__)
  /* the TSC read between two clock reads: the pair's midpoint is when it was read */
  uint64_t a = gs_now_ns();
  *tsc = __builtin_ia32_rdtsc();
  *ns = a + (gs_now_ns() - a) / 2;
#else
  *tsc = *ns = gs_now_ns();
#endif
}

__attribute__((constructor)) static void gs_ticks_setup(void) {
  const char* off = getenv("GRAPHSIGNAL_INTERPOSE_NO_TSC"); /* tests compare the two clocks */
  gs_tsc = tsc_invariant() && !(off && *off == '1');
  calibration_point(&g_tsc0, &g_ns0);
}

uint64_t gs_ticks_to_ns(uint64_t ticks) {
  uint64_t tsc1, ns1;
  if (!gs_tsc || !ticks) return ticks;
  calibration_point(&tsc1, &ns1);
  /* under a millisecond since load (a process that exits at once): wait for one, off the hot path */
  while (ns1 - g_ns0 < 1000000ull) calibration_point(&tsc1, &ns1);
  if (tsc1 <= g_tsc0) return ticks; /* a TSC that went back: nothing to scale by */
  return (uint64_t)((long double)ticks * (long double)(ns1 - g_ns0) / (long double)(tsc1 - g_tsc0));
}

static inline uint32_t hash_ptr(uintptr_t p) {
  /* handles are aligned heap addresses: mix the high bits down */
  uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ull;
  return (uint32_t)(x >> (64 - GS_TABLE_BITS));
}

/* The slot of `key`, taking a free one on first sight (*fresh = 1 for the
 * taker). NULL when the table is full. Probes are bounded by the table
 * size; slots are never freed (a handle reused by the driver keeps its
 * slot, and re-instantiation renames a graph's). */
static gs_slot* slot_for(gs_table* t, uintptr_t key, int* fresh) {
  uint32_t i = hash_ptr(key);
  uint32_t n;
  *fresh = 0;
  for (n = 0; n < GS_TABLE_SIZE; n++, i = (i + 1) & (GS_TABLE_SIZE - 1)) {
    gs_slot* s = &t->slots[i];
    uintptr_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
    if (k == key) return s;
    if (k == 0) {
      uintptr_t expected = 0;
      if (__atomic_compare_exchange_n(&s->key, &expected, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(&t->used, 1, RELAXED);
        *fresh = 1;
        return s;
      }
      if (expected == key) return s;
    }
  }
  return NULL;
}

/* Whether work put on `s` now is captured rather than run. Asked of the
 * driver only while a capture is in progress somewhere in the process. */
int gs_stream_capturing(gs_CUstream s) {
  int status = GS_CU_STREAM_CAPTURE_STATUS_NONE;
  if (__builtin_expect(__atomic_load_n(&gs_state.captures_active, RELAXED) <= 0, 1)) return 0;
  if (!gs_driver.stream_is_capturing) return 0;
  if (gs_driver.stream_is_capturing(s, &status) != GS_CUDA_SUCCESS) return 0;
  return status != GS_CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The calling thread's device. A process that sees one device (the
 * driver says so once: the count is fixed when the driver initializes)
 * counts everything on ordinal 0 and asks nothing per call: a
 * cuCtxGetCurrent costs more than the rest of a sync's or a copy's
 * counting together. A process that sees several asks the driver for the
 * thread's context on every call (exact whatever switched it: there is
 * no cheaper truth), the ordinal cached per thread and context. */
static __thread gs_CUcontext t_ctx __attribute__((tls_model("initial-exec")));
static __thread int t_dev __attribute__((tls_model("initial-exec")));
/* 0: not known yet (the driver not initialized, or no cuDeviceGetCount); 1: one device; 2: several */
static int g_devices;

static int count_devices(void) {
  int n = 0;
  if (!gs_driver.device_get_count || gs_driver.device_get_count(&n) != GS_CUDA_SUCCESS || n <= 0) return 0;
  n = n == 1 ? 1 : 2;
  __atomic_store_n(&g_devices, n, RELAXED);
  return n;
}

int gs_devices_known(void) { return __atomic_load_n(&g_devices, RELAXED); }

int gs_current_device(void) {
  gs_CUcontext c = NULL;
  int d = 0, n = __atomic_load_n(&g_devices, RELAXED);
  if (__builtin_expect(n == 1, 1)) return 0;
  if (n == 0 && count_devices() == 1) return 0;
  if (!gs_driver.ctx_get_current || gs_driver.ctx_get_current(&c) != GS_CUDA_SUCCESS || !c) return 0;
  if (c == t_ctx) return t_dev;
  if (!gs_driver.ctx_get_device || gs_driver.ctx_get_device(&d) != GS_CUDA_SUCCESS || d < 0) d = 0;
  t_dev = d;
  t_ctx = c;
  return d;
}

static gs_device_counters* device_counters(void) {
  int d = gs_current_device();
  if (d >= GS_MAX_DEVICES) {
    __atomic_fetch_add(&gs_state.devices_over, 1, RELAXED);
    return NULL;
  }
  return &gs_state.dev[d];
}

static const char* kernel_name(gs_CUfunction f) {
  const char* name = NULL;
  /* cudart passes CUkernel handles where a CUfunction goes (lazy loading);
   * cuFuncGetName refuses those, cuKernelGetName takes them */
  if (gs_driver.func_get_name && gs_driver.func_get_name(&name, f) != GS_CUDA_SUCCESS) name = NULL;
  if (!name && gs_driver.kernel_get_name && gs_driver.kernel_get_name(&name, (gs_CUkernel)f) != GS_CUDA_SUCCESS)
    name = NULL;
  if (!name) return "(unnamed kernel)";
  /* the driver's string lives as long as its module: keep our own copy */
  char* copy = strdup(name);
  return copy ? copy : "(unnamed kernel)";
}

void gs_count_kernel(gs_CUfunction f, gs_CUstream s) {
  int fresh;
  gs_slot* slot;
  if (gs_stream_capturing(s)) {
    __atomic_fetch_add(&gs_state.captured, 1, RELAXED);
    return;
  }
  slot = slot_for(&gs_state.kernels, (uintptr_t)f, &fresh);
  if (!slot) {
    __atomic_fetch_add(&gs_state.kernels.overflow, 1, RELAXED);
    return;
  }
  if (__builtin_expect(fresh, 0)) {
    __atomic_store_n(&slot->device, gs_current_device(), RELAXED);
    __atomic_store_n(&slot->name, kernel_name(f), __ATOMIC_RELEASE);
  }
  __atomic_fetch_add(&slot->count, 1, RELAXED);
}

static gs_slot* graph_slot(gs_CUgraphExec exec) {
  int fresh;
  gs_slot* slot = slot_for(&gs_state.graphs, (uintptr_t)exec, &fresh);
  if (slot && fresh) __atomic_store_n(&slot->device, gs_current_device(), RELAXED);
  return slot;
}

gs_slot* gs_graph_slot(gs_CUgraphExec exec) { return graph_slot(exec); }

void gs_count_graph_slot(gs_slot* slot) {
  if (!slot) {
    __atomic_fetch_add(&gs_state.graphs.overflow, 1, RELAXED);
    return;
  }
  __atomic_fetch_add(&slot->count, 1, RELAXED);
}

void gs_count_graph(gs_CUgraphExec exec, gs_CUstream s) {
  if (gs_stream_capturing(s)) { /* a graph launched into a capture becomes a child of the captured graph */
    __atomic_fetch_add(&gs_state.captured, 1, RELAXED);
    return;
  }
  gs_count_graph_slot(gs_graph_slot(exec));
}

void gs_count_sync(int kind, uint64_t ticks) {
  gs_device_counters* d = device_counters();
  if (!d) return;
  __atomic_fetch_add(&d->syncs[kind].calls, 1, RELAXED);
  __atomic_fetch_add(&d->syncs[kind].ticks, ticks, RELAXED);
}

void gs_count_copy(int kind, uint64_t bytes, const void* src, const void* dst, gs_CUstream s, int async) {
  int sc = GS_MEM_NONE, dc = GS_MEM_NONE;
  gs_bytes_counter* c;
  if (async && gs_stream_capturing(s)) {
    __atomic_fetch_add(&gs_state.captured, 1, RELAXED);
    return;
  }
  gs_device_counters* d = device_counters();
  if (!d) return;
  if (kind == GS_COPY_HTOD || kind == GS_COPY_HTOH) sc = gs_hostmem_class(src);
  if (kind == GS_COPY_DTOH || kind == GS_COPY_HTOH) dc = gs_hostmem_class(dst);
  c = &d->copies[kind][sc][dc];
  __atomic_fetch_add(&c->calls, 1, RELAXED);
  __atomic_fetch_add(&c->bytes, bytes, RELAXED);
}

void gs_count_memset(uint64_t bytes, gs_CUstream s, int async) {
  if (async && gs_stream_capturing(s)) {
    __atomic_fetch_add(&gs_state.captured, 1, RELAXED);
    return;
  }
  gs_device_counters* d = device_counters();
  if (!d) return;
  __atomic_fetch_add(&d->memsets.calls, 1, RELAXED);
  __atomic_fetch_add(&d->memsets.bytes, bytes, RELAXED);
}

/* ---- graph names ---- */

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define MAX_NODES (1u << 20)
#define MAX_DEPTH 8

static void mix(uint64_t* h, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  size_t i;
  for (i = 0; i < n; i++) {
    *h ^= p[i];
    *h *= FNV_PRIME;
  }
}

static void mix_byte(uint64_t* h, unsigned char c) { mix(h, &c, 1); }

static int walk(gs_CUgraph graph, int depth, uint64_t* hash, size_t* nodes) {
  size_t n = 0, i;
  gs_CUgraphNode* list;
  int ok = 1;
  if (depth > MAX_DEPTH) return 0;
  if (gs_driver.graph_get_nodes(graph, NULL, &n) != GS_CUDA_SUCCESS) return 0;
  if (n > MAX_NODES || *nodes + n > MAX_NODES) return 0;
  if (!n) return 1;
  list = (gs_CUgraphNode*)malloc(n * sizeof *list);
  if (!list) return 0;
  if (gs_driver.graph_get_nodes(graph, list, &n) != GS_CUDA_SUCCESS) n = 0, ok = 0;
  for (i = 0; ok && i < n; i++) {
    int type = -1;
    if (gs_driver.node_get_type(list[i], &type) != GS_CUDA_SUCCESS) {
      ok = 0;
      break;
    }
    mix_byte(hash, (unsigned char)type);
    (*nodes)++;
    if (type == GS_CU_GRAPH_NODE_TYPE_KERNEL) {
      gs_KernelNodeParams p;
      const char* name = NULL;
      memset(&p, 0, sizeof p);
      if (gs_driver.kernel_node_get_params(list[i], &p) != GS_CUDA_SUCCESS) {
        ok = 0;
        break;
      }
      if (p.func && gs_driver.func_get_name && gs_driver.func_get_name(&name, p.func) != GS_CUDA_SUCCESS) name = NULL;
      if (!name && p.kern && gs_driver.kernel_get_name &&
          gs_driver.kernel_get_name(&name, p.kern) != GS_CUDA_SUCCESS)
        name = NULL;
      if (!name) { /* an unnamed kernel would make unrelated graphs collide */
        ok = 0;
        break;
      }
      mix(hash, name, strlen(name) + 1);
    } else if (type == GS_CU_GRAPH_NODE_TYPE_GRAPH && gs_driver.child_graph) {
      gs_CUgraph child = NULL;
      if (gs_driver.child_graph(list[i], &child) != GS_CUDA_SUCCESS || !child) {
        ok = 0;
        break;
      }
      mix_byte(hash, '(');
      if (!walk(child, depth + 1, hash, nodes)) {
        ok = 0;
        break;
      }
      mix_byte(hash, ')');
    }
  }
  free(list);
  return ok;
}

int gs_describe_graph(gs_CUgraph graph, char* out, size_t n) {
  uint64_t hash = FNV_OFFSET;
  size_t nodes = 0;
  if (!graph || !gs_driver.graph_get_nodes || !gs_driver.node_get_type || !gs_driver.kernel_node_get_params ||
      !(gs_driver.func_get_name || gs_driver.kernel_get_name))
    return 0;
  if (!walk(graph, 0, &hash, &nodes)) return 0;
  snprintf(out, n, "graph_%016llx_n%zu", (unsigned long long)hash, nodes);
  return 1;
}

static void name_exec(gs_CUgraphExec exec, gs_CUgraph graph, int keep_known) {
  char name[GS_NAME_MAX];
  gs_slot* slot = graph_slot(exec);
  if (!slot) return;
  /* an update cannot change a graph's topology: the executable keeps its name */
  if (keep_known && __atomic_load_n(&slot->name, __ATOMIC_ACQUIRE)) {
    __atomic_fetch_add(&gs_state.graph_captures, 1, RELAXED);
    return;
  }
  if (!gs_describe_graph(graph, name, sizeof name)) {
    __atomic_fetch_add(&gs_state.graphs_unnamed, 1, RELAXED);
    return;
  }
  /* A re-instantiation into a reused handle (the driver freed the old
   * executable and handed its address out again) renames the slot in
   * place: readers (the report) reach the text only through `name`, and
   * one that reads during such a rename may see a torn name once. */
  if (__atomic_load_n(&slot->name, __ATOMIC_ACQUIRE) == NULL || strcmp(slot->graph_name, name) != 0) {
    memcpy(slot->graph_name, name, sizeof name);
    __atomic_store_n(&slot->name, slot->graph_name, __ATOMIC_RELEASE);
    __atomic_fetch_add(&slot->name_gen, 1, __ATOMIC_RELEASE); /* the flusher sends the new name */
  }
  __atomic_fetch_add(&gs_state.graph_captures, 1, RELAXED);
}

void gs_graph_instantiated(gs_CUgraphExec exec, gs_CUgraph graph) { name_exec(exec, graph, 0); }

void gs_graph_updated(gs_CUgraphExec exec, gs_CUgraph graph) { name_exec(exec, graph, 1); }

void gs_capture_begun(void) { __atomic_fetch_add(&gs_state.captures_active, 1, RELAXED); }

void gs_capture_ended(void) {
  int n = __atomic_load_n(&gs_state.captures_active, RELAXED);
  while (n > 0 && !__atomic_compare_exchange_n(&gs_state.captures_active, &n, n - 1, 0, RELAXED, RELAXED)) {
  }
}
