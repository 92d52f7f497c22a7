/* A stand-in libcuda.so.1 for the interposer's tests on machines without a
 * GPU: the driver entry points the interposer hooks, with the semantics it
 * relies on (function names, stream capture, graphs made of captured
 * launches, error returns), and cuGetProcAddress answering from its own
 * table, as the real driver does, never through dlsym.
 *
 * FAKE_CUDA_INTERNAL=1: cuGetProcAddress answers internal entry points
 * (not the exported functions) for the launch and sync families and
 * cuMemAllocHost, as a driver may; the interposer must then bind them by
 * name and flavour (or, where the name has two signatures, hand them out
 * uncounted).
 * FAKE_CUDA_SYNC_US=N: cuStreamSynchronize sleeps N microseconds (a wait of
 * known length, for the interposer's sync time).
 * Host memory as the driver keeps it: page-locked allocations and
 * registrations (a registration that overlaps another fails, an
 * unregister or free of what is not there fails), managed memory,
 * allocations made at a location and mapped (cuMemCreate, cuMemMap), memory
 * pools. A page-locking call asked for more than 1 TiB fails with
 * CUDA_ERROR_OUT_OF_MEMORY, and writes a decoy pointer through pp all the
 * same (a caller must not trust it); a registration with flag bit 31 fails
 * with CUDA_ERROR_INVALID_VALUE. Copies move nothing: their pointers are
 * never read.
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
enum { R_LAUNCH, R_LAUNCH_EX, R_COOP, R_GRAPH, R_SYNC_STREAM, R_SYNC_CTX, R_SYNC_EVENT, R_COPY, R_SET, R_CTX_GET, R_MAX };

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

EXPORT CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* h, size_t n, void* s) {
  (void)d, (void)h, (void)n;
  if (s && ((fake_stream*)s)->capturing) return 0;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpyDtoH_v2(void* h, unsigned long long d, size_t n) {
  (void)h, (void)d, (void)n;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpyDtoD_v2(unsigned long long a, unsigned long long b, size_t n) {
  (void)a, (void)b, (void)n;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpyAsync(unsigned long long a, unsigned long long b, size_t n, void* s) {
  (void)a, (void)b, (void)n, (void)s;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpy2D_v2(const void* p) {
  if (!p) return 1;
  run(R_COPY);
  return 0;
}
EXPORT CUresult cuMemcpy2DAsync_v2(const void* p, void* s) {
  (void)s;
  if (!p) return 1;
  run(R_COPY);
  return 0;
}

/* host memory: what is page-locked, registered or managed now */
#include <pthread.h>
enum { PINNED, REGISTERED, MANAGED };
typedef struct held { char* p; size_t n; int what; struct held* next; } held;
static held* g_held;
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_decoy[4096];
#define TOO_BIG (1ull << 40)

static void hold(void* p, size_t n, int what) {
  held* h = calloc(1, sizeof *h);
  h->p = (char*)p, h->n = n, h->what = what;
  pthread_mutex_lock(&g_held_mu);
  h->next = g_held, g_held = h;
  pthread_mutex_unlock(&g_held_mu);
}
/* removes and frees the entry of p made by `what` (0: none there) */
static int release(void* p, int what) {
  held **pp, *h;
  pthread_mutex_lock(&g_held_mu);
  for (pp = &g_held; (h = *pp) != NULL; pp = &h->next)
    if (h->p == (char*)p && h->what == what) break;
  if (h) *pp = h->next;
  pthread_mutex_unlock(&g_held_mu);
  free(h);
  return h != NULL;
}
static int overlaps_registered(const char* p, size_t n) {
  held* h;
  int hit = 0;
  pthread_mutex_lock(&g_held_mu);
  for (h = g_held; h; h = h->next)
    if (h->what == REGISTERED && p < h->p + h->n && h->p < p + n) hit = 1;
  pthread_mutex_unlock(&g_held_mu);
  return hit;
}

EXPORT CUresult cuMemHostAlloc(void** pp, size_t n, unsigned flags) {
  (void)flags;
  if (!pp || !n) return 1;
  if (n > TOO_BIG) {
    *pp = g_decoy;
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  }
  *pp = malloc(n);
  hold(*pp, n, PINNED);
  return 0;
}
EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t n) { return cuMemHostAlloc(pp, n, 0); }
EXPORT CUresult cuMemAllocHost(void** pp, unsigned n) { return cuMemHostAlloc(pp, n, 0); }
static CUresult internal_alloc_host(void** pp, size_t n) { return cuMemHostAlloc(pp, n, 0); }
EXPORT CUresult cuMemFreeHost(void* p) {
  if (!release(p, PINNED)) return 1;
  free(p);
  return 0;
}
EXPORT CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned flags) {
  if (!p || !n || (flags & 0x80000000u)) return 1;
  if (overlaps_registered((char*)p, n)) return 712; /* CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED */
  hold(p, n, REGISTERED);
  return 0;
}
EXPORT CUresult cuMemHostRegister(void* p, size_t n, unsigned flags) { return cuMemHostRegister_v2(p, n, flags); }
EXPORT CUresult cuMemHostUnregister(void* p) {
  return release(p, REGISTERED) ? 0 : 713; /* CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED */
}
EXPORT CUresult cuMemAllocManaged(unsigned long long* p, size_t n, unsigned flags) {
  void* m;
  (void)flags;
  if (!p || !n) return 1;
  m = malloc(n);
  hold(m, n, MANAGED);
  *p = (unsigned long long)(uintptr_t)m;
  return 0;
}
EXPORT CUresult cuMemFree_v2(unsigned long long p) { /* managed memory, or cuMemAlloc_v2's */
  release((void*)(uintptr_t)p, MANAGED);
  free((void*)(uintptr_t)p);
  return 0;
}

/* allocations at a location (CUmemAllocationProp: location.type at byte 8), mapped anywhere */
typedef struct { int type, handle_types, location_type, location_id; } fake_prop_head;
typedef struct { fake_prop_head prop; size_t n; } fake_alloc;
EXPORT CUresult cuMemCreate(unsigned long long* handle, size_t n, const fake_prop_head* prop, unsigned long long f) {
  fake_alloc* a;
  (void)f;
  if (!handle || !prop || !n) return 1;
  a = calloc(1, sizeof *a);
  a->prop = *prop, a->n = n;
  *handle = (unsigned long long)(uintptr_t)a;
  return 0;
}
EXPORT CUresult cuMemRelease(unsigned long long handle) {
  free((void*)(uintptr_t)handle);
  return 0;
}
EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(void* prop, unsigned long long handle) {
  if (!prop || !handle) return 1;
  memset(prop, 0, 32);
  memcpy(prop, &((fake_alloc*)(uintptr_t)handle)->prop, sizeof(fake_prop_head));
  return 0;
}
EXPORT CUresult cuMemMap(unsigned long long ptr, size_t n, size_t off, unsigned long long handle,
                         unsigned long long f) {
  (void)off, (void)f;
  if (!ptr || !handle || n > ((fake_alloc*)(uintptr_t)handle)->n) return 1;
  return 0;
}
EXPORT CUresult cuMemUnmap(unsigned long long ptr, size_t n) { return ptr && n ? 0 : 1; }
EXPORT CUresult cuMemPoolCreate(void** pool, const fake_prop_head* props) {
  if (!pool || !props) return 1;
  *pool = calloc(1, 64);
  return 0;
}

/* events: a record takes the host's clock; every event is complete at once */
#include <time.h>
/* FAKE_CUDA_DEVICES=N (1 to 8, default 1): N devices, each with one
 * context (fake_context(ordinal)); a thread's current context is device
 * 0's until cuCtxSetCurrent changes it. Built with -DFAKE_OLD_DRIVER, a
 * driver without cuCtxGetDevice and cuDeviceGetCount. */
static int g_ctx_token[8];
typedef struct { double ms; } fake_event;
static __thread int* t_current;
static int devices(void) {
  const char* n = getenv("FAKE_CUDA_DEVICES");
  int d = n ? atoi(n) : 1;
  return d < 1 ? 1 : d > 8 ? 8 : d;
}
EXPORT void* fake_context(int ordinal) { return ordinal >= 0 && ordinal < devices() ? &g_ctx_token[ordinal] : NULL; }
EXPORT CUresult cuCtxGetCurrent(void** ctx) {
  run(R_CTX_GET);
  *ctx = t_current ? t_current : &g_ctx_token[0];
  return 0;
}
EXPORT CUresult cuCtxSetCurrent(void* ctx) {
  int* c = (int*)ctx;
  if (c < &g_ctx_token[0] || c >= &g_ctx_token[devices()]) return 1;
  t_current = c;
  return 0;
}
#ifndef FAKE_OLD_DRIVER
EXPORT CUresult cuCtxGetDevice(int* dev) {
  *dev = (int)((t_current ? t_current : &g_ctx_token[0]) - g_ctx_token);
  return 0;
}
EXPORT CUresult cuDeviceGetCount(int* n) {
  *n = devices();
  return 0;
}
#endif
EXPORT CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= devices()) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}
EXPORT CUresult cuDeviceGetUuid_v2(unsigned char* uuid, int dev) {
  int i;
  if (dev < 0 || dev >= devices()) return 101;
  for (i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xa0 + i);
  uuid[15] = (unsigned char)(0xaf + dev); /* device 0: 0xa0..0xaf */
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
    {"cuMemcpyHtoDAsync", (void*)cuMemcpyHtoDAsync_v2, NULL, NULL},
    {"cuMemcpyDtoH", (void*)cuMemcpyDtoH_v2, NULL, NULL},
    {"cuMemcpyDtoD", (void*)cuMemcpyDtoD_v2, NULL, NULL},
    {"cuMemcpyAsync", (void*)cuMemcpyAsync, NULL, NULL},
    {"cuMemcpy2D", (void*)cuMemcpy2D_v2, NULL, NULL},
    {"cuMemcpy2DAsync", (void*)cuMemcpy2DAsync_v2, NULL, NULL},
    {"cuMemHostAlloc", (void*)cuMemHostAlloc, NULL, NULL},
    {"cuMemAllocHost", (void*)cuMemAllocHost_v2, NULL, (void*)internal_alloc_host},
    {"cuMemFreeHost", (void*)cuMemFreeHost, NULL, NULL},
    {"cuMemHostRegister", (void*)cuMemHostRegister_v2, NULL, NULL},
    {"cuMemHostUnregister", (void*)cuMemHostUnregister, NULL, NULL},
    {"cuMemAllocManaged", (void*)cuMemAllocManaged, NULL, NULL},
    {"cuMemFree", (void*)cuMemFree_v2, NULL, NULL},
    {"cuMemCreate", (void*)cuMemCreate, NULL, NULL},
    {"cuMemRelease", (void*)cuMemRelease, NULL, NULL},
    {"cuMemMap", (void*)cuMemMap, NULL, NULL},
    {"cuMemUnmap", (void*)cuMemUnmap, NULL, NULL},
    {"cuMemPoolCreate", (void*)cuMemPoolCreate, NULL, NULL},
    {"cuCtxSetCurrent", (void*)cuCtxSetCurrent, NULL, NULL},
    {"cuCtxGetCurrent", (void*)cuCtxGetCurrent, NULL, NULL},
};
/* names whose signature changed: asked for a version before `since`, the old function answers */
static const struct { const char* base; int since; void* old; } g_old[] = {
    {"cuMemAllocHost", 3020, (void*)cuMemAllocHost},
    {"cuMemHostRegister", 6050, (void*)cuMemHostRegister},
};

EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags,
                                    int* status);
EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  size_t i;
  const char* internal = getenv("FAKE_CUDA_INTERNAL");
  if (!symbol || !pfn) return 1;
  if (!strcmp(symbol, "cuGetProcAddress")) {
    *pfn = version >= 12000 ? (void*)cuGetProcAddress_v2 : (void*)cuGetProcAddress;
    return 0;
  }
  for (i = 0; i < sizeof g_table / sizeof g_table[0]; i++) {
    if (strcmp(g_table[i].base, symbol) != 0) continue;
    size_t j;
    *pfn = g_table[i].plain;
    for (j = 0; j < sizeof g_old / sizeof g_old[0]; j++)
      if (!strcmp(g_old[j].base, symbol) && version < g_old[j].since) *pfn = g_old[j].old;
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
