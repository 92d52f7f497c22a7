/* GPU time per graph, sampled: on one launch in GRAPHSIGNAL_CUDA_SAMPLE (per
 * graph executable), a start event is recorded on the launch's stream just
 * before the launch and an end event just after; one harvester thread
 * reads each pair with cuEventQuery (never a synchronize) and adds the
 * elapsed time to the graph's sampled time.
 *
 * Never on a capturing stream (the events would become graph nodes). The
 * events are recorded with the stream flavour of the launch (a launch
 * through cuGraphLaunch_ptsz on stream 0 means the thread's own default
 * stream, and the legacy cuEventRecord on stream 0 would synchronize with
 * every other stream). The pool holds GS_PAIRS pairs made in the first
 * sampling thread's context; a launch under another context, or with every
 * pair in flight, is simply not sampled (counted in `skipped`).
 *
 * What an event pair measures: from the moment the start event executes
 * on the stream to the end event. When the stream has nothing left to run
 * (cuStreamQuery says so just before the start event), the start event
 * runs at once and the span also holds the host's submission of the graph:
 * for such a sample the host time of the event record and launch calls is
 * taken out (never below zero). scripts/interpose_census.py measures the
 * result against CUPTI's graph records (the report keeps the raw spans).
 *
 * What it may cost: one launch in `period` per graph is a candidate, and
 * candidates are taken at most `rate` times a second in the process (a
 * sampled launch costs a few microseconds of host time: two event records
 * and a stream query). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "counters.h"

#define GS_PAIRS 64
#define CU_ERROR_NOT_READY 600

typedef void* (*dlsym_fn)(void*, const char*);
extern void* gs_real_dlsym;

typedef struct {
  int state; /* 0 free, 1 taken (being recorded), 2 in flight, 3 being read (atomic) */
  gs_CUevent start, end;
  gs_slot* slot;
  int idle;         /* the stream had nothing to run when the start event was recorded */
  uint64_t t0, host; /* the host's clock before the start event; ns from it to the launch's return */
} pair;

static struct {
  gs_CUresult (*ctx_get_current)(gs_CUcontext*);
  gs_CUresult (*ctx_set_current)(gs_CUcontext);
  gs_CUresult (*event_create)(gs_CUevent*, unsigned);
  gs_CUresult (*event_record)(gs_CUevent, gs_CUstream);
  gs_CUresult (*event_record_ptsz)(gs_CUevent, gs_CUstream);
  gs_CUresult (*event_query)(gs_CUevent);
  gs_CUresult (*elapsed)(float*, gs_CUevent, gs_CUevent);
} fn;

static int g_period;          /* sample one launch in this many per graph; 0 = off */
static uint64_t g_gap_ns;     /* at least this long between two samples in the process */
static uint64_t g_last_ns;    /* when the last sample was taken (atomic) */
static gs_CUcontext g_ctx;    /* the pool's context */
static int g_pool_state;      /* 0 not made, 1 making, 2 ready, 3 failed (atomic) */
static pair g_pairs[GS_PAIRS];
static pthread_t g_harvester;

gs_sample_stats gs_sampling;

static void* find(void* h, const char* name) {
  dlsym_fn f = (dlsym_fn)__atomic_load_n(&gs_real_dlsym, __ATOMIC_ACQUIRE);
  void* p = f && h ? f(h, name) : NULL;
  dlerror();
  return p;
}

void gs_sample_setup(void* h, const char* period, const char* rate) {
  int n = period ? atoi(period) : 0;
  int per_s = rate && *rate ? atoi(rate) : 0;
  if (n <= 0) return;
  g_gap_ns = per_s > 0 ? 1000000000ull / (uint64_t)per_s : 0;
  if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return;
  *(void**)&fn.ctx_get_current = find(h, "cuCtxGetCurrent");
  *(void**)&fn.ctx_set_current = find(h, "cuCtxSetCurrent");
  *(void**)&fn.event_create = find(h, "cuEventCreate");
  *(void**)&fn.event_record = find(h, "cuEventRecord");
  *(void**)&fn.event_record_ptsz = find(h, "cuEventRecord_ptsz");
  *(void**)&fn.event_query = find(h, "cuEventQuery");
  *(void**)&fn.elapsed = find(h, "cuEventElapsedTime_v2");
  if (!fn.elapsed) *(void**)&fn.elapsed = find(h, "cuEventElapsedTime");
  if (!fn.ctx_get_current || !fn.ctx_set_current || !fn.event_create || !fn.event_record || !fn.event_query ||
      !fn.elapsed)
    return;
  g_period = n;
}

/* One pass over the pairs in flight: each whose end event completed adds
 * its span to its graph. Never waits. 1 when some pair is still in flight.
 * The harvester thread and the exit both call it: a pair is taken for the
 * pass (state 2 -> 3) by one of them at a time. */
static int sweep(void) {
  int i, busy = 0;
  for (i = 0; i < GS_PAIRS; i++) {
    pair* p = &g_pairs[i];
    gs_CUresult r;
    float ms = 0;
    int expected = 2;
    if (!__atomic_compare_exchange_n(&p->state, &expected, 3, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
    r = fn.event_query(p->end);
    if (r == CU_ERROR_NOT_READY) {
      __atomic_store_n(&p->state, 2, __ATOMIC_RELEASE);
      busy = 1;
      continue;
    }
    if (r == GS_CUDA_SUCCESS && fn.elapsed(&ms, p->start, p->end) == GS_CUDA_SUCCESS && ms >= 0) {
      uint64_t raw = (uint64_t)((double)ms * 1e6 + 0.5);
      uint64_t ns = p->idle ? (raw > p->host ? raw - p->host : 0) : raw;
      __atomic_fetch_add(&p->slot->sampled_raw_ns, raw, __ATOMIC_RELAXED);
      __atomic_fetch_add(&p->slot->sampled_idle, (uint64_t)p->idle, __ATOMIC_RELAXED);
      __atomic_fetch_add(&p->slot->sampled_ns, ns, __ATOMIC_RELAXED);
      __atomic_fetch_add(&p->slot->sampled_n, 1, __ATOMIC_RELAXED);
    } else {
      __atomic_fetch_add(&gs_sampling.failed, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&p->state, 0, __ATOMIC_RELEASE);
  }
  return busy;
}

static void* harvest(void* arg) {
  struct timespec nap = {0, 1000000}; /* 1 ms between sweeps while pairs are in flight */
  struct timespec idle = {0, 5000000};
  (void)arg;
  fn.ctx_set_current(g_ctx);
  for (;;) nanosleep(sweep() ? &nap : &idle, NULL);
  return NULL;
}

/* At exit: the pairs whose replays have finished by now, so a short run's
 * samples are not lost with the harvester's next nap. */
void gs_sample_drain(void) {
  if (__atomic_load_n(&g_pool_state, __ATOMIC_ACQUIRE) != 2) return;
  sweep();
}

/* The pool, made once in the context current on the first sampling thread. */
static int pool_ready(void) {
  int state = __atomic_load_n(&g_pool_state, __ATOMIC_ACQUIRE), expected = 0, i;
  if (state == 2) return 1;
  if (state != 0 || !__atomic_compare_exchange_n(&g_pool_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return 0;
  if (fn.ctx_get_current(&g_ctx) != GS_CUDA_SUCCESS || !g_ctx) goto failed;
  for (i = 0; i < GS_PAIRS; i++)
    if (fn.event_create(&g_pairs[i].start, 0) != GS_CUDA_SUCCESS ||
        fn.event_create(&g_pairs[i].end, 0) != GS_CUDA_SUCCESS)
      goto failed;
  if (pthread_create(&g_harvester, NULL, harvest, NULL) != 0) goto failed;
  pthread_detach(g_harvester);
  __atomic_store_n(&g_pool_state, 2, __ATOMIC_RELEASE);
  return 1;
failed:
  __atomic_store_n(&g_pool_state, 3, __ATOMIC_RELEASE);
  return 0;
}

int gs_sample_begin(gs_slot* slot, gs_CUstream s, int per_thread, void** ticket) {
  gs_CUcontext ctx = NULL;
  int i;
  gs_CUresult (*record)(gs_CUevent, gs_CUstream);
  if (__builtin_expect(!g_period, 1) || !slot) return 0;
  if (__atomic_fetch_add(&slot->sample_tick, 1, __ATOMIC_RELAXED) % (uint64_t)g_period != 0) return 0;
  if (gs_stream_capturing(s)) return 0;
  if (g_gap_ns) { /* the process's cap on samples per second */
    uint64_t now = gs_now_ns(), last = __atomic_load_n(&g_last_ns, __ATOMIC_RELAXED);
    if (now - last < g_gap_ns ||
        !__atomic_compare_exchange_n(&g_last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return 0;
  }
  if (!pool_ready()) { /* being made on another thread, or failed */
    __atomic_fetch_add(&gs_sampling.skipped, 1, __ATOMIC_RELAXED);
    return 0;
  }
  record = per_thread ? fn.event_record_ptsz : fn.event_record;
  if (!record || fn.ctx_get_current(&ctx) != GS_CUDA_SUCCESS || ctx != g_ctx) {
    __atomic_fetch_add(&gs_sampling.skipped, 1, __ATOMIC_RELAXED);
    return 0;
  }
  for (i = 0; i < GS_PAIRS; i++) {
    int expected = 0;
    pair* p = &g_pairs[i];
    gs_CUresult (*query)(gs_CUstream) = per_thread ? gs_driver.stream_query_ptsz : gs_driver.stream_query;
    if (!__atomic_compare_exchange_n(&p->state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) continue;
    p->idle = query && query(s) == GS_CUDA_SUCCESS;
    p->t0 = gs_now_ns();
    if (record(p->start, s) != GS_CUDA_SUCCESS) {
      __atomic_store_n(&p->state, 0, __ATOMIC_RELEASE);
      __atomic_fetch_add(&gs_sampling.failed, 1, __ATOMIC_RELAXED);
      return 0;
    }
    p->slot = slot;
    *ticket = p;
    return 1;
  }
  __atomic_fetch_add(&gs_sampling.skipped, 1, __ATOMIC_RELAXED);
  return 0;
}

void gs_sample_end(void* ticket, gs_CUstream s, int per_thread, int launched) {
  pair* p = (pair*)ticket;
  gs_CUresult (*record)(gs_CUevent, gs_CUstream) = per_thread ? fn.event_record_ptsz : fn.event_record;
  p->host = gs_now_ns() - p->t0;
  if (!launched || record(p->end, s) != GS_CUDA_SUCCESS) {
    __atomic_store_n(&p->state, 0, __ATOMIC_RELEASE);
    return;
  }
  __atomic_fetch_add(&gs_sampling.taken, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&p->state, 2, __ATOMIC_RELEASE);
}
