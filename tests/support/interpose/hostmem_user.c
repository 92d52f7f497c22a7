/* Copies from host memory of every kind, for the interposer's host memory
 * registry (csrc/interpose/hostmem.h), against the stand-in libcuda
 * (fake_libcuda.c), reached as the CUDA runtime reaches the driver
 * (cuGetProcAddress_v2, and dlsym for one entry point). Prints one JSON
 * line: the copies it made per kind and host memory, as the interposer's
 * report names them ("copies_host_memory"), tallied from what this
 * program knows of its own memory.
 *
 *   hostmem_user split THREADS ITERS   THREADS threads copy from page-locked
 *       (cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister, the old 32-bit
 *       cuMemAllocHost, a host-located cuMemMap), managed and pageable
 *       memory, synchronous and asynchronous, 1D and 2D, while another
 *       thread page-locks, registers, unregisters and frees buffers of its
 *       own; then failed calls, an unregister, a table filled past
 *       GS_HOSTMEM_MAX and emptied again.
 *   hostmem_user unsure                  cuMemAllocHost handed out uncounted
 *       (run with FAKE_CUDA_INTERNAL=1) and a pool created on the host. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_abi.h"
#include "hostmem.h"

typedef int CUresult;
typedef unsigned long long dptr;
typedef CUresult (*gpa_t)(const char*, void**, int, unsigned long long, int*);

static CUresult (*p_htod)(dptr, const void*, size_t);
static CUresult (*p_htod_async)(dptr, const void*, size_t, void*);
static CUresult (*p_dtoh)(void*, dptr, size_t);
static CUresult (*p_dtoh_async)(void*, dptr, size_t, void*);
static CUresult (*p_dtod)(dptr, dptr, size_t);
static CUresult (*p_copy_async)(dptr, dptr, size_t, void*);
static CUresult (*p_2d)(const gs_Memcpy2D*);
static CUresult (*p_2d_async)(const gs_Memcpy2D*, void*);
static CUresult (*p_host_alloc)(void**, size_t, unsigned);
static CUresult (*p_alloc_host)(void**, size_t);
static CUresult (*p_alloc_host_v1)(void**, unsigned);
static CUresult (*p_free_host)(void*);
static CUresult (*p_register)(void*, size_t, unsigned);
static CUresult (*p_register_v1)(void*, size_t, unsigned);
static CUresult (*p_unregister)(void*);
static CUresult (*p_alloc_managed)(dptr*, size_t, unsigned);
static CUresult (*p_free)(dptr);
static CUresult (*p_create)(unsigned long long*, size_t, const gs_MemAllocationProp*, unsigned long long);
static CUresult (*p_release)(unsigned long long);
static CUresult (*p_map)(dptr, size_t, size_t, unsigned long long, unsigned long long);
static CUresult (*p_unmap)(dptr, size_t);
static CUresult (*p_pool_create)(void**, const void*);

/* what this program copied, per (kind, host memory) as the report names it */
enum { HTOD_PINNED, HTOD_PAGEABLE, HTOD_MANAGED, HTOD_UNKNOWN, DTOH_PINNED, DTOH_PAGEABLE, HTOH_PINNED,
       HTOH_PINNED_PAGEABLE, DEFAULT_NONE, DTOD_NONE, N_EXPECT };
static struct { int kind; const char* mem; long long calls, bytes; } g_exp[N_EXPECT] = {
    {1, "pinned", 0, 0}, {1, "pageable", 0, 0}, {1, "managed", 0, 0}, {1, "unknown", 0, 0},
    {2, "pinned", 0, 0}, {2, "pageable", 0, 0}, {9, "pinned", 0, 0}, {9, "pinned+pageable", 0, 0},
    {0, "none", 0, 0}, {8, "none", 0, 0}};

static void expect(int e, size_t n) {
  __atomic_fetch_add(&g_exp[e].calls, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_exp[e].bytes, (long long)n, __ATOMIC_RELAXED);
}

static void check(CUresult r, CUresult want, const char* what) {
  if (r != want) {
    fprintf(stderr, "hostmem_user: %s returned %d, not %d\n", what, r, want);
    exit(3);
  }
}

static void htod(const void* h, size_t n, int e) {
  check(p_htod(0x1000, h, n), 0, "cuMemcpyHtoD");
  expect(e, n);
}
static void htod_async(const void* h, size_t n, void* s, int e) {
  check(p_htod_async(0x1000, h, n, s), 0, "cuMemcpyHtoDAsync");
  expect(e, n);
}
static void copy_2d(int src_type, const void* src, int dst_type, void* dst, size_t w, size_t h, int async, int e) {
  gs_Memcpy2D p;
  memset(&p, 0, sizeof p);
  /* the first byte read or written lies 2 rows and 8 bytes into the buffer */
  p.srcMemoryType = src_type, p.srcDevice = 0x1000, p.srcXInBytes = 8, p.srcY = 2, p.srcPitch = 64;
  p.dstMemoryType = dst_type, p.dstDevice = 0x2000, p.dstXInBytes = 8, p.dstY = 2, p.dstPitch = 64;
  if (src) p.srcHost = (const char*)src - 2 * 64 - 8;
  if (dst) p.dstHost = (char*)dst - 2 * 64 - 8;
  p.WidthInBytes = w, p.Height = h;
  check(async ? p_2d_async(&p, NULL) : p_2d(&p), 0, "cuMemcpy2D");
  expect(e, w * h);
}

#define SIZE (1 << 20)
static char *g_a, *g_b, *g_r, *g_p, *g_q, *g_v, *g_w, *g_v1, *g_decoy, *g_m;
static int g_iters = 1000;
static int g_done;
static long g_churn_rounds;

static void* worker(void* arg) {
  char stack[128];
  int i;
  (void)arg;
  for (i = 0; i < g_iters; i++) {
    htod(g_a + i % 64, 64, HTOD_PINNED);
    htod(g_a + SIZE - 1, 1, HTOD_PINNED); /* the last byte is in the range, */
    htod(g_a + SIZE, 1, HTOD_PAGEABLE);   /* the one past it is not */
    htod_async(g_r + 8, 128, NULL, HTOD_PINNED);
    check(p_dtoh(g_p + 16, 0x1000, 256), 0, "cuMemcpyDtoH");
    expect(DTOH_PAGEABLE, 256);
    check(p_dtoh_async(g_b + 4, 0x1000, 32, NULL), 0, "cuMemcpyDtoHAsync");
    expect(DTOH_PINNED, 32);
    htod(g_m, 16, HTOD_MANAGED);
    htod(g_decoy, 8, HTOD_PAGEABLE); /* what a failed cuMemHostAlloc wrote through its pointer */
    htod(g_q, 24, HTOD_PAGEABLE);    /* memory whose cuMemHostRegister failed */
    htod(g_v + 64, 48, HTOD_PINNED); /* mapped from an allocation on the host */
    htod(g_w, 8, HTOD_PAGEABLE);     /* mapped from one on the device: never recorded as host memory */
    htod(g_v1, 56, HTOD_PINNED);     /* the old cuMemAllocHost's */
    htod(stack, 72, HTOD_PAGEABLE);
    copy_2d(GS_CU_MEMORYTYPE_HOST, g_p + 1000, GS_CU_MEMORYTYPE_DEVICE, NULL, 16, 4, 0, HTOD_PAGEABLE);
    copy_2d(GS_CU_MEMORYTYPE_DEVICE, NULL, GS_CU_MEMORYTYPE_HOST, g_a + 1000, 32, 2, 1, DTOH_PINNED);
    copy_2d(GS_CU_MEMORYTYPE_HOST, g_a + 2000, GS_CU_MEMORYTYPE_HOST, g_p + 2000, 8, 8, 0, HTOH_PINNED_PAGEABLE);
    copy_2d(GS_CU_MEMORYTYPE_HOST, g_a + 3000, GS_CU_MEMORYTYPE_HOST, g_b + 3000, 4, 4, 1, HTOH_PINNED);
    /* a unified copy does not say its direction: counted as before, without host memory */
    check(p_copy_async(0x1000, (dptr)(uintptr_t)g_a, 40, NULL), 0, "cuMemcpyAsync");
    expect(DEFAULT_NONE, 40);
    check(p_dtod(0x2000, 0x1000, 80), 0, "cuMemcpyDtoD");
    expect(DTOD_NONE, 80);
  }
  return NULL;
}

/* page-locks, registers, unregisters and frees its own buffers while the
 * workers copy, keeping up to 32 page-locked at once */
static void* churn(void* arg) {
  char* ring[32] = {0};
  long r;
  int i;
  (void)arg;
  for (r = 0; !__atomic_load_n(&g_done, __ATOMIC_ACQUIRE) || r < 200; r++) {
    char** slot = &ring[r % 32];
    char* q;
    if (*slot) check(p_free_host(*slot), 0, "cuMemFreeHost");
    check(p_alloc_host((void**)slot, 4096 + (size_t)(r % 7) * 64), 0, "cuMemAllocHost");
    htod(*slot + 100, 8, HTOD_PINNED);
    q = malloc(8192);
    check(p_register(q, 8192, 0), 0, "cuMemHostRegister");
    htod(q + 100, 8, HTOD_PINNED);
    check(p_unregister(q), 0, "cuMemHostUnregister");
    htod(q + 100, 8, HTOD_PAGEABLE);
    free(q);
  }
  for (i = 0; i < 32; i++)
    if (ring[i]) check(p_free_host(ring[i]), 0, "cuMemFreeHost");
  g_churn_rounds = r;
  return NULL;
}

static void* find(gpa_t gpa, const char* name, int version) {
  void* p = NULL;
  int status = 0;
  if (gpa(name, &p, version, 0, &status) != 0 || !p) {
    fprintf(stderr, "hostmem_user: no %s\n", name);
    exit(2);
  }
  return p;
}

static char* reserve(size_t n) { /* address space only: the stand-in never touches it */
  void* p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) exit(2);
  return (char*)p;
}

static void print_expected(long extra_rounds) {
  int k, e, first = 1;
  printf("{\"churn_rounds\":%ld,\"copies\":{", extra_rounds);
  for (k = 0; k < 11; k++) {
    int inner = 0;
    for (e = 0; e < N_EXPECT; e++) {
      if (g_exp[e].kind != k || !g_exp[e].calls) continue;
      if (!inner) printf("%s\"%d\":{", first ? "" : ",", k);
      printf("%s\"%s\":[%lld,%lld]", inner ? "," : "", g_exp[e].mem, g_exp[e].calls, g_exp[e].bytes);
      inner = 1, first = 0;
    }
    if (inner) printf("}");
  }
  printf("}}\n");
}

static void unsure_mode(void) {
  char *x, *y, *plain = malloc(4096);
  unsigned char props[128] = {0};
  gs_MemPoolPropsHead* head = (gs_MemPoolPropsHead*)props;
  void* pool = NULL;
  check(p_alloc_host((void**)&x, 4096), 0, "cuMemAllocHost"); /* handed out uncounted: never seen */
  check(p_host_alloc((void**)&y, 4096, 0), 0, "cuMemHostAlloc");
  htod(x, 8, HTOD_UNKNOWN); /* page-locked, unseen: unknown, never "pageable" */
  htod(y, 8, HTOD_PINNED);
  htod(plain, 8, HTOD_UNKNOWN);
  head->allocType = GS_CU_MEM_ALLOCATION_TYPE_PINNED;
  head->location.type = GS_CU_MEM_LOCATION_TYPE_HOST;
  check(p_pool_create(&pool, props), 0, "cuMemPoolCreate");
  check(p_free_host(x), 0, "cuMemFreeHost");
  check(p_free_host(y), 0, "cuMemFreeHost");
  free(plain);
  print_expected(0);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "split";
  int threads = argc > 2 ? atoi(argv[2]) : 8;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gpa_t gpa;
  pthread_t t[64], c;
  int i;
  if (argc > 3) g_iters = atoi(argv[3]);
  if (!h || !(gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2"))) return 2;
  *(void**)&p_htod = find(gpa, "cuMemcpyHtoD", 3020);
  *(void**)&p_htod_async = find(gpa, "cuMemcpyHtoDAsync", 3020);
  *(void**)&p_dtoh = find(gpa, "cuMemcpyDtoH", 3020);
  *(void**)&p_dtoh_async = find(gpa, "cuMemcpyDtoHAsync", 3020);
  *(void**)&p_dtod = find(gpa, "cuMemcpyDtoD", 3020);
  *(void**)&p_copy_async = find(gpa, "cuMemcpyAsync", 4000);
  *(void**)&p_2d = find(gpa, "cuMemcpy2D", 3020);
  *(void**)&p_2d_async = find(gpa, "cuMemcpy2DAsync", 3020);
  *(void**)&p_host_alloc = dlsym(h, "cuMemHostAlloc"); /* by name, as a program linked to libcuda finds it */
  *(void**)&p_alloc_host = find(gpa, "cuMemAllocHost", 3020);
  *(void**)&p_alloc_host_v1 = find(gpa, "cuMemAllocHost", 2000); /* the 32-bit size of CUDA < 3.2 */
  *(void**)&p_free_host = find(gpa, "cuMemFreeHost", 2000);
  *(void**)&p_register = find(gpa, "cuMemHostRegister", 6050);
  *(void**)&p_register_v1 = find(gpa, "cuMemHostRegister", 4000);
  *(void**)&p_unregister = find(gpa, "cuMemHostUnregister", 4000);
  *(void**)&p_alloc_managed = find(gpa, "cuMemAllocManaged", 6000);
  *(void**)&p_free = find(gpa, "cuMemFree", 3020);
  *(void**)&p_create = find(gpa, "cuMemCreate", 10020);
  *(void**)&p_release = find(gpa, "cuMemRelease", 10020);
  *(void**)&p_map = find(gpa, "cuMemMap", 10020);
  *(void**)&p_unmap = find(gpa, "cuMemUnmap", 10020);
  *(void**)&p_pool_create = find(gpa, "cuMemPoolCreate", 11020);
  if (!p_host_alloc) return 2;
  if (!strcmp(mode, "unsure")) {
    unsure_mode();
    return 0;
  }

  {
    gs_MemAllocationProp on_host, on_device;
    unsigned long long hv, hw;
    unsigned char props[128] = {0};
    gs_MemPoolPropsHead* head = (gs_MemPoolPropsHead*)props;
    void* pool = NULL;
    dptr m;
    check(p_alloc_host((void**)&g_a, SIZE), 0, "cuMemAllocHost");
    check(p_host_alloc((void**)&g_b, SIZE, 1), 0, "cuMemHostAlloc");
    check(p_alloc_host_v1((void**)&g_v1, 4096), 0, "cuMemAllocHost (v1)");
    g_r = malloc(SIZE), g_p = malloc(SIZE), g_q = malloc(4096);
    check(p_register(g_r, SIZE, 0), 0, "cuMemHostRegister");
    /* failed calls record nothing, and return the driver's error unchanged */
    check(p_host_alloc((void**)&g_decoy, (size_t)1 << 41, 0), 2, "cuMemHostAlloc (too big)");
    check(p_register(g_q, 4096, 0x80000000u), 1, "cuMemHostRegister (bad flags)");
    check(p_register(g_r + 4096, 4096, 0), 712, "cuMemHostRegister (already registered)");
    check(p_unregister(g_q), 713, "cuMemHostUnregister (not registered)");
    check(p_alloc_managed(&m, 4096, 1), 0, "cuMemAllocManaged");
    g_m = (char*)(uintptr_t)m;
    /* allocations mapped: one on the host (NCCL's host buffers), one on the device */
    memset(&on_host, 0, sizeof on_host), memset(&on_device, 0, sizeof on_device);
    on_host.type = on_device.type = GS_CU_MEM_ALLOCATION_TYPE_PINNED;
    on_host.location.type = GS_CU_MEM_LOCATION_TYPE_HOST_NUMA;
    on_device.location.type = GS_CU_MEM_LOCATION_TYPE_DEVICE;
    g_v = reserve(2 << 20), g_w = reserve(2 << 20);
    check(p_create(&hv, 2 << 20, &on_host, 0), 0, "cuMemCreate");
    check(p_create(&hw, 2 << 20, &on_device, 0), 0, "cuMemCreate");
    check(p_map((dptr)(uintptr_t)g_v, 2 << 20, 0, hv, 0), 0, "cuMemMap");
    check(p_map((dptr)(uintptr_t)g_w, 2 << 20, 0, hw, 0), 0, "cuMemMap");
    /* a pool of device memory leaves the registry sure */
    head->allocType = GS_CU_MEM_ALLOCATION_TYPE_PINNED;
    head->location.type = GS_CU_MEM_LOCATION_TYPE_DEVICE;
    check(p_pool_create(&pool, props), 0, "cuMemPoolCreate");

    pthread_create(&c, NULL, churn, NULL);
    for (i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    __atomic_store_n(&g_done, 1, __ATOMIC_RELEASE);
    pthread_join(c, NULL);

    /* unregistered, the memory is pageable again; registered anew (the old entry point), pinned */
    check(p_unregister(g_r), 0, "cuMemHostUnregister");
    htod(g_r + 8, 128, HTOD_PAGEABLE);
    check(p_register_v1(g_r, SIZE, 0), 0, "cuMemHostRegister (v1)");
    htod(g_r + 8, 128, HTOD_PINNED);
    check(p_unregister(g_r), 0, "cuMemHostUnregister");
    check(p_unmap((dptr)(uintptr_t)g_v, 2 << 20), 0, "cuMemUnmap");
    htod(g_v + 64, 48, HTOD_PAGEABLE);
    check(p_unmap((dptr)(uintptr_t)g_w, 2 << 20), 0, "cuMemUnmap");
    check(p_release(hv), 0, "cuMemRelease");
    check(p_release(hw), 0, "cuMemRelease");
    check(p_free(m), 0, "cuMemFree");
    check(p_free_host(g_b), 0, "cuMemFreeHost");
    check(p_free_host(g_v1), 0, "cuMemFreeHost");
  }

  {
    /* A (one range) is held: fill the table to GS_HOSTMEM_MAX, and two more that do not fit */
    int fill = GS_HOSTMEM_MAX - 1, n = fill + 2;
    char** bufs = calloc((size_t)n, sizeof *bufs);
    char* x;
    for (i = 0; i < n; i++) check(p_alloc_host((void**)&bufs[i], 64), 0, "cuMemAllocHost (fill)");
    htod(bufs[0], 8, HTOD_PINNED);        /* held */
    htod(g_a, 8, HTOD_PINNED);            /* held */
    htod(bufs[fill + 1], 8, HTOD_UNKNOWN); /* page-locked, not held */
    htod(g_p, 8, HTOD_UNKNOWN);           /* pageable, but the table cannot vouch for it */
    check(p_free_host(bufs[0]), 0, "cuMemFreeHost");
    htod(g_p, 8, HTOD_UNKNOWN); /* a held one freed: the two missed are still live */
    check(p_free_host(bufs[fill]), 0, "cuMemFreeHost");
    htod(g_p, 8, HTOD_UNKNOWN);
    check(p_free_host(bufs[fill + 1]), 0, "cuMemFreeHost");
    htod(g_p, 8, HTOD_PAGEABLE); /* none missed is live: the table vouches again */
    check(p_alloc_host((void**)&x, 64), 0, "cuMemAllocHost");
    htod(x, 8, HTOD_PINNED);
    check(p_free_host(x), 0, "cuMemFreeHost");
    for (i = 1; i < fill; i++) check(p_free_host(bufs[i]), 0, "cuMemFreeHost");
    free(bufs);
  }
  check(p_free_host(g_a), 0, "cuMemFreeHost");
  print_expected(g_churn_rounds);
  return 0;
}
