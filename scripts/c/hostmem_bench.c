/* Copies through whatever libcuda.so.1 the loader finds (bench_hostmem.py
 * runs it against the interposer's stand-in driver, with and without the
 * interposer preloaded), from host memory that RANGES cuMemHostRegister
 * calls made page-locked and from memory none did.
 *
 *   hostmem_bench RANGES CALLS   one JSON line per op: {"op", "ranges", "calls", "ns_per_call"}
 *
 *   htod_pinned    cuMemcpyHtoDAsync_v2 of 64 bytes from a registered range
 *   htod_pageable  the same from malloc memory outside every range
 *   dtoh_pinned    cuMemcpyDtoHAsync_v2 of 64 bytes into a registered range
 *   htod_spread    htod_pinned from a different range each call, alternating
 *                  with pageable memory (no two copies in a row from one
 *                  buffer: each thread's last answer never holds) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char*, void**, int, unsigned long long, int*);
typedef CUresult (*htod_async_t)(unsigned long long, const void*, size_t, void*);
typedef CUresult (*dtoh_async_t)(void*, unsigned long long, size_t, void*);
typedef CUresult (*host_register_t)(void*, size_t, unsigned);

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void* find(gpa_t gpa, const char* name) {
  void* p = NULL;
  int status = 0;
  if (gpa(name, &p, 12000, 0, &status) != 0 || !p) {
    fprintf(stderr, "hostmem_bench: no %s\n", name);
    exit(2);
  }
  return p;
}

int main(int argc, char** argv) {
  int ranges = argc > 1 ? atoi(argv[1]) : 0, i, op;
  long calls = argc > 2 ? atol(argv[2]) : 2000000, j;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  gpa_t gpa;
  htod_async_t htod;
  dtoh_async_t dtoh;
  host_register_t reg;
  char** bufs;
  char* pageable = malloc(4096);
  static const char* names[] = {"htod_pinned", "htod_pageable", "dtoh_pinned", "htod_spread"};
  char* spread[256];
  int n_spread = 0;
  if (!h || !(gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2"))) return 2;
  *(void**)&htod = find(gpa, "cuMemcpyHtoDAsync");
  *(void**)&dtoh = find(gpa, "cuMemcpyDtoHAsync");
  *(void**)&reg = find(gpa, "cuMemHostRegister");
  bufs = calloc((size_t)(ranges ? ranges : 1), sizeof *bufs);
  for (i = 0; i < ranges; i++) {
    bufs[i] = malloc(4096);
    if (reg(bufs[i], 4096, 0) != 0) return 3;
  }
  if (!ranges) bufs[0] = malloc(4096); /* nothing registered: "pinned" ops copy from plain memory */
  /* up to 128 ranges spread over the table, each followed by pageable memory */
  for (i = 0; i < 128 && i < (ranges ? ranges : 1); i++) {
    spread[n_spread++] = bufs[(long)i * (ranges ? ranges : 1) / 128 % (ranges ? ranges : 1)];
    spread[n_spread++] = pageable + 64 * (i % 32);
  }
  for (op = 0; op < 4; op++) {
    char* host = op == 1 ? pageable : bufs[(ranges ? ranges : 1) / 2];
    double t0;
    for (j = 0; j < calls / 10; j++) htod(0x1000, host, 64, NULL); /* warm */
    t0 = now_ns();
    if (op == 2)
      for (j = 0; j < calls; j++) dtoh(host, 0x1000, 64, NULL);
    else if (op == 3)
      for (j = 0; j < calls; j++) htod(0x1000, spread[j % n_spread], 64, NULL);
    else
      for (j = 0; j < calls; j++) htod(0x1000, host, 64, NULL);
    printf("{\"op\": \"%s\", \"ranges\": %d, \"calls\": %ld, \"ns_per_call\": %.3f}\n", names[op], ranges, calls,
           (now_ns() - t0) / (double)calls);
  }
  return 0;
}
