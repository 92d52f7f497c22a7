/*
 * Copyright 2026 Graphsignal, Inc.
 *
 * Licensed under the Apache License, Version 2.0 (the "License");
 * you may not use this file except in compliance with the License.
 * You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

/*
 * graphsignal/probe_cuda.h -- probes inside CUDA kernels.
 *
 *   #include <graphsignal/probe_cuda.h>
 *   static graphsignal_probe_entry* g_tile_ns;
 *   void init() {
 *     g_tile_ns = graphsignal_probe_register_cuda(
 *         "mykernels_tile_duration_nanoseconds", NULL, NULL, 0);
 *   }
 *   __global__ void my_kernel(..., graphsignal_instrument_data* tile_ns) {
 *     unsigned long long t0 = graphsignal_gtimer();
 *     // ... tile work ...
 *     if (threadIdx.x == 0) GRAPHSIGNAL_RECORD(tile_ns, graphsignal_gtimer() - t0);
 *   }
 *   // launch: my_kernel<<<...>>>(..., graphsignal_probe_device_data(g_tile_ns));
 *
 * An in-kernel instrument is a histogram. A device-side record is five
 * relaxed 64-bit atomics on the instrument's data (count, sum, min, max and
 * one log-linear bin, the same bins the sidecar uses), so it works in any
 * stream, inside CUDA graphs, and from any number of blocks at once.
 *
 * Collection. Under graphsignal-run, one host thread per process reads the
 * instruments about once a second (GRAPHSIGNAL_PROBE_CUDA_INTERVAL_MS) and at
 * exit, and writes the deltas into the process's probe ring (probe.h). Two
 * places for the data were measured on an H200 (scripts/bench_probe_kernel.py:
 * a ~23 us kernel of 1056 blocks, one record per block, medians of 9
 * interleaved repetitions of 2000 launches):
 *   - device memory (cudaMalloc), copied to pinned host memory on a private
 *     non-blocking stream and waited for by polling an event: +0.9% kernel
 *     time (22.84 -> 23.04 us);
 *   - mapped pinned host memory (cudaHostAllocMapped), read in place by the
 *     host: +19985% (22.74 -> 4567 us): every device atomic crosses PCIe to
 *     host memory and the blocks serialize on it.
 * So the data lives in device memory (the default,
 * GRAPHSIGNAL_PROBE_CUDA_MEMORY=device). The reader's copies go on its own
 * stream, never synchronize the workload's streams (a non-blocking stream,
 * an event polled with cudaEventQuery, which adds no synchronization
 * record), and the stream is handed to the graphsignal CUPTI library
 * (graphsignal_cupti_ignore_stream), which leaves its records out, so they
 * do not show up in the workload's cuda_memcpy_*. Mapped memory stays
 * available (GRAPHSIGNAL_PROBE_CUDA_MEMORY=mapped) for a GPU that has no
 * spare device memory or for debugging; do not use it for hot kernels.
 *
 * Device memory is allocated on the device that is current at
 * registration: launch the instrumented kernel on that device (or register
 * one instrument per device). Mapped memory works from every device.
 *
 * Outside graphsignal-run the probes are inert: graphsignal_probe_register_cuda
 * allocates nothing on the GPU and starts no thread, and
 * graphsignal_probe_device_data returns NULL, which GRAPHSIGNAL_RECORD checks
 * (one branch on a kernel argument).
 *
 * Needs the CUDA runtime (cuda_runtime.h) and C++ (nvcc). Every name is
 * prefixed graphsignal_ / GRAPHSIGNAL_.
 */
#ifndef GRAPHSIGNAL_PROBE_CUDA_H
#define GRAPHSIGNAL_PROBE_CUDA_H

#include <dlfcn.h>

#include "probe.h"

/* One implementation for CUDA and HIP: probe_rocm.h defines
 * GRAPHSIGNAL_PROBE_HIP and includes this header. */
#if defined(GRAPHSIGNAL_PROBE_HIP)
#include <hip/hip_runtime.h>
#define GRAPHSIGNAL_GPU(name) hip##name
#define GRAPHSIGNAL_GPU_HOST_ALLOC(p, n, flags) hipHostMalloc((p), (n), (flags))
#define GRAPHSIGNAL_GPU_HOST_MAPPED (hipHostMallocMapped | hipHostMallocPortable)
#define GRAPHSIGNAL_GPU_HOST_FREE hipHostFree
#define GRAPHSIGNAL_GPU_PINNED_ALLOC(p, n) hipHostMalloc((p), (n), 0)
#ifndef GRAPHSIGNAL_ROCM_NS_PER_TICK
/* s_memrealtime runs at a constant 100 MHz on MI100/MI200/MI300 (ROCm's wall_clock64) */
#define GRAPHSIGNAL_ROCM_NS_PER_TICK 10ull
#endif
#else
#include <cuda_runtime.h>
#define GRAPHSIGNAL_GPU(name) cuda##name
#define GRAPHSIGNAL_GPU_HOST_ALLOC(p, n, flags) cudaHostAlloc((p), (n), (flags))
#define GRAPHSIGNAL_GPU_HOST_MAPPED (cudaHostAllocMapped | cudaHostAllocPortable)
#define GRAPHSIGNAL_GPU_HOST_FREE cudaFreeHost
#define GRAPHSIGNAL_GPU_PINNED_ALLOC(p, n) cudaMallocHost((p), (n))
#endif

/* Device-side data of one in-kernel instrument. */
typedef struct graphsignal_instrument_data {
  unsigned long long count;
  unsigned long long sum;
  unsigned long long min; /* ULLONG_MAX until the first record */
  unsigned long long max;
  unsigned long long bins[GRAPHSIGNAL_HIST_NBINS];
} graphsignal_instrument_data;

/* Nanoseconds from the GPU's global timer (CUDA: %globaltimer; HIP:
 * s_memrealtime scaled by GRAPHSIGNAL_ROCM_NS_PER_TICK). */
static __device__ __forceinline__ unsigned long long graphsignal_gtimer(void) {
#if defined(GRAPHSIGNAL_PROBE_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
  return (unsigned long long)__builtin_amdgcn_s_memrealtime() * GRAPHSIGNAL_ROCM_NS_PER_TICK;
#else
  return 0;
#endif
#else
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

static __host__ __device__ __forceinline__ unsigned graphsignal_hist_bin(unsigned long long v) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  int e;
  if (v < (1ull << GRAPHSIGNAL_HIST_SUB_BITS)) return (unsigned)v;
  e = 63 - __clzll((long long)v);
#else
  int e = 63;
  if (v < (1ull << GRAPHSIGNAL_HIST_SUB_BITS)) return (unsigned)v;
  while (!(v >> e)) e--;
#endif
  return (1u << GRAPHSIGNAL_HIST_SUB_BITS) + (unsigned)(e - GRAPHSIGNAL_HIST_SUB_BITS) * (1u << GRAPHSIGNAL_HIST_SUB_BITS) +
         (unsigned)((v >> (e - GRAPHSIGNAL_HIST_SUB_BITS)) - (1ull << GRAPHSIGNAL_HIST_SUB_BITS));
}

/* Records v into d (a no-op when d is NULL: the instrument is inert). */
static __device__ __forceinline__ void graphsignal_device_record(graphsignal_instrument_data* d, unsigned long long v) {
  if (d == NULL) return;
  atomicAdd(&d->count, 1ull);
  atomicAdd(&d->sum, v);
  atomicMin(&d->min, v);
  atomicMax(&d->max, v);
  atomicAdd(&d->bins[graphsignal_hist_bin(v)], 1ull);
}

#define GRAPHSIGNAL_RECORD(data, value) graphsignal_device_record((data), (unsigned long long)(value))

/* ---- host side ---------------------------------------------------------- */

typedef struct graphsignal_cuda_probe_ {
  graphsignal_instrument_data* dev;  /* what kernels write (device or mapped pointer) */
  graphsignal_instrument_data* host; /* mapped mode: the same memory; device mode: pinned staging */
  graphsignal_instrument_data* last; /* what was sent already (plain host memory) */
  int device;
  int mapped;
  struct graphsignal_cuda_probe_* next;
} graphsignal_cuda_probe_;

typedef struct graphsignal_cuda_state_ {
  pthread_mutex_t lock;
  graphsignal_cuda_probe_* probes;
  pthread_t thread;
  int thread_started;
  int stop;
  int mapped;
  unsigned interval_ms;
  GRAPHSIGNAL_GPU(Stream_t) stream[64]; /* per device, device mode */
  GRAPHSIGNAL_GPU(Event_t) event[64];
} graphsignal_cuda_state_;

static inline graphsignal_cuda_state_* graphsignal_cuda_state_get_(void) {
  static graphsignal_cuda_state_ s;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  struct init_ {
    static void run() {
      graphsignal_cuda_state_* p = &s;
      const char* m = getenv("GRAPHSIGNAL_PROBE_CUDA_MEMORY");
      const char* iv = getenv("GRAPHSIGNAL_PROBE_CUDA_INTERVAL_MS");
      pthread_mutex_init(&p->lock, NULL);
      p->mapped = m && strcmp(m, "mapped") == 0;
      p->interval_ms = iv ? (unsigned)strtoul(iv, NULL, 10) : 1000u;
      if (p->interval_ms < 10) p->interval_ms = 10;
    }
  };
  pthread_once(&once, init_::run);
  return &s;
}

/* Tells the graphsignal CUPTI library (if loaded) to leave a stream out of
 * the workload's profiles: the reader's own copies are not the workload's. */
static inline void graphsignal_cuda_ignore_stream_(GRAPHSIGNAL_GPU(Stream_t) stream) {
  typedef int (*fn_t)(void*);
  const char* path = getenv("CUDA_INJECTION64_PATH");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  fn_t fn = h ? (fn_t)dlsym(h, "graphsignal_cupti_ignore_stream") : NULL;
  if (fn) fn((void*)stream);
  if (h) dlclose(h);
}

/* Waits for the reader's own stream without synchronizing anything else:
 * polling an event adds no synchronization record to the workload. */
static inline int graphsignal_cuda_wait_(GRAPHSIGNAL_GPU(Event_t) ev) {
  int i;
  for (i = 0; i < 10000; i++) {
    GRAPHSIGNAL_GPU(Error_t) r = GRAPHSIGNAL_GPU(EventQuery)(ev);
    if (r == GRAPHSIGNAL_GPU(Success)) return 1;
    if (r != GRAPHSIGNAL_GPU(ErrorNotReady)) return 0;
    {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}

/* Reads one instrument and sends what changed since the last read. */
static inline void graphsignal_cuda_flush_one_(graphsignal_cuda_state_* cs, graphsignal_probe_entry* e,
                                               graphsignal_cuda_probe_* p) {
  graphsignal_instrument_data* cur = p->host;
  graphsignal_instrument_data snap;
  graphsignal_ring_header* ring;
  uint64_t ie;
  uint32_t id;
  unsigned b;
  unsigned long long dcount;
  if (!p->mapped) {
    int prev = 0;
    GRAPHSIGNAL_GPU(GetDevice)(&prev);
    GRAPHSIGNAL_GPU(SetDevice)(p->device);
    if (GRAPHSIGNAL_GPU(MemcpyAsync)(p->host, p->dev, sizeof *p->host, GRAPHSIGNAL_GPU(MemcpyDeviceToHost), cs->stream[p->device]) !=
            GRAPHSIGNAL_GPU(Success) ||
        GRAPHSIGNAL_GPU(EventRecord)(cs->event[p->device], cs->stream[p->device]) != GRAPHSIGNAL_GPU(Success) ||
        !graphsignal_cuda_wait_(cs->event[p->device])) {
      GRAPHSIGNAL_GPU(GetLastError)(); /* leave no error behind for the workload to trip over */
      GRAPHSIGNAL_GPU(SetDevice)(prev);
      return;
    }
    GRAPHSIGNAL_GPU(SetDevice)(prev);
  }
  /* one consistent-enough copy: in mapped mode the GPU may still be adding */
  memcpy(&snap, (const void*)cur, sizeof snap);
  dcount = snap.count - p->last->count;
  if (dcount == 0) return;
  ie = __atomic_load_n(&e->id_epoch, __ATOMIC_RELAXED);
  if ((uint32_t)(ie >> 32) != e->state->epoch) {
    if (!graphsignal_probe_refresh_(e)) return;
    ie = __atomic_load_n(&e->id_epoch, __ATOMIC_ACQUIRE);
  }
  ring = e->ring;
  id = (uint32_t)ie;
  for (b = 0; b < GRAPHSIGNAL_HIST_NBINS; b++)
    if (snap.bins[b] != p->last->bins[b])
      graphsignal_ring_write(ring, GRAPHSIGNAL_REC_HISTOGRAM_AGG, GRAPHSIGNAL_AGG_BIN, 0, id,
                             snap.bins[b] - p->last->bins[b], b);
  graphsignal_ring_write(ring, GRAPHSIGNAL_REC_HISTOGRAM_AGG, GRAPHSIGNAL_AGG_MIN_MAX, 0, id, snap.min, snap.max);
  /* count and sum last: the sidecar takes a batch with a count as complete */
  graphsignal_ring_write(ring, GRAPHSIGNAL_REC_HISTOGRAM_AGG, GRAPHSIGNAL_AGG_COUNT_SUM, 0, id, dcount,
                         snap.sum - p->last->sum);
  *p->last = snap;
}

static inline void graphsignal_cuda_flush_all_(void) {
  graphsignal_cuda_state_* cs = graphsignal_cuda_state_get_();
  graphsignal_probe_state_* st = graphsignal_probe_state_get_();
  graphsignal_probe_entry* e;
  pthread_mutex_lock(&cs->lock);
  for (e = st->entries; e; e = e->next) {
    graphsignal_cuda_probe_* p = (graphsignal_cuda_probe_*)e->device_data;
    if (p) graphsignal_cuda_flush_one_(cs, e, p);
  }
  pthread_mutex_unlock(&cs->lock);
}

static inline void* graphsignal_cuda_reader_(void* arg) {
  graphsignal_cuda_state_* cs = (graphsignal_cuda_state_*)arg;
  while (!__atomic_load_n(&cs->stop, __ATOMIC_ACQUIRE)) {
    struct timespec ts = {(time_t)(cs->interval_ms / 1000), (long)(cs->interval_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    graphsignal_cuda_flush_all_();
  }
  return NULL;
}

static inline void graphsignal_cuda_atexit_(void) {
  graphsignal_cuda_state_* cs = graphsignal_cuda_state_get_();
  __atomic_store_n(&cs->stop, 1, __ATOMIC_RELEASE);
  graphsignal_cuda_flush_all_(); /* short runs lose nothing */
}

/* Sets up the device side of e; call with cs->lock held. */
static inline int graphsignal_cuda_attach_locked_(graphsignal_cuda_state_* cs, graphsignal_probe_entry* e) {
  graphsignal_cuda_probe_* p = (graphsignal_cuda_probe_*)calloc(1, sizeof *p);
  graphsignal_instrument_data* init;
  if (!p) return 0;
  p->last = (graphsignal_instrument_data*)calloc(1, sizeof *p->last);
  if (!p->last || GRAPHSIGNAL_GPU(GetDevice)(&p->device) != GRAPHSIGNAL_GPU(Success) || p->device < 0 || p->device >= 64) goto fail;
  p->mapped = cs->mapped;
  if (p->mapped) {
    if (GRAPHSIGNAL_GPU_HOST_ALLOC((void**)&p->host, sizeof *p->host, GRAPHSIGNAL_GPU_HOST_MAPPED) != GRAPHSIGNAL_GPU(Success))
      goto fail;
    memset((void*)p->host, 0, sizeof *p->host);
    p->host->min = ~0ull;
    if (GRAPHSIGNAL_GPU(HostGetDevicePointer)((void**)&p->dev, p->host, 0) != GRAPHSIGNAL_GPU(Success)) goto fail;
  } else {
    if (!cs->stream[p->device]) {
      if (GRAPHSIGNAL_GPU(StreamCreateWithFlags)(&cs->stream[p->device], GRAPHSIGNAL_GPU(StreamNonBlocking)) != GRAPHSIGNAL_GPU(Success) ||
          GRAPHSIGNAL_GPU(EventCreateWithFlags)(&cs->event[p->device], GRAPHSIGNAL_GPU(EventDisableTiming)) != GRAPHSIGNAL_GPU(Success))
        goto fail;
      graphsignal_cuda_ignore_stream_(cs->stream[p->device]);
    }
    if (GRAPHSIGNAL_GPU_PINNED_ALLOC((void**)&p->host, sizeof *p->host) != GRAPHSIGNAL_GPU(Success)) goto fail;
    if (GRAPHSIGNAL_GPU(Malloc)((void**)&p->dev, sizeof *p->dev) != GRAPHSIGNAL_GPU(Success)) goto fail;
    init = p->host;
    memset(init, 0, sizeof *init);
    init->min = ~0ull;
    /* initialized by a copy on the reader's stream, not a memset on the workload's */
    if (GRAPHSIGNAL_GPU(MemcpyAsync)(p->dev, init, sizeof *init, GRAPHSIGNAL_GPU(MemcpyHostToDevice), cs->stream[p->device]) !=
            GRAPHSIGNAL_GPU(Success) ||
        GRAPHSIGNAL_GPU(EventRecord)(cs->event[p->device], cs->stream[p->device]) != GRAPHSIGNAL_GPU(Success) ||
        !graphsignal_cuda_wait_(cs->event[p->device]))
      goto fail;
  }
  p->last->min = ~0ull;
  e->device_data = p;
  if (!cs->thread_started) {
    if (pthread_create(&cs->thread, NULL, graphsignal_cuda_reader_, cs) == 0) {
      pthread_detach(cs->thread);
      cs->thread_started = 1;
      atexit(graphsignal_cuda_atexit_);
    }
  }
  return 1;
fail:
  GRAPHSIGNAL_GPU(GetLastError)();
  if (p->mapped && p->host) GRAPHSIGNAL_GPU_HOST_FREE(p->host);
  if (!p->mapped && p->dev) GRAPHSIGNAL_GPU(Free)(p->dev);
  if (!p->mapped && p->host) GRAPHSIGNAL_GPU_HOST_FREE(p->host);
  free(p->last);
  free(p);
  return 0;
}

/*
 * Registers an in-kernel histogram instrument (name with its unit, tags as
 * for graphsignal_probe_register) and, under graphsignal-run, its device
 * data on the current device. Takes locks and may allocate: call it at
 * initialization. Returns NULL only for invalid arguments.
 */
static inline graphsignal_probe_entry* graphsignal_probe_register_cuda(const char* name, const char** tag_keys,
                                                                       const char** tag_values, size_t ntags) {
  graphsignal_probe_entry* e = graphsignal_probe_register(name, GRAPHSIGNAL_HISTOGRAM, tag_keys, tag_values, ntags);
  graphsignal_cuda_state_* cs;
  if (!e || !e->ring) return e; /* inert: nothing on the GPU, no thread */
  cs = graphsignal_cuda_state_get_();
  pthread_mutex_lock(&cs->lock);
  if (!e->device_data && !graphsignal_cuda_attach_locked_(cs, e)) {
    static int warned;
    if (!warned) {
      warned = 1;
      fprintf(stderr, "graphsignal: in-kernel probe %s inactive: cannot allocate its GPU data\n", name);
    }
  }
  pthread_mutex_unlock(&cs->lock);
  return e;
}

/* The pointer to pass to kernels: device data, or NULL when inert. */
static inline graphsignal_instrument_data* graphsignal_probe_device_data(graphsignal_probe_entry* e) {
  graphsignal_cuda_probe_* p = e ? (graphsignal_cuda_probe_*)e->device_data : NULL;
  return p ? p->dev : NULL;
}

/* Reads every in-kernel instrument now (e.g. before a measurement ends). */
static inline void graphsignal_probe_cuda_flush(void) {
  graphsignal_cuda_flush_all_();
}

#endif /* GRAPHSIGNAL_PROBE_CUDA_H */
