/* ring_contended NAME WRITERS TOTAL CAPACITY: WRITERS threads put TOTAL
 * records in all through one ring, as fast as they can, while a reader
 * thread in the same process drains it as the sidecar does (records copied
 * in index order while committed, then a release store of read_index per
 * batch). A record the full ring refuses is written again, after a
 * sched_yield (the reader may share the core), until it is taken (each
 * refusal counts in the ring's dropped), so every record
 * crosses: the protocol's throughput with both sides busy, SPSCQueue's
 * benchmark for this ring. Prints "written refused read seconds". */
#include <graphsignal/probe.h>
#include <pthread.h>
#include <sched.h>

static graphsignal_ring_header* g_ring;
static unsigned long long g_per, g_ok[64];
static volatile int g_done;
static unsigned long long g_read;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void* writer(void* arg) {
  unsigned long t = (unsigned long)arg;
  unsigned long long i, ok = 0;
  for (i = 0; i < g_per; i++) {
    while (!graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_KERNEL, 0, 0, (uint32_t)(i & 63) + 1, 1000 + (i & 1023),
                                   t))
      sched_yield();
    ok++;
  }
  g_ok[t] = ok;
  return NULL;
}

static void* reader(void* arg) {
  graphsignal_ring_record* slots = graphsignal_ring_slots(g_ring);
  uint64_t mask = g_ring->capacity - 1, r = 0, sum = 0;
  (void)arg;
  for (;;) {
    int done = __atomic_load_n(&g_done, __ATOMIC_ACQUIRE);
    uint64_t w = __atomic_load_n(&g_ring->write_index, __ATOMIC_ACQUIRE), start = r;
    while (r < w) {
      graphsignal_ring_record* s = &slots[r & mask];
      if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != r + 1) break;
      sum += s->value;
      r++;
    }
    if (r != start) __atomic_store_n(&g_ring->read_index, r, __ATOMIC_RELEASE);
    else if (done) break;
  }
  g_read = r + (sum == 0);  /* sum: the copy is not optimized away */
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t th[64], rd;
  unsigned long n, t;
  unsigned long long total, ok = 0;
  size_t size;
  uint64_t t0, t1;
  if (argc < 5) return 2;
  n = strtoul(argv[2], NULL, 10);
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  total = strtoull(argv[3], NULL, 10);
  g_per = total / n;
  g_ring = graphsignal_ring_open(argv[1], GRAPHSIGNAL_KIND_TEST, strtoull(argv[4], NULL, 10), 4096, &size);
  if (!g_ring) return 1;
  pthread_create(&rd, NULL, reader, NULL);
  t0 = mono_ns();
  for (t = 0; t < n; t++) pthread_create(&th[t], NULL, writer, (void*)t);
  for (t = 0; t < n; t++) pthread_join(th[t], NULL);
  __atomic_store_n(&g_done, 1, __ATOMIC_RELEASE);
  pthread_join(rd, NULL);
  t1 = mono_ns();
  for (t = 0; t < n; t++) ok += g_ok[t];
  graphsignal_ring_close(g_ring);
  printf("%llu %llu %llu %.4f\n", ok, (unsigned long long)g_ring->dropped, g_read, (double)(t1 - t0) / 1e9);
  shm_unlink(argv[1]);
  return 0;
}
