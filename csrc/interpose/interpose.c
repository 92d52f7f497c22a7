/* graphsignal's CUDA driver interposer (--cuda-trace light): counts graph
 * replays, kernel launches, synchronizations, copies and memsets without
 * CUPTI.
 *
 * How calls reach it. The CUDA runtime (libcudart, shared or static) opens
 * libcuda.so.1 and fetches cuGetProcAddress with dlsym; every other driver
 * entry point comes through cuGetProcAddress. This library is preloaded
 * (LD_PRELOAD), so its dlsym is the one the runtime calls: for the names
 * in hooks.h (and cuGetProcAddress itself) it answers a counting wrapper
 * of the driver's function, and every other lookup goes to the next dlsym
 * untouched. Programs linked to libcuda directly call the wrappers through
 * their PLT: each row's first wrapper is exported under the driver's own
 * name.
 *
 * dlsym(RTLD_NEXT, ...) is relative to its caller. The exported dlsym is an
 * assembly trampoline that asks gs_dlsym_hook and, when the hook has no
 * answer, jumps (never calls) to the next dlsym: the caller's return
 * address stays on the stack, so RTLD_NEXT lookups of other interposers
 * still start after them.
 *
 * What it costs. A process that never looks up the driver runs nothing
 * here but the trampoline's compare on each dlsym. A counted call costs one
 * indirect call, a table lookup and relaxed atomic adds (counters.c).
 * Nothing here blocks, allocates per call, or changes a call's arguments,
 * result or error. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "hooks.h"
#include "interpose.h"

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_UNPAREN(...) __VA_ARGS__
#define GS_SLOTS 4

/* ---- the rows ---- */

enum {
#define X(name, base, pt, body, params, args) GS_H_##name,
  GS_HOOKS(X)
#undef X
  GS_H_COUNT
};

typedef struct {
  const char* name;
  const char* base;
  int per_thread;
  void* wrappers[GS_SLOTS];
} gs_row;

/* real[row][slot]: the driver function a wrapper forwards to (atomic). */
static void* g_real[GS_H_COUNT][GS_SLOTS];
/* calls[row]: per-row call counts, kept only for the report (GS_INTERPOSE_REPORT) */
static uint64_t g_calls[GS_H_COUNT];
static int g_census;

static void* g_libcuda;                                     /* the handle the process looked the driver up in */
typedef void* (*dlsym_fn)(void*, const char*);
void* gs_real_dlsym __attribute__((visibility("hidden"))); /* the next dlsym (read by the trampoline) */

gs_interpose_stats gs_stats;

static inline void* real_of(int row, int slot) { return __atomic_load_n(&g_real[row][slot], __ATOMIC_ACQUIRE); }

static void* resolve_export(int row);

/* ---- counting bodies: forward, then count what ran ---- */

#define CALLS(row) \
  if (__builtin_expect(g_census, 0)) __atomic_fetch_add(&g_calls[row], 1, __ATOMIC_RELAXED)

typedef gs_CUresult(*fn_launch) GS_P_LAUNCH;
static inline gs_CUresult b_launch(int row, void* real, gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shm, gs_CUstream s, void** params,
                                   void** extra) {
  gs_CUresult r = ((fn_launch)real)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, s);
  return r;
}

typedef gs_CUresult(*fn_coop) GS_P_COOP;
static inline gs_CUresult b_coop(int row, void* real, gs_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shm, gs_CUstream s, void** params) {
  gs_CUresult r = ((fn_coop)real)(f, gx, gy, gz, bx, by, bz, shm, s, params);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, s);
  return r;
}

typedef gs_CUresult(*fn_launch_ex) GS_P_LAUNCH_EX;
static inline gs_CUresult b_launch_ex(int row, void* real, const gs_CUlaunchConfig* config, gs_CUfunction f,
                                      void** params, void** extra) {
  gs_CUresult r = ((fn_launch_ex)real)(config, f, params, extra);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_count_kernel(f, config ? config->hStream : NULL);
  return r;
}

typedef gs_CUresult(*fn_graph_launch) GS_P_GRAPH_LAUNCH;
static inline gs_CUresult b_graph_launch(int row, void* real, gs_CUgraphExec exec, gs_CUstream s) {
  int per_thread = row == GS_H_cuGraphLaunch_ptsz;
  void* ticket = NULL;
  gs_slot* slot;
  int sampled;
  gs_CUresult r;
  if (gs_stream_capturing(s)) { /* a graph launched into a capture becomes a child of the captured graph */
    r = ((fn_graph_launch)real)(exec, s);
    CALLS(row);
    if (r == GS_CUDA_SUCCESS) __atomic_fetch_add(&gs_state.captured, 1, __ATOMIC_RELAXED);
    return r;
  }
  slot = gs_graph_slot(exec);
  sampled = gs_sample_begin(slot, s, per_thread, &ticket);
  r = ((fn_graph_launch)real)(exec, s);
  CALLS(row);
  if (sampled) gs_sample_end(ticket, s, per_thread, r == GS_CUDA_SUCCESS);
  if (r == GS_CUDA_SUCCESS) gs_count_graph_slot(slot);
  return r;
}

typedef gs_CUresult(*fn_inst_flags) GS_P_INST_FLAGS;
static inline gs_CUresult b_inst_flags(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph,
                                       unsigned long long flags) {
  gs_CUresult r = ((fn_inst_flags)real)(exec, graph, flags);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_inst_params) GS_P_INST_PARAMS;
static inline gs_CUresult b_inst_params(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph, void* params) {
  gs_CUresult r = ((fn_inst_params)real)(exec, graph, params);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_inst_v2) GS_P_INST_V2;
static inline gs_CUresult b_inst_v2(int row, void* real, gs_CUgraphExec* exec, gs_CUgraph graph,
                                    gs_CUgraphNode* err_node, char* log, size_t log_size) {
  gs_CUresult r = ((fn_inst_v2)real)(exec, graph, err_node, log, log_size);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS && exec) gs_graph_instantiated(*exec, graph);
  return r;
}

typedef gs_CUresult(*fn_exec_update_v2) GS_P_EXEC_UPDATE_V2;
static inline gs_CUresult b_exec_update_v2(int row, void* real, gs_CUgraphExec exec, gs_CUgraph graph, void* info) {
  gs_CUresult r = ((fn_exec_update_v2)real)(exec, graph, info);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_graph_updated(exec, graph);
  return r;
}

typedef gs_CUresult(*fn_exec_update_v1) GS_P_EXEC_UPDATE_V1;
static inline gs_CUresult b_exec_update_v1(int row, void* real, gs_CUgraphExec exec, gs_CUgraph graph,
                                           gs_CUgraphNode* err_node, int* result) {
  gs_CUresult r = ((fn_exec_update_v1)real)(exec, graph, err_node, result);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_graph_updated(exec, graph);
  return r;
}

typedef gs_CUresult(*fn_begin_v1) GS_P_BEGIN_V1;
static inline gs_CUresult b_begin_v1(int row, void* real, gs_CUstream s) {
  gs_CUresult r = ((fn_begin_v1)real)(s);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_begin_v2) GS_P_BEGIN_V2;
static inline gs_CUresult b_begin_v2(int row, void* real, gs_CUstream s, int mode) {
  gs_CUresult r = ((fn_begin_v2)real)(s, mode);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_begin_to_graph) GS_P_BEGIN_TO_GRAPH;
static inline gs_CUresult b_begin_to_graph(int row, void* real, gs_CUstream s, gs_CUgraph graph,
                                           const gs_CUgraphNode* deps, const void* dep_data, size_t n, int mode) {
  gs_CUresult r = ((fn_begin_to_graph)real)(s, graph, deps, dep_data, n, mode);
  CALLS(row);
  if (r == GS_CUDA_SUCCESS) gs_capture_begun();
  return r;
}

typedef gs_CUresult(*fn_end) GS_P_END;
static inline gs_CUresult b_end(int row, void* real, gs_CUstream s, gs_CUgraph* graph) {
  gs_CUresult r = ((fn_end)real)(s, graph);
  CALLS(row);
  gs_capture_ended(); /* an invalidated capture ends with an error, but it ends */
  return r;
}

/* synchronizations: host wall time around the call */
#define TIMED_SYNC(kind, call)             \
  uint64_t t0 = gs_now_ns();               \
  gs_CUresult r = call;                    \
  gs_count_sync(kind, gs_now_ns() - t0);   \
  CALLS(row);                              \
  return r

typedef gs_CUresult(*fn_stream) GS_P_STREAM;
static inline gs_CUresult b_stream_sync(int row, void* real, gs_CUstream s) {
  TIMED_SYNC(GS_SYNC_STREAM, ((fn_stream)real)(s));
}

typedef gs_CUresult(*fn_void) GS_P_VOID;
static inline gs_CUresult b_ctx_sync(int row, void* real, int unused) {
  (void)unused; TIMED_SYNC(GS_SYNC_CONTEXT, ((fn_void)real)()); }

typedef gs_CUresult(*fn_ctx) GS_P_CTX;
static inline gs_CUresult b_ctx_sync_v2(int row, void* real, gs_CUcontext ctx) {
  TIMED_SYNC(GS_SYNC_CONTEXT, ((fn_ctx)real)(ctx));
}

typedef gs_CUresult(*fn_event) GS_P_EVENT;
static inline gs_CUresult b_event_sync(int row, void* real, gs_CUevent e) {
  TIMED_SYNC(GS_SYNC_EVENT, ((fn_event)real)(e));
}

/* copies: a synchronous copy also counts its wait as a synchronization */
#define SYNC_COPY(kind, bytes, call)                       \
  uint64_t t0 = gs_now_ns();                               \
  gs_CUresult r = call;                                    \
  CALLS(row);                                              \
  if (r == GS_CUDA_SUCCESS) {                              \
    gs_count_sync(GS_SYNC_COPY, gs_now_ns() - t0);         \
    gs_count_copy(kind, bytes, NULL, 0);                   \
  }                                                        \
  return r
#define ASYNC_COPY(kind, bytes, s, call)                   \
  gs_CUresult r = call;                                    \
  CALLS(row);                                              \
  if (r == GS_CUDA_SUCCESS) gs_count_copy(kind, bytes, s, 1); \
  return r

typedef gs_CUresult(*fn_copy) GS_P_COPY;
typedef gs_CUresult(*fn_copy_async) GS_P_COPY_ASYNC;
static inline gs_CUresult b_copy(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DEFAULT, n, ((fn_copy)real)(dst, src, n));
}
static inline gs_CUresult b_copy_async(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DEFAULT, n, s, ((fn_copy_async)real)(dst, src, n, s));
}
static inline gs_CUresult b_dtod(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DTOD, n, ((fn_copy)real)(dst, src, n));
}
static inline gs_CUresult b_dtod_async(int row, void* real, gs_CUdeviceptr dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DTOD, n, s, ((fn_copy_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_htod) GS_P_HTOD;
typedef gs_CUresult(*fn_htod_async) GS_P_HTOD_ASYNC;
static inline gs_CUresult b_htod(int row, void* real, gs_CUdeviceptr dst, const void* src, size_t n) {
  SYNC_COPY(GS_COPY_HTOD, n, ((fn_htod)real)(dst, src, n));
}
static inline gs_CUresult b_htod_async(int row, void* real, gs_CUdeviceptr dst, const void* src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_HTOD, n, s, ((fn_htod_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_dtoh) GS_P_DTOH;
typedef gs_CUresult(*fn_dtoh_async) GS_P_DTOH_ASYNC;
static inline gs_CUresult b_dtoh(int row, void* real, void* dst, gs_CUdeviceptr src, size_t n) {
  SYNC_COPY(GS_COPY_DTOH, n, ((fn_dtoh)real)(dst, src, n));
}
static inline gs_CUresult b_dtoh_async(int row, void* real, void* dst, gs_CUdeviceptr src, size_t n,
                                       gs_CUstream s) {
  ASYNC_COPY(GS_COPY_DTOH, n, s, ((fn_dtoh_async)real)(dst, src, n, s));
}

typedef gs_CUresult(*fn_peer) GS_P_PEER;
typedef gs_CUresult(*fn_peer_async) GS_P_PEER_ASYNC;
static inline gs_CUresult b_peer(int row, void* real, gs_CUdeviceptr dst, gs_CUcontext dctx, gs_CUdeviceptr src,
                                 gs_CUcontext sctx, size_t n) {
  SYNC_COPY(GS_COPY_PTOP, n, ((fn_peer)real)(dst, dctx, src, sctx, n));
}
static inline gs_CUresult b_peer_async(int row, void* real, gs_CUdeviceptr dst, gs_CUcontext dctx,
                                       gs_CUdeviceptr src, gs_CUcontext sctx, size_t n, gs_CUstream s) {
  ASYNC_COPY(GS_COPY_PTOP, n, s, ((fn_peer_async)real)(dst, dctx, src, sctx, n, s));
}

static int kind_2d(const gs_Memcpy2D* p) {
  int s, d;
  if (!p) return GS_COPY_DEFAULT;
  s = p->srcMemoryType, d = p->dstMemoryType;
  if (s == GS_CU_MEMORYTYPE_HOST && d == GS_CU_MEMORYTYPE_HOST) return GS_COPY_HTOH;
  if (s == GS_CU_MEMORYTYPE_HOST && (d == GS_CU_MEMORYTYPE_DEVICE || d == GS_CU_MEMORYTYPE_ARRAY)) return GS_COPY_HTOD;
  if ((s == GS_CU_MEMORYTYPE_DEVICE || s == GS_CU_MEMORYTYPE_ARRAY) && d == GS_CU_MEMORYTYPE_HOST) return GS_COPY_DTOH;
  if ((s == GS_CU_MEMORYTYPE_DEVICE || s == GS_CU_MEMORYTYPE_ARRAY) &&
      (d == GS_CU_MEMORYTYPE_DEVICE || d == GS_CU_MEMORYTYPE_ARRAY))
    return GS_COPY_DTOD;
  return GS_COPY_DEFAULT;
}

static inline uint64_t bytes_2d(const gs_Memcpy2D* p) { return p ? (uint64_t)p->WidthInBytes * p->Height : 0; }

typedef gs_CUresult(*fn_2d) GS_P_2D;
typedef gs_CUresult(*fn_2d_async) GS_P_2D_ASYNC;
static inline gs_CUresult b_2d(int row, void* real, const gs_Memcpy2D* p) {
  SYNC_COPY(kind_2d(p), bytes_2d(p), ((fn_2d)real)(p));
}
static inline gs_CUresult b_2d_async(int row, void* real, const gs_Memcpy2D* p, gs_CUstream s) {
  ASYNC_COPY(kind_2d(p), bytes_2d(p), s, ((fn_2d_async)real)(p, s));
}

#define MEMSET(bytes, s, async, call)                        \
  gs_CUresult r = call;                                      \
  CALLS(row);                                                \
  if (r == GS_CUDA_SUCCESS) gs_count_memset(bytes, s, async); \
  return r

typedef gs_CUresult(*fn_set8) GS_P_SET8;
typedef gs_CUresult(*fn_set16) GS_P_SET16;
typedef gs_CUresult(*fn_set32) GS_P_SET32;
typedef gs_CUresult(*fn_set8_async) GS_P_SET8_ASYNC;
typedef gs_CUresult(*fn_set16_async) GS_P_SET16_ASYNC;
typedef gs_CUresult(*fn_set32_async) GS_P_SET32_ASYNC;
static inline gs_CUresult b_set8(int row, void* real, gs_CUdeviceptr dst, unsigned char v, size_t n) {
  MEMSET(n, NULL, 0, ((fn_set8)real)(dst, v, n));
}
static inline gs_CUresult b_set16(int row, void* real, gs_CUdeviceptr dst, unsigned short v, size_t n) {
  MEMSET(2 * (uint64_t)n, NULL, 0, ((fn_set16)real)(dst, v, n));
}
static inline gs_CUresult b_set32(int row, void* real, gs_CUdeviceptr dst, unsigned int v, size_t n) {
  MEMSET(4 * (uint64_t)n, NULL, 0, ((fn_set32)real)(dst, v, n));
}
static inline gs_CUresult b_set8_async(int row, void* real, gs_CUdeviceptr dst, unsigned char v, size_t n,
                                       gs_CUstream s) {
  MEMSET(n, s, 1, ((fn_set8_async)real)(dst, v, n, s));
}
static inline gs_CUresult b_set16_async(int row, void* real, gs_CUdeviceptr dst, unsigned short v, size_t n,
                                        gs_CUstream s) {
  MEMSET(2 * (uint64_t)n, s, 1, ((fn_set16_async)real)(dst, v, n, s));
}
static inline gs_CUresult b_set32_async(int row, void* real, gs_CUdeviceptr dst, unsigned int v, size_t n,
                                        gs_CUstream s) {
  MEMSET(4 * (uint64_t)n, s, 1, ((fn_set32_async)real)(dst, v, n, s));
}

/* ---- the wrappers: slot 0 exported under the driver's name ---- */

#define GS_SLOT(name, body, params, args, i)                                  \
  static gs_CUresult name##_gs##i params {                                   \
    return body(GS_H_##name, real_of(GS_H_##name, i), GS_UNPAREN args);      \
  }

#define X(name, base, pt, body, params, args)                                          \
  GS_EXPORT gs_CUresult name params;                                                  \
  gs_CUresult name params {                                                           \
    void* real = real_of(GS_H_##name, 0);                                             \
    if (__builtin_expect(!real, 0) && !(real = resolve_export(GS_H_##name)))          \
      return GS_CUDA_ERROR_NOT_INITIALIZED;                                           \
    return body(GS_H_##name, real, GS_UNPAREN args);                                  \
  }                                                                                   \
  GS_SLOT(name, body, params, args, 1)                                                \
  GS_SLOT(name, body, params, args, 2)                                                \
  GS_SLOT(name, body, params, args, 3)
GS_HOOKS(X)
#undef X

static const gs_row g_rows[GS_H_COUNT] = {
#define X(name, base, pt, body, params, args) \
  {#name, base, pt, {(void*)name, (void*)name##_gs1, (void*)name##_gs2, (void*)name##_gs3}},
    GS_HOOKS(X)
#undef X
};

static int is_ours(const void* p) {
  int row, slot;
  for (row = 0; row < GS_H_COUNT; row++)
    for (slot = 0; slot < GS_SLOTS; slot++)
      if (g_rows[row].wrappers[slot] == p) return 1;
  return 0;
}

/* ---- finding the driver ---- */

static void init_real_dlsym(void) {
  void* p;
  if (__atomic_load_n(&gs_real_dlsym, __ATOMIC_ACQUIRE)) return;
  p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  __atomic_store_n(&gs_real_dlsym, p, __ATOMIC_RELEASE);
}

static void* next_dlsym(void* handle, const char* name) {
  dlsym_fn f = (dlsym_fn)__atomic_load_n(&gs_real_dlsym, __ATOMIC_ACQUIRE);
  return f ? f(handle, name) : NULL;
}

static pthread_once_t g_setup_once = PTHREAD_ONCE_INIT;

static void setup(void) {
  const char* report = getenv("GS_INTERPOSE_REPORT");
  g_census = report && *report;
  gs_driver_resolve(g_libcuda);
  gs_sample_setup(g_libcuda, getenv("GS_INTERPOSE_SAMPLE"));
  gs_interpose_started(report);
}

/* The process's libcuda: the handle it looked the driver up in, else the
 * one already loaded (never loading one). */
static void* libcuda(void) {
  void* h = __atomic_load_n(&g_libcuda, __ATOMIC_ACQUIRE);
  if (!h) {
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) __atomic_store_n(&g_libcuda, h, __ATOMIC_RELEASE);
  }
  return h;
}

/* A wrapper of `row` forwarding to `real`: the slot already bound to it,
 * else a free one. NULL when all are bound elsewhere (the caller hands out
 * the driver's own function, uncounted). */
static void* bind(int row, void* real) {
  int slot;
  if (!real || is_ours(real)) return NULL;
  for (slot = 0; slot < GS_SLOTS; slot++) {
    void* expected = NULL;
    if (real_of(row, slot) == real) return g_rows[row].wrappers[slot];
    if (__atomic_compare_exchange_n(&g_real[row][slot], &expected, real, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return g_rows[row].wrappers[slot];
    if (expected == real) return g_rows[row].wrappers[slot];
  }
  __atomic_fetch_add(&gs_stats.slots_full, 1, __ATOMIC_RELAXED);
  return NULL;
}

static void* resolve_export(int row) {
  void* h;
  void* real;
  init_real_dlsym();
  h = libcuda();
  if (!h) return NULL;
  real = next_dlsym(h, g_rows[row].name);
  dlerror(); /* a failed lookup of ours leaves no error for the caller's next dlerror() */
  if (!real || is_ours(real)) return NULL;
  {
    void* expected = NULL;
    __atomic_compare_exchange_n(&g_real[row][0], &expected, real, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  pthread_once(&g_setup_once, setup);
  return real_of(row, 0);
}

/* ---- cuGetProcAddress ---- */

typedef gs_CUresult (*fn_gpa_v2)(const char*, void**, int, uint64_t, int*);
typedef gs_CUresult (*fn_gpa_v1)(const char*, void**, int, uint64_t);
static void* g_gpa_v2; /* the driver's cuGetProcAddress_v2 and cuGetProcAddress */
static void* g_gpa_v1;

/* Every row's export, looked up once in the process's libcuda: the
 * addresses that tell which signature a cuGetProcAddress answer has. */
static int g_exports_resolved;

static void resolve_exports(void) {
  int row;
  if (__atomic_load_n(&g_exports_resolved, __ATOMIC_ACQUIRE)) return;
  for (row = 0; row < GS_H_COUNT; row++)
    if (!real_of(row, 0)) resolve_export(row);
  __atomic_store_n(&g_exports_resolved, 1, __ATOMIC_RELEASE);
}

/* The wrapper to hand out for the driver's answer `pfn` to a query of
 * `symbol`: the row whose libcuda export is `pfn` (whatever name was asked:
 * cuGraphInstantiate answers cuGraphInstantiateWithFlags from CUDA 12.0),
 * else, for a driver handing out an internal entry point, the one row of
 * that base name and stream flavour. */
static void* wrap_answer(const char* symbol, void* pfn, int version, uint64_t flags) {
  int row, match = -1, candidates = 0, pass;
  int per_thread = (flags & GS_CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  void* w;
  if (!pfn || is_ours(pfn)) return pfn;
  if (symbol[0] != 'c' || symbol[1] != 'u') return pfn;
  if (!strcmp(symbol, "cuGetProcAddress")) {
    /* the runtime asks for cuGetProcAddress itself: its _v2 from CUDA 12.0 */
    if (version >= 12000) {
      __atomic_store_n(&g_gpa_v2, pfn, __ATOMIC_RELEASE);
      return (void*)gs_cuGetProcAddress_v2;
    }
    __atomic_store_n(&g_gpa_v1, pfn, __ATOMIC_RELEASE);
    return (void*)gs_cuGetProcAddress;
  }
  resolve_exports();
  for (row = 0; row < GS_H_COUNT; row++) {
    if (real_of(row, 0) == pfn) {
      __atomic_fetch_add(&gs_stats.bound_by_export, 1, __ATOMIC_RELAXED);
      if (g_census) gs_interpose_note_lookup(symbol, version, flags, g_rows[row].name, 0);
      return g_rows[row].wrappers[0];
    }
  }
  /* Not an export: rows of this base in the asked flavour, else (entry
   * points with no per-thread flavour) the plain ones. */
  for (pass = 0; pass < 2 && !candidates; pass++) {
    for (row = 0; row < GS_H_COUNT; row++) {
      if (strcmp(g_rows[row].base, symbol) != 0) continue;
      if (g_rows[row].per_thread != (pass == 0 ? per_thread : 0)) continue;
      candidates++;
      match = row;
    }
  }
  if (match < 0) return pfn; /* not a counted entry point */
  /* Several rows of one base and flavour (cuStreamBeginCapture v1 and _v2)
   * differ in signature, and before CUDA 12.0 a base may name an older
   * one: without the export's address to tell them apart, the driver's
   * function goes out uncounted. */
  if (candidates != 1 || version < 12000) {
    __atomic_fetch_add(&gs_stats.unbound, 1, __ATOMIC_RELAXED);
    if (g_census) gs_interpose_note_lookup(symbol, version, flags, NULL, 1);
    return pfn;
  }
  w = bind(match, pfn);
  if (!w) return pfn;
  __atomic_fetch_add(&gs_stats.bound_by_rule, 1, __ATOMIC_RELAXED);
  if (g_census) gs_interpose_note_lookup(symbol, version, flags, g_rows[match].name, 2);
  return w;
}

gs_CUresult gs_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  fn_gpa_v2 real = (fn_gpa_v2)__atomic_load_n(&g_gpa_v2, __ATOMIC_ACQUIRE);
  gs_CUresult r;
  if (!real) return GS_CUDA_ERROR_NOT_INITIALIZED;
  r = real(symbol, pfn, version, flags, status);
  if (r == GS_CUDA_SUCCESS && pfn && symbol) *pfn = wrap_answer(symbol, *pfn, version, flags);
  return r;
}

gs_CUresult gs_cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  fn_gpa_v1 real = (fn_gpa_v1)__atomic_load_n(&g_gpa_v1, __ATOMIC_ACQUIRE);
  gs_CUresult r;
  if (!real) return GS_CUDA_ERROR_NOT_INITIALIZED;
  r = real(symbol, pfn, version, flags);
  if (r == GS_CUDA_SUCCESS && pfn && symbol) *pfn = wrap_answer(symbol, *pfn, version, flags);
  return r;
}

/* The driver's cuGetProcAddress[_v2] into *slot, on the first call of our
 * export of that name (a program linked to libcuda calls it directly). */
static void resolve_gpa(void** slot, const char* name, void* ours) {
  void* h;
  if (__atomic_load_n(slot, __ATOMIC_ACQUIRE)) return;
  init_real_dlsym();
  h = libcuda();
  if (h) {
    void* p = next_dlsym(h, name);
    dlerror();
    if (p && p != ours) __atomic_store_n(slot, p, __ATOMIC_RELEASE);
  }
  pthread_once(&g_setup_once, setup);
}

/* Exported under the driver's names for programs linked to libcuda. */
GS_EXPORT gs_CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status);
gs_CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  resolve_gpa(&g_gpa_v2, "cuGetProcAddress_v2", (void*)cuGetProcAddress_v2);
  return gs_cuGetProcAddress_v2(symbol, pfn, version, flags, status);
}

GS_EXPORT gs_CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags);
gs_CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  resolve_gpa(&g_gpa_v1, "cuGetProcAddress", (void*)cuGetProcAddress);
  return gs_cuGetProcAddress(symbol, pfn, version, flags);
}

/* ---- dlsym ---- */

/* What the exported dlsym answers before the next one is asked: a wrapper,
 * or NULL to let the next dlsym answer (the trampoline jumps there with the
 * caller's return address). RTLD_NEXT and RTLD_DEFAULT lookups are never
 * answered here: they are relative to their caller, and RTLD_DEFAULT finds
 * our exports by itself. */
void* gs_dlsym_hook(void* handle, const char* name) __attribute__((visibility("hidden")));
void* gs_dlsym_hook(void* handle, const char* name) {
  void* real;
  int row;
  init_real_dlsym();
  if (!name || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT || handle == RTLD_DEFAULT) return NULL;
  if (!strcmp(name, "cuGetProcAddress_v2") || !strcmp(name, "cuGetProcAddress")) {
    int v2 = name[16] == '_';
    real = next_dlsym(handle, name);
    dlerror();
    if (!real || is_ours(real)) return NULL;
    __atomic_store_n(&g_libcuda, handle, __ATOMIC_RELEASE);
    __atomic_store_n(v2 ? &g_gpa_v2 : &g_gpa_v1, real, __ATOMIC_RELEASE);
    pthread_once(&g_setup_once, setup);
    return v2 ? (void*)gs_cuGetProcAddress_v2 : (void*)gs_cuGetProcAddress;
  }
  for (row = 0; row < GS_H_COUNT; row++) {
    if (strcmp(g_rows[row].name, name) != 0) continue;
    real = next_dlsym(handle, name);
    dlerror();
    if (!real) return NULL;
    if (!__atomic_load_n(&g_libcuda, __ATOMIC_ACQUIRE)) __atomic_store_n(&g_libcuda, handle, __ATOMIC_RELEASE);
    pthread_once(&g_setup_once, setup);
    return bind(row, real);
  }
  return NULL;
}

#if defined(__x86_64__)
/* dlsym(handle, name): ask the hook with the arguments saved, then return
 * its answer or jump to the next dlsym with the caller's frame untouched. */
__asm__(
    ".text\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    "  .cfi_startproc\n"
    "  pushq %rdi\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  subq $8, %rsp\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  call gs_dlsym_hook\n"
    "  addq $8, %rsp\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  testq %rax, %rax\n"
    "  jnz 1f\n"
    /* no next dlsym found (never on glibc): answer NULL rather than jump to 0 */
    "  movq gs_real_dlsym(%rip), %rax\n"
    "  testq %rax, %rax\n"
    "  jz 1f\n"
    "  jmp *%rax\n"
    "1:\n"
    "  ret\n"
    "  .cfi_endproc\n"
    ".size dlsym, .-dlsym\n");
#else
#error "the interposer's dlsym trampoline is written for x86-64"
#endif

/* ---- what the report reads ---- */

int gs_interpose_rows(void) { return GS_H_COUNT; }
const char* gs_interpose_row_name(int row) { return g_rows[row].name; }
uint64_t gs_interpose_row_calls(int row) { return __atomic_load_n(&g_calls[row], __ATOMIC_RELAXED); }
int gs_interpose_row_bound(int row) {
  int slot, n = 0;
  for (slot = 0; slot < GS_SLOTS; slot++) n += real_of(row, slot) != NULL;
  return n;
}
