/* A stand-in libcuda.so.1 for the interposer's tests on machines without a
 * GPU: the driver entry points the interposer hooks, with the semantics it
 * relies on (function names, stream capture, graphs made of captured
 * launches, error returns), and cuGetProcAddress answering from its own
 * table, as the real driver does, never through dlsym.
 *
 * FAKE_CUDA_INTERNAL=1: cuGetProcAddress answers internal entry points
 * (not the exported functions) for the launch and sync families, as a
 * driver may; the interposer must then bind them by name and flavour.
 * FAKE_CUDA_SYNC_US=N: cuStreamSynchronize sleeps N microseconds (a wait of
 * known length, for the interposer's sync time).
 * fake_calls() tells how often each entry point really ran. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
typedef int CUresult;

typedef struct fake_fn { const char* name; } fake_fn;
typedef struct fake_graph fake_graph;
typedef struct fake_node { int type; fake_fn* fn; fake_graph* child; } fake_node;
struct fake_graph { int n; fake_node nodes[256]; };
typedef struct fake_stream { int capturing; fake_graph* graph; } fake_stream;
typedef struct fake_exec { fake_graph* graph; } fake_exec;

static uint64_t g_runs[64]; /* per entry point: how often it ran (not captured) */
enum { R_LAUNCH, R_LAUNCH_EX, R_COOP, R_GRAPH, R_SYNC_STREAM, R_SYNC_CTX, R_SYNC_EVENT, R_COPY, R_SET, R_MAX };

EXPORT uint64_t fake_calls(int what) { return __atomic_load_n(&g_runs[what], __ATOMIC_RELAXED); }
EXPORT void* fake_function(const char* name) {
  fake_fn* f = calloc(1, sizeof *f);
  f->name = strdup(name);
  return f;
}
EXPORT void* fake_stream_new(void) { return calloc(1, sizeof(fake_stream)); }

static void run(int what) { __atomic_fetch_add(&g_runs[what], 1, __ATOMIC_RELAXED); }

static CUresult launch(void* f, void* s, int what) {
  fake_stream* st = (fake_stream*)s;
  if (!f) return 1; /* CUDA_ERROR_INVALID_VALUE */
  if (st && st->capturing) {
    if (st->graph->n < 256) {
      st->graph->nodes[st->graph->n].type = 0;
      st->graph->nodes[st->graph->n++].fn = (fake_fn*)f;
    }
    return 0;
  }
  run(what);
  return 0;
}

EXPORT CUresult cuLaunchKernel(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                               unsigned shm, void* s, void** p, void** x) {
  (void)a, (void)b, (void)c, (void)d, (void)e, (void)g, (void)shm, (void)p, (void)x;
  return launch(f, s, R_LAUNCH);
}
EXPORT CUresult cuLaunchKernel_ptsz(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                                    unsigned shm, void* s, void** p, void** x) {
  return cuLaunchKernel(f, a, b, c, d, e, g, shm, s, p, x);
}
static CUresult internal_launch(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                                unsigned shm, void* s, void** p, void** x) {
  return cuLaunchKernel(f, a, b, c, d, e, g, shm, s, p, x);
}
typedef struct { unsigned v[7]; void* stream; void* attrs; unsigned n; } launch_config;
EXPORT CUresult cuLaunchKernelEx(const launch_config* c, void* f, void** p, void** x) {
  (void)p, (void)x;
  return launch(f, c ? c->stream : NULL, R_LAUNCH_EX);
}
EXPORT CUresult cuLaunchCooperativeKernel(void* f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
                                          unsigned g, unsigned shm, void* s, void** p) {
  (void)a, (void)b, (void)c, (void)d, (void)e, (void)g, (void)shm, (void)p;
  return launch(f, s, R_COOP);
}
EXPORT CUresult cuFuncGetName(const char** name, void* f) {
  if (!f || !name) return 1;
  *name = ((fake_fn*)f)->name;
  return 0;
}
EXPORT CUresult cuStreamBeginCapture_v2(void* s, int mode) {
  fake_stream* st = (fake_stream*)s;
  (void)mode;
  if (!st || st->capturing) return 1;
  st->capturing = 1;
  st->graph = calloc(1, sizeof(fake_graph));
  return 0;
}
EXPORT CUresult cuStreamEndCapture(void* s, void** graph) {
  fake_stream* st = (fake_stream*)s;
  if (!st || !st->capturing) return 1;
  st->capturing = 0;
  *graph = st->graph;
  st->graph = NULL;
  return 0;
}
EXPORT CUresult cuStreamIsCapturing(void* s, int* status) {
  *status = s && ((fake_stream*)s)->capturing;
  return 0;
}
EXPORT CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) {
  fake_exec* e;
  (void)flags;
  if (!exec || !graph) return 1;
  e = calloc(1, sizeof *e);
  e->graph = (fake_graph*)graph;
  *exec = e;
  return 0;
}
EXPORT CUresult cuGraphExecUpdate_v2(void* exec, void* graph, void* info) {
  (void)info;
  if (!exec || !graph) return 1;
  ((fake_exec*)exec)->graph = (fake_graph*)graph;
  return 0;
}
EXPORT CUresult cuGraphLaunch(void* exec, void* s) {
  fake_stream* st = (fake_stream*)s;
  if (!exec) return 1;
  if (st && st->capturing) return 0;
  run(R_GRAPH);
  return 0;
}
EXPORT CUresult cuGraphGetNodes(void* graph, void** nodes, size_t* n) {
  fake_graph* g = (fake_graph*)graph;
  int i;
  if (!g || !n) return 1;
  if (nodes)
    for (i = 0; i < g->n && (size_t)i < *n; i++) nodes[i] = &g->nodes[i];
  *n = (size_t)g->n;
  return 0;
}
EXPORT CUresult cuGraphNodeGetType(void* node, int* type) {
  *type = ((fake_node*)node)->type;
  return 0;
}
EXPORT CUresult cuGraphKernelNodeGetParams_v2(void* node, void* params) {
  memset(params, 0, 72);
  *(void**)params = ((fake_node*)node)->fn;
  return 0;
}
EXPORT CUresult cuGraphChildGraphNodeGetGraph(void* node, void** graph) {
  *graph = ((fake_node*)node)->child;
  return 0;
}
EXPORT CUresult cuStreamSynchronize(void* s) {
  const char* us = getenv("FAKE_CUDA_SYNC_US");
  (void)s;
  if (us && *us) {
    long n = atol(us);
    struct timespec t = {n / 1000000, (n % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0) {
    }
  }
  run(R_SYNC_STREAM);
  return 0;
}
static CUresult internal_stream_sync(void* s) { return cuStreamSynchronize(s); }
EXPORT CUresult cuCtxSynchronize(void) {
  run(R_SYNC_CTX);
  return 0;
}
EXPORT CUresult cuEventSynchronize(void* e) {
  (void)e;
  run(R_SYNC_EVENT);
  return 0;
}
EXPORT CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* h, size_t n) {
  (void)d, (void)h, (void)n;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* h, unsigned long long d, size_t n, void* s) {
  (void)h, (void)d, (void)n;
  if (s && ((fake_stream*)s)->capturing) return 0;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemsetD32Async(unsigned long long d, unsigned v, size_t n, void* s) {
  (void)d, (void)v, (void)n, (void)s;
  run(R_SET);
  return 0;
}
EXPORT CUresult cuMemAlloc_v2(unsigned long long* p, size_t n) {
  *p = (unsigned long long)(uintptr_t)malloc(n ? n : 1);
  return 0;
}

/* events: a record takes the host's clock; every event is complete at once */
#include <time.h>
static int g_ctx_token;
typedef struct { double ms; } fake_event;
EXPORT CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = &g_ctx_token;
  return 0;
}
EXPORT CUresult cuCtxSetCurrent(void* ctx) { return ctx == &g_ctx_token ? 0 : 1; }
/* one device, ordinal 0, whose UUID is the bytes 0xa0..0xaf; built with
 * -DFAKE_OLD_DRIVER, a driver without cuCtxGetDevice */
#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuCtxGetDevice(int* dev) {
  *dev = 0;
  return 0;
}
#endif
EXPORT CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal != 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = 0;
  return 0;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int dev) {
  int i;
  if (dev != 0) return 101;
  for (i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xa0 + i);
  return 0;
}
/* FAKE_CUDA_BUSY=1: every stream still has work queued (600, CUDA_ERROR_NOT_READY), so a sampled
 * launch's event pair is taken as it is; else every stream is idle and the host's share comes out */
EXPORT CUresult cuStreamQuery(void* s) {
  const char* busy = getenv("FAKE_CUDA_BUSY");
  (void)s;
  return busy && *busy == '1' ? 600 : 0;
}
EXPORT CUresult cuEventCreate(void** e, unsigned flags) {
  (void)flags;
  *e = calloc(1, sizeof(fake_event));
  return 0;
}
EXPORT CUresult cuEventRecord(void* e, void* s) {
  struct timespec ts;
  if (s && ((fake_stream*)s)->capturing) return 900; /* recording into a capture is the caller's bug here */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((fake_event*)e)->ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  return 0;
}
EXPORT CUresult cuEventRecord_ptsz(void* e, void* s) { return cuEventRecord(e, s); }
EXPORT CUresult cuEventQuery(void* e) { return e ? 0 : 1; }
EXPORT CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
  *ms = (float)(((fake_event*)b)->ms - ((fake_event*)a)->ms);
  return 0;
}

/* cuGetProcAddress: the driver's own table (base name -> functions) */
typedef struct { const char* base; void* plain; void* per_thread; void* internal; } entry;
static const entry g_table[] = {
    {"cuLaunchKernel", (void*)cuLaunchKernel, (void*)cuLaunchKernel_ptsz, (void*)internal_launch},
    {"cuLaunchKernelEx", (void*)cuLaunchKernelEx, NULL, NULL},
    {"cuLaunchCooperativeKernel", (void*)cuLaunchCooperativeKernel, NULL, NULL},
    {"cuFuncGetName", (void*)cuFuncGetName, NULL, NULL},
    {"cuStreamBeginCapture", (void*)cuStreamBeginCapture_v2, NULL, NULL},
    {"cuStreamEndCapture", (void*)cuStreamEndCapture, NULL, NULL},
    {"cuStreamIsCapturing", (void*)cuStreamIsCapturing, NULL, NULL},
    {"cuGraphInstantiateWithFlags", (void*)cuGraphInstantiateWithFlags, NULL, NULL},
    {"cuGraphInstantiate", (void*)cuGraphInstantiateWithFlags, NULL, NULL},
    {"cuGraphExecUpdate", (void*)cuGraphExecUpdate_v2, NULL, NULL},
    {"cuGraphLaunch", (void*)cuGraphLaunch, NULL, NULL},
    {"cuStreamSynchronize", (void*)cuStreamSynchronize, NULL, (void*)internal_stream_sync},
    {"cuCtxSynchronize", (void*)cuCtxSynchronize, NULL, NULL},
    {"cuEventSynchronize", (void*)cuEventSynchronize, NULL, NULL},
    {"cuMemcpyHtoD", (void*)cuMemcpyHtoD_v2, NULL, NULL},
    {"cuMemcpyDtoHAsync", (void*)cuMemcpyDtoHAsync_v2, NULL, NULL},
    {"cuMemsetD32Async", (void*)cuMemsetD32Async, NULL, NULL},
    {"cuMemAlloc", (void*)cuMemAlloc_v2, NULL, NULL},
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags,
                                    int* status);
EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  size_t i;
  const char* internal = getenv("FAKE_CUDA_INTERNAL");
  (void)version;
  if (!symbol || !pfn) return 1;
  if (!strcmp(symbol, "cuGetProcAddress")) {
    *pfn = version >= 12000 ? (void*)cuGetProcAddress_v2 : (void*)cuGetProcAddress;
    return 0;
  }
  for (i = 0; i < sizeof g_table / sizeof g_table[0]; i++) {
    if (strcmp(g_table[i].base, symbol) != 0) continue;
    *pfn = g_table[i].plain;
    if ((flags & 2) && g_table[i].per_thread) *pfn = g_table[i].per_thread;
    if (internal && *internal == '1' && g_table[i].internal && !(flags & 2)) *pfn = g_table[i].internal;
    return 0;
  }
  *pfn = NULL;
  return 500; /* CUDA_ERROR_NOT_FOUND */
}
EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags,
                                    int* status) {
  CUresult r = cuGetProcAddress(symbol, pfn, version, flags);
  if (status) *status = r == 0 ? 0 : 1;
  return r;
}
