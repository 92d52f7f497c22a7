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
 * indirect call, a table lookup and relaxed atomic adds (counters.c); a
 * copy's host side, a lock-free search of the host memory registry
 * (hostmem.h). Nothing on those calls blocks or allocates, and nothing here
 * changes a call's arguments, result or error; the calls that page-lock or
 * free host memory, rare, take the registry's writers' lock after the
 * driver has answered. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <graphsignal/probe.h>

#include "counters.h"
#include "hooks.h"
#include "hostmem.h"
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
  const char* body;
  void* wrappers[GS_SLOTS];
} gs_row;

/* real[row][slot]: the driver function a wrapper forwards to (atomic). */
static void* g_real[GS_H_COUNT][GS_SLOTS];
/* calls[row]: per-row call counts, kept only for the report (GRAPHSIGNAL_INTERPOSE_REPORT) */
static uint64_t g_calls[GS_H_COUNT];
static int g_census;

static void* g_libcuda;                                     /* the handle the process looked the driver up in */
typedef void* (*dlsym_fn)(void*, const char*);
void* gs_real_dlsym __attribute__((visibility("hidden"))); /* the next dlsym (read by the trampoline) */

gs_interpose_stats gs_stats;

static inline void* real_of(int row, int slot) { return __atomic_load_n(&g_real[row][slot], __ATOMIC_ACQUIRE); }

static void* resolve_export(int row);

/* ---- counting bodies (bodies.h): forward, then count what ran ---- */

#include "bodies.h"

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
  {#name, base, pt, #body, {(void*)name, (void*)name##_gs1, (void*)name##_gs2, (void*)name##_gs3}},
    GS_HOOKS(X)
#undef X
};

/* A row that makes page-locked or managed host memory handed out
 * uncounted: memory it makes is not seen, so the host memory registry can
 * no longer call memory it does not hold pageable (hostmem.h). */
static void uncounted(int row) {
  static const char* const makers[] = {"b_host_alloc", "b_alloc_host",     "b_alloc_host_v1", "b_host_register",
                                       "b_alloc_managed", "b_mem_map", "b_pool_create"};
  size_t i;
  for (i = 0; i < sizeof makers / sizeof makers[0]; i++)
    if (!strcmp(g_rows[row].body, makers[i])) gs_hostmem_unsure(GS_UNSURE_UNBOUND);
}

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

/* GRAPHSIGNAL_CUDA_SAMPLE: one graph launch in N timed (0: none); under
 * graphsignal-run 16 when unset, else none. GRAPHSIGNAL_CUDA_SAMPLE_RATE:
 * at most this many timed launches a second in the process (100 when
 * unset; 0: no cap). graphsignal-run checks both before the workload starts
 * (graphsignal.envcheck); here a value that is not a number means 0. */
static void setup(void) {
  const char* report = getenv("GRAPHSIGNAL_INTERPOSE_REPORT");
  const char* period = getenv("GRAPHSIGNAL_CUDA_SAMPLE");
  const char* rate = getenv("GRAPHSIGNAL_CUDA_SAMPLE_RATE");
  const char* run = getenv(GRAPHSIGNAL_RUN_ID_ENV);
  if (!period || !*period) period = run && *run ? "16" : "0";
  if (!rate || !*rate) rate = "100";
  g_census = report && *report;
  gs_driver_resolve(g_libcuda);
  gs_sample_setup(g_libcuda, period, rate);
  gs_interpose_started(report);
  gs_flush_setup();
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
  uncounted(row);
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
    uncounted(match);
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
