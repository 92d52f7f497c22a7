/* The interposer's counts into the process's ring (--cuda-trace light).
 *
 * Under graphsignal-run --cuda-trace light (GRAPHSIGNAL_RUN_ID set, and
 * GRAPHSIGNAL_CUDA_TRACE=light, which graphsignal-run sets: preloaded into
 * a run of another collection, the interposer sends nothing, so no series
 * is counted twice) one thread, started when
 * the process first reaches the driver, sends the counters' growth every
 * GS_FLUSH_MS, and the exit sends the rest. The ring,
 * /dev/shm/gs-<run>-<pid>-interpose, is made at the first flush that has
 * something to send: a process that loads the driver and never launches
 * anything has none. Records (probe.h):
 *
 *   KERNEL_COUNT  launches per kernel symbol, on the device of the context
 *                 the function was first launched in;
 *   GRAPH_SAMPLED replays per graph (its name as the CUPTI collection
 *                 names it), with the estimated GPU time: replays times the
 *                 mean of the timed replays so far, sent as the growth of
 *                 that product (never negative);
 *   SYNC_AGG      synchronizations per kind with their host time;
 *   MEMCPY_COUNT  calls and bytes per copy kind and host memory of each
 *                 side (pageable, pinned, managed; unknown where the side
 *                 is not host memory or the registry cannot say);
 *   MEMSET_COUNT  calls and bytes of memsets;
 *   DEVICE        each device's UUID, before its first record.
 *
 * A ring without room for a record's few slots is not written to: the
 * record goes, whole, at the next flush (counts are never lost to a full
 * ring, only delayed, and the ring's `dropped` counts only what is lost).
 * At exit the rest waits for the reader to make room, while it does (at
 * most GS_EXIT_WAIT_MS, GS_EXIT_STALL_MS without progress). Nothing here
 * runs on the workload's calls.
 *
 * fork: the child keeps the parent's counters but not this thread, and
 * never writes (its counts would repeat the parent's in the parent's
 * ring); CUDA cannot be used in such a child anyway. exec starts afresh. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <graphsignal/probe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"

#define GS_FLUSH_MS 250
#define GS_EXIT_WAIT_MS 2000 /* the exit's wait for room, at most (the CUPTI library's exit waits as long) */
#define GS_EXIT_STALL_MS 1000 /* ... and while the reader moves: a ring nobody drains is left after this */
#define GS_RECORD_SLOTS 3    /* the most one count takes: its device's record, its name, itself */
#define GS_RING_RECORDS (1u << 14)
#define GS_RING_STRINGS (4u << 20) /* kernel symbols are long: 4 MiB holds ~20,000 */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* one flush at a time */
static graphsignal_ring_header* g_ring;
static int g_ring_failed;
static pid_t g_pid;
static int g_forked;
static char g_ring_name[256];

static uint32_t g_device_sent[GS_MAX_DEVICES]; /* 1: its DEVICE record went */
static uint32_t g_other_id;                     /* the "(other)" frame's name id, sent once */
static uint64_t g_kernels_over_sent, g_graphs_over_sent; /* table-full launches and replays sent */
static gs_device_counters g_sent[GS_MAX_DEVICES]; /* what went of each counter */

static int ring(void) {
  size_t size = 0;
  if (g_ring) return 1;
  if (g_ring_failed) return 0;
  g_ring = graphsignal_ring_open(g_ring_name, GRAPHSIGNAL_KIND_INTERPOSE, GS_RING_RECORDS, GS_RING_STRINGS, &size);
  /* on failure the header left the marker <name>.none; the sidecar says why */
  if (!g_ring) g_ring_failed = 1;
  return g_ring != NULL;
}

/* Room for n more records, by the reader's own index (one writer: g_mu). */
static int has_room(uint64_t n) {
  uint64_t w = __atomic_load_n(&g_ring->write_index, __ATOMIC_RELAXED);
  uint64_t r = __atomic_load_n(&g_ring->read_index, __ATOMIC_ACQUIRE);
  return w - r + n <= g_ring->capacity;
}

static void format_uuid(const unsigned char* b, char* s, size_t n) {
  snprintf(s, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* The device's DEVICE record, once (0 when it could not go yet). */
static int device_ready(int dev) {
  int cu = 0;
  unsigned char b[16];
  char uuid[48];
  uint32_t id;
  if (dev < 0 || dev >= GS_MAX_DEVICES) return 0;
  if (g_device_sent[dev]) return 1;
  if (gs_driver.device_get && gs_driver.device_get_uuid && gs_driver.device_get(&cu, dev) == GS_CUDA_SUCCESS &&
      gs_driver.device_get_uuid(b, cu) == GS_CUDA_SUCCESS) {
    format_uuid(b, uuid, sizeof uuid);
    id = graphsignal_ring_new_name_id(g_ring);
    if (!graphsignal_ring_send_name(g_ring, id, GRAPHSIGNAL_NAME_PLAIN, uuid, strlen(uuid)) ||
        !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_DEVICE, 0, (uint16_t)dev, id, 0, 0))
      return 0;
  }
  /* no UUID from this driver: the device goes by its ordinal alone */
  g_device_sent[dev] = 1;
  return 1;
}

/* The slot's name id in the ring, sent on first use and again after a
 * rename (a graph re-instantiated into a reused handle); 0: not yet. */
static uint32_t name_of(gs_slot* s, const char* fallback) {
  const char* name;
  uint32_t id, gen = __atomic_load_n(&s->name_gen, __ATOMIC_ACQUIRE);
  if (s->name_id && gen == s->name_gen_sent) return s->name_id;
  name = __atomic_load_n(&s->name, __ATOMIC_ACQUIRE);
  if (!name) name = fallback;
  id = graphsignal_ring_new_name_id(g_ring);
  if (!graphsignal_ring_send_name(g_ring, id, GRAPHSIGNAL_NAME_PLAIN, name, strnlen(name, GS_NAME_MAX * 64)))
    return 0;
  s->name_id = id;
  s->name_gen_sent = gen;
  return id;
}

/* Launches or replays of handles past a full table, as the "(other)" frame
 * (the payload's frame for names past a writer's table) on device 0:
 * counted, never dropped without a word. */
static int flush_overflow(uint8_t type, uint64_t* over, uint64_t* sent) {
  uint64_t n = __atomic_load_n(over, __ATOMIC_RELAXED), d = n - *sent;
  const char* other = "(other)";
  if (!d) return 0;
  if (!has_room(GS_RECORD_SLOTS)) return 1;
  if (d > 0xFFFFFFFFull && type == GRAPHSIGNAL_REC_GRAPH_SAMPLED) d = 0xFFFFFFFFull;
  if (!g_other_id) {
    uint32_t id = graphsignal_ring_new_name_id(g_ring);
    if (!graphsignal_ring_send_name(g_ring, id, GRAPHSIGNAL_NAME_PLAIN, other, strlen(other))) return 1;
    g_other_id = id;
  }
  if (!device_ready(0) || !graphsignal_ring_write(g_ring, type, 0, 0, g_other_id,
                                                  type == GRAPHSIGNAL_REC_GRAPH_SAMPLED ? 0 : d,
                                                  type == GRAPHSIGNAL_REC_GRAPH_SAMPLED ? d : 0))
    return 1;
  *sent += d;
  return 0;
}

static int flush_kernels(void) {
  uint32_t i;
  int pending = 0;
  for (i = 0; i < GS_TABLE_SIZE; i++) {
    gs_slot* s = &gs_state.kernels.slots[i];
    uint64_t n;
    uint32_t id;
    int dev;
    if (!__atomic_load_n(&s->key, __ATOMIC_ACQUIRE)) continue;
    n = __atomic_load_n(&s->count, __ATOMIC_RELAXED);
    if (n == s->flushed || !__atomic_load_n(&s->name, __ATOMIC_ACQUIRE)) continue; /* name: set just after count */
    if (!has_room(GS_RECORD_SLOTS)) return 1;
    dev = __atomic_load_n(&s->device, __ATOMIC_RELAXED);
    if (!device_ready(dev) || !(id = name_of(s, "(unnamed kernel)")) ||
        !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_KERNEL_COUNT, 0, (uint16_t)dev, id, n - s->flushed, 0)) {
      pending = 1;
      continue;
    }
    s->flushed = n;
  }
  return pending;
}

static int flush_graphs(void) {
  uint32_t i;
  int pending = 0;
  for (i = 0; i < GS_TABLE_SIZE; i++) {
    gs_slot* s = &gs_state.graphs.slots[i];
    uint64_t n, timed, timed_ns, est, d_est, d_timed, d_n;
    uint32_t id;
    int dev;
    if (!__atomic_load_n(&s->key, __ATOMIC_ACQUIRE)) continue;
    n = __atomic_load_n(&s->count, __ATOMIC_RELAXED);
    timed = __atomic_load_n(&s->sampled_n, __ATOMIC_RELAXED);
    timed_ns = __atomic_load_n(&s->sampled_ns, __ATOMIC_RELAXED);
    if (n == s->flushed && timed == s->timed_sent) continue;
    if (!has_room(GS_RECORD_SLOTS)) return 1;
    /* the estimate of all replays so far; a drop in the mean sends no negative time */
    est = timed ? (uint64_t)((double)timed_ns / (double)timed * (double)n + 0.5) : 0;
    d_est = est > s->est_sent_ns ? est - s->est_sent_ns : 0;
    d_n = n - s->flushed;
    d_timed = timed - s->timed_sent;
    if (d_n > 0xFFFFFFFFull) d_n = 0xFFFFFFFFull; /* the rest goes next time */
    if (d_timed > 0xFFFFFFFFull) d_timed = 0xFFFFFFFFull;
    dev = __atomic_load_n(&s->device, __ATOMIC_RELAXED);
    if (!device_ready(dev) || !(id = name_of(s, "(unnamed graph)")) ||
        !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_GRAPH_SAMPLED, 0, (uint16_t)dev, id, d_est,
                                d_n | d_timed << 32)) {
      pending = 1;
      continue;
    }
    s->flushed += d_n;
    s->timed_sent += d_timed;
    s->est_sent_ns += d_est;
  }
  return pending;
}

static int flush_device(int dev) {
  gs_device_counters* c = &gs_state.dev[dev];
  gs_device_counters* sent = &g_sent[dev];
  int i, pending = 0;
  for (i = 1; i < GS_SYNC_KINDS; i++) {
    /* what was sent is kept in ns (sent->syncs[i].ticks holds ns): the total
     * of ticks is converted anew each time, never below what went before */
    uint64_t n = __atomic_load_n(&c->syncs[i].calls, __ATOMIC_RELAXED);
    uint64_t dn = n - sent->syncs[i].calls;
    uint64_t ns;
    if (!dn) continue;
    if (!has_room(GS_RECORD_SLOTS)) return 1;
    ns = gs_ticks_to_ns(__atomic_load_n(&c->syncs[i].ticks, __ATOMIC_RELAXED));
    if (ns < sent->syncs[i].ticks) ns = sent->syncs[i].ticks;
    if (dn > 0xFFFFFFFFull) { /* name_id holds 32 bits of calls; their time is sent with the last part */
      dn = 0xFFFFFFFFull;
      ns = sent->syncs[i].ticks;
    }
    /* a synchronous copy's wait is sync kind 32 in the ring: not one of CUPTI's (graphsignal.rings.cuda_names) */
    if (!device_ready(dev) || !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_SYNC_AGG,
                                                      (uint8_t)(i == GS_SYNC_COPY ? 32 : i), (uint16_t)dev,
                                                      (uint32_t)dn, ns - sent->syncs[i].ticks, 0)) {
      pending = 1;
      continue;
    }
    sent->syncs[i].calls += dn;
    sent->syncs[i].ticks = ns;
  }
  for (i = 0; i < GS_COPY_KINDS * GS_MEM_CLASSES * GS_MEM_CLASSES; i++) {
    int kind = i / (GS_MEM_CLASSES * GS_MEM_CLASSES), sc = i / GS_MEM_CLASSES % GS_MEM_CLASSES, dc = i % GS_MEM_CLASSES;
    gs_bytes_counter* now = &c->copies[kind][sc][dc];
    gs_bytes_counter* went = &sent->copies[kind][sc][dc];
    uint64_t n = __atomic_load_n(&now->calls, __ATOMIC_RELAXED);
    uint64_t b = __atomic_load_n(&now->bytes, __ATOMIC_RELAXED);
    /* the host memory of each side as CUPTI's memcpy records carry it: src | dst << 8 */
    uint32_t mem = gs_hostmem_cupti_kind(sc) | gs_hostmem_cupti_kind(dc) << 8;
    if (n == went->calls) continue;
    if (!has_room(GS_RECORD_SLOTS)) return 1;
    if (!device_ready(dev) || !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_MEMCPY_COUNT, (uint8_t)kind,
                                                      (uint16_t)dev, mem, n - went->calls, b - went->bytes)) {
      pending = 1;
      continue;
    }
    went->calls = n;
    went->bytes = b;
  }
  {
    uint64_t n = __atomic_load_n(&c->memsets.calls, __ATOMIC_RELAXED);
    uint64_t b = __atomic_load_n(&c->memsets.bytes, __ATOMIC_RELAXED);
    if (n != sent->memsets.calls) {
      if (!has_room(GS_RECORD_SLOTS) || !device_ready(dev) ||
          !graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_MEMSET_COUNT, 0, (uint16_t)dev, 0, n - sent->memsets.calls,
                                  b - sent->memsets.bytes))
        pending = 1;
      else
        sent->memsets.calls = n, sent->memsets.bytes = b;
    }
  }
  return pending;
}

static int anything_counted(void) {
  return __atomic_load_n(&gs_state.kernels.used, __ATOMIC_RELAXED) ||
         __atomic_load_n(&gs_state.graphs.used, __ATOMIC_RELAXED) || memcmp(gs_state.dev, g_sent, sizeof g_sent) != 0;
}

/* 1 while something counted is still to be sent (the ring had no room). */
static int flush_once(void) {
  int dev, pending = 0;
  if (g_forked || getpid() != g_pid) return 0;
  pthread_mutex_lock(&g_mu);
  if (g_ring || anything_counted()) {
    if (ring()) {
      pending |= flush_kernels();
      pending |= flush_overflow(GRAPHSIGNAL_REC_KERNEL_COUNT, &gs_state.kernels.overflow, &g_kernels_over_sent);
      pending |= flush_graphs();
      pending |= flush_overflow(GRAPHSIGNAL_REC_GRAPH_SAMPLED, &gs_state.graphs.overflow, &g_graphs_over_sent);
      for (dev = 0; dev < GS_MAX_DEVICES; dev++) pending |= flush_device(dev);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return pending;
}

/* The exit's rest, while the reader makes room: bounded, and left once the
 * reader has not moved for GS_EXIT_STALL_MS (no sidecar, or one that
 * stopped reading). */
static void flush_rest(void) {
  struct timespec nap = {0, 1000000L};
  uint64_t start = gs_now_ns() / 1000000u, moved = start, r = 0;
  while (flush_once() && g_ring) {
    uint64_t now = gs_now_ns() / 1000000u, r2 = __atomic_load_n(&g_ring->read_index, __ATOMIC_ACQUIRE);
    if (r2 != r) r = r2, moved = now;
    if (now - start >= GS_EXIT_WAIT_MS || now - moved >= GS_EXIT_STALL_MS) {
      /* what is left is lost: said once, where people look (the sidecar's payload cannot hear it now) */
      const char* level = getenv("GRAPHSIGNAL_LOG_LEVEL");
      if (!level || (strcasecmp(level, "error") && strcasecmp(level, "critical")))
        fprintf(stderr, "graphsignal-interpose[%ld] warning: at exit the profiler's reader made no room in %llu ms: "
                        "the last CUDA counts of this process were not sent (the numbers are incomplete)\n",
                (long)getpid(), (unsigned long long)(now - start));
      return;
    }
    nanosleep(&nap, NULL);
  }
}

static void* flusher(void* arg) {
  struct timespec nap = {0, GS_FLUSH_MS * 1000000L};
  (void)arg;
  for (;;) {
    nanosleep(&nap, NULL);
    flush_once();
  }
  return NULL;
}

static void at_exit(void) {
  if (!g_forked && getpid() == g_pid) gs_sample_drain();
  flush_rest();
  if (!g_forked && getpid() == g_pid && g_ring) graphsignal_ring_close(g_ring); /* nothing more will come */
}

static void on_fork_child(void) { g_forked = 1; }

/* What this driver lacks, said once on stderr (the CUPTI library's way):
 * the family stays counted as well as it can be, and the line says how. */
static void say_missing(void) {
  const char* level = getenv("GRAPHSIGNAL_LOG_LEVEL");
  long pid = (long)getpid();
  if (level && (!strcasecmp(level, "error") || !strcasecmp(level, "critical"))) return;
  if (!gs_driver.graph_get_nodes || !gs_driver.node_get_type || !gs_driver.kernel_node_get_params ||
      !(gs_driver.func_get_name || gs_driver.kernel_get_name))
    fprintf(stderr, "graphsignal-interpose[%ld] warning: this CUDA driver lacks the graph walk (cuGraphGetNodes, "
                    "cuGraphNodeGetType, cuGraphKernelNodeGetParams_v2, cuFuncGetName): graph replays are counted "
                    "under \"(unnamed graph)\"\n", pid);
  if (!gs_driver.stream_is_capturing)
    fprintf(stderr, "graphsignal-interpose[%ld] warning: this CUDA driver lacks cuStreamIsCapturing: work put on a "
                    "capturing stream is counted as run\n", pid);
  if (!gs_driver.ctx_get_current || !gs_driver.ctx_get_device)
    fprintf(stderr, "graphsignal-interpose[%ld] warning: this CUDA driver lacks cuCtxGetCurrent or cuCtxGetDevice: "
                    "every count goes to device 0\n", pid);
}

void gs_flush_setup(void) {
  pthread_t t;
  const char* mode = getenv("GRAPHSIGNAL_CUDA_TRACE");
  if (!mode || strcmp(mode, "light") != 0) return;
  if (!graphsignal_ring_name(g_ring_name, sizeof g_ring_name, "interpose")) return; /* not under graphsignal-run */
  g_pid = getpid();
  say_missing();
  gs_hostmem_say(1);
  pthread_atfork(NULL, NULL, on_fork_child);
  atexit(at_exit);
  if (pthread_create(&t, NULL, flusher, NULL) == 0) pthread_detach(t);
}
