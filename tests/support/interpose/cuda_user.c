/* A CUDA "application" for the interposer's tests, run against the
 * stand-in libcuda (fake_libcuda.c). It reaches the driver as the CUDA
 * runtime does (dlopen + dlsym of cuGetProcAddress_v2, then every entry
 * point through it) or, built with -DLINKED, through its PLT as a program
 * linked to libcuda does; calls from THREADS threads, copying between the
 * device and malloc memory (pageable) or a cuMemAllocHost buffer (pinned); and prints one JSON
 * line with what it did, which the test compares with the interposer's
 * report and the stand-in's own counts.
 *
 *   cuda_user [threads] [launches per thread] [flags for cuGetProcAddress] [us of sleep after each graph launch]
 *             [devices: thread i makes device i % devices' context current, and switches to the next device's
 *              and back around each stream sync; the stand-in needs FAKE_CUDA_DEVICES at least this] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef CUresult (*gpa_t)(const char*, void**, int, unsigned long long, int*);
typedef CUresult (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
typedef CUresult (*graph_launch_t)(void*, void*);
typedef CUresult (*sync_t)(void*);
typedef CUresult (*ctx_sync_t)(void);
typedef CUresult (*begin_t)(void*, int);
typedef CUresult (*end_t)(void*, void**);
typedef CUresult (*inst_t)(void**, void*, unsigned long long);
typedef CUresult (*htod_t)(unsigned long long, const void*, size_t);
typedef CUresult (*dtoh_async_t)(void*, unsigned long long, size_t, void*);
typedef CUresult (*set_async_t)(unsigned long long, unsigned, size_t, void*);
typedef CUresult (*alloc_host_t)(void**, size_t);
typedef CUresult (*set_current_t)(void*);

#ifdef LINKED
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
CUresult cuGraphLaunch(void*, void*);
CUresult cuStreamSynchronize(void*);
CUresult cuCtxSynchronize(void);
CUresult cuStreamBeginCapture_v2(void*, int);
CUresult cuStreamEndCapture(void*, void**);
CUresult cuGraphInstantiateWithFlags(void**, void*, unsigned long long);
CUresult cuMemcpyHtoD_v2(unsigned long long, const void*, size_t);
CUresult cuMemcpyDtoHAsync_v2(void*, unsigned long long, size_t, void*);
CUresult cuMemsetD32Async(unsigned long long, unsigned, size_t, void*);
CUresult cuMemAllocHost_v2(void**, size_t);
CUresult cuCtxSetCurrent(void*);
#endif

static launch_t p_launch;
static graph_launch_t p_graph_launch;
static sync_t p_stream_sync;
static ctx_sync_t p_ctx_sync;
static begin_t p_begin;
static end_t p_end;
static inst_t p_inst;
static htod_t p_htod;
static dtoh_async_t p_dtoh_async;
static set_async_t p_set_async;
static alloc_host_t p_alloc_host;
static set_current_t p_set_current;
static char* g_pinned; /* cuMemAllocHost's: copies to and from it are pinned */
/* malloc's, never touched: 16 MiB copies from it are pageable, and large enough for the pageable_copies
 * finding (the stand-in copies nothing) */
#define PAGEABLE_BYTES (16L << 20)
static char* g_pageable;

static void* (*fake_function)(const char*);
static void* (*fake_stream_new)(void);
static void* (*fake_context)(int);
static uint64_t (*fake_calls)(int);
static void* g_fns[3];
static void* g_exec;
static int g_launches = 1000;
static int g_graph_pause_us;
static int g_devices = 1;

static void* worker(void* arg) {
  void* s = fake_stream_new();
  int i, dev = (int)(intptr_t)arg % g_devices;
  if (g_devices > 1 && p_set_current(fake_context(dev)) != 0) exit(9);
  for (i = 0; i < g_launches; i++) {
    p_launch(g_fns[i % 3], 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL);
    if (i % 10 == 0) {
      p_graph_launch(g_exec, s);
      if (g_graph_pause_us) usleep((useconds_t)g_graph_pause_us);
    }
    if (i % 100 == 0) {
      if (g_devices > 1) { /* a sync made on the next device counts there, then back */
        p_set_current(fake_context((dev + 1) % g_devices));
        p_stream_sync(s);
        p_set_current(fake_context(dev));
      }
      p_stream_sync(s);
      p_htod(0x1000, g_pageable, PAGEABLE_BYTES);
      p_htod(0x1000, g_pinned, 16);
      p_dtoh_async(g_pinned, 0x1000, 32, s);
      p_set_async(0x1000, 0, 256, s); /* 1 KiB */
    }
  }
  return NULL;
}

#ifndef LINKED
static void* find(void* h, gpa_t gpa, const char* name, unsigned long long flags) {
  void* p = NULL;
  int status = 0;
  (void)h;
  if (gpa(name, &p, 13000, flags, &status) != 0 || !p) {
    fprintf(stderr, "cuda_user: no %s\n", name);
    exit(3);
  }
  return p;
}
#endif

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  unsigned long long flags = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
  pthread_t t[64];
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *graph = NULL, *cs, *unknown, *direct_unknown;
  int i;
  CUresult bad;
  if (argc > 2) g_launches = atoi(argv[2]);
  if (argc > 4) g_graph_pause_us = atoi(argv[4]);
  if (argc > 5) g_devices = atoi(argv[5]) < 1 ? 1 : atoi(argv[5]);
  if (!h) {
    fprintf(stderr, "cuda_user: %s\n", dlerror());
    return 2;
  }
  *(void**)&fake_function = dlsym(h, "fake_function");
  *(void**)&fake_stream_new = dlsym(h, "fake_stream_new");
  *(void**)&fake_context = dlsym(h, "fake_context");
  *(void**)&fake_calls = dlsym(h, "fake_calls");
#ifdef LINKED
  p_launch = cuLaunchKernel, p_graph_launch = cuGraphLaunch, p_stream_sync = cuStreamSynchronize;
  p_ctx_sync = cuCtxSynchronize, p_begin = cuStreamBeginCapture_v2, p_end = cuStreamEndCapture;
  p_inst = cuGraphInstantiateWithFlags, p_htod = cuMemcpyHtoD_v2, p_dtoh_async = cuMemcpyDtoHAsync_v2;
  p_set_async = cuMemsetD32Async, p_alloc_host = cuMemAllocHost_v2, p_set_current = cuCtxSetCurrent;
  unknown = direct_unknown = NULL;
  (void)flags, (void)unknown, (void)direct_unknown;
  {
    /* RTLD_NEXT is relative to its caller: from here it must find what this
     * program's own reference to cuLaunchKernel binds to */
    void* next = dlsym(RTLD_NEXT, "cuLaunchKernel");
    void* dflt = dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    if (next != dflt || next != (void*)cuLaunchKernel) {
      fprintf(stderr, "cuda_user: RTLD_NEXT %p, RTLD_DEFAULT %p, PLT %p\n", next, dflt, (void*)cuLaunchKernel);
      return 4;
    }
  }
#else
  {
    gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) return 2;
    *(void**)&p_launch = find(h, gpa, "cuLaunchKernel", flags);
    *(void**)&p_graph_launch = find(h, gpa, "cuGraphLaunch", flags);
    *(void**)&p_stream_sync = find(h, gpa, "cuStreamSynchronize", flags);
    *(void**)&p_ctx_sync = find(h, gpa, "cuCtxSynchronize", flags);
    *(void**)&p_begin = find(h, gpa, "cuStreamBeginCapture", flags);
    *(void**)&p_end = find(h, gpa, "cuStreamEndCapture", flags);
    *(void**)&p_inst = find(h, gpa, "cuGraphInstantiate", flags);
    *(void**)&p_htod = find(h, gpa, "cuMemcpyHtoD", flags);
    *(void**)&p_dtoh_async = find(h, gpa, "cuMemcpyDtoHAsync", flags);
    *(void**)&p_set_async = find(h, gpa, "cuMemsetD32Async", flags);
    *(void**)&p_alloc_host = find(h, gpa, "cuMemAllocHost", flags);
    *(void**)&p_set_current = find(h, gpa, "cuCtxSetCurrent", flags);
    /* names nobody counts come back exactly as the driver answers them */
    unknown = find(h, gpa, "cuMemAlloc", flags);
    direct_unknown = dlsym(h, "cuMemAlloc_v2");
    if (unknown != direct_unknown) {
      fprintf(stderr, "cuda_user: cuMemAlloc %p vs %p\n", unknown, direct_unknown);
      return 5;
    }
    if (dlsym(h, "cuNoSuchFunction") != NULL || !dlerror()) {
      fprintf(stderr, "cuda_user: a missing symbol must stay missing, with dlerror set\n");
      return 6;
    }
  }
#endif
  if (p_alloc_host((void**)&g_pinned, 4096) != 0 || !(g_pageable = malloc(PAGEABLE_BYTES))) return 8;
  g_fns[0] = fake_function("_Z6kernelAv");
  g_fns[1] = fake_function("_Z6kernelBPf");
  g_fns[2] = fake_function("gemm_kernel");
  /* a graph of four captured launches; the captured ones never run */
  cs = fake_stream_new();
  p_begin(cs, 0);
  p_launch(g_fns[0], 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL);
  p_launch(g_fns[1], 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL);
  p_launch(g_fns[2], 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL);
  p_launch(g_fns[0], 1, 1, 1, 1, 1, 1, 0, cs, NULL, NULL);
  p_dtoh_async(NULL, 0x1000, 8, cs);
  p_end(cs, &graph);
  p_inst(&g_exec, graph, 0);
  /* a failed launch is returned as the driver returned it, and counts nothing */
  bad = p_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
  if (bad != 1) {
    fprintf(stderr, "cuda_user: a failed launch returned %d\n", bad);
    return 7;
  }
  for (i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i);
  for (i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
  p_ctx_sync();
  {
    long per = (long)g_launches;
    long each = per / 3, rem = per % 3;
    long graphs = (per + 9) / 10, hundred = (per + 99) / 100;
    int d, n = threads < 64 ? threads : 64;
    /* per device: its threads' copies and memsets, their syncs and the syncs of the threads before it */
    printf("{\"per_device\":{");
    for (d = 0; d < g_devices; d++) {
      long mine = 0, before = 0;
      for (i = 0; i < n; i++) {
        mine += i % g_devices == d;
        before += g_devices > 1 && (i % g_devices + 1) % g_devices == d;
      }
      printf("%s\"%d\":{\"stream_syncs\":%ld,\"copies\":%ld,\"memsets\":%ld,\"context_syncs\":%d}", d ? "," : "",
             d, hundred * (mine + before), 3 * hundred * mine, hundred * mine, d == 0);
    }
    /* the stand-in's cuCtxGetCurrent calls: this program makes none, the interposer's are all there are */
    printf("},\"ctx_queries\":%llu,", (unsigned long long)fake_calls(9));
    printf("\"kernels\":{\"_Z6kernelAv\":%ld,\"_Z6kernelBPf\":%ld,\"gemm_kernel\":%ld},"
           "\"graph_launches\":%ld,\"stream_syncs\":%ld,\"context_syncs\":1,\"htod\":[%ld,%ld],"
           "\"dtoh\":[%ld,%ld],\"memsets\":[%ld,%ld],\"captured\":5,"
           "\"htod_pageable\":[%ld,%ld],\"htod_pinned\":[%ld,%ld]}\n",
           threads * (each + (rem > 0)), threads * (each + (rem > 1)), threads * each, threads * graphs,
           threads * hundred * (g_devices > 1 ? 2 : 1), 2 * threads * hundred, threads * hundred * (PAGEABLE_BYTES + 16), threads * hundred,
           threads * hundred * 32L, threads * hundred, threads * hundred * 1024L, threads * hundred,
           threads * hundred * PAGEABLE_BYTES, threads * hundred, threads * hundred * 16L);
  }
  return 0;
}
