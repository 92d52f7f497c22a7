/* probe_bench THREADS PER_BURST BURSTS PAUSE_MS: each thread records
 * PER_BURST histogram values per burst, BURSTS times, pausing PAUSE_MS
 * between bursts so the sidecar drains the ring (the write path is measured,
 * not the drop path). Prints: threads calls cpu_ns_per_call wall_ns_per_call
 * dropped active. */
#include <graphsignal/probe.h>

static graphsignal_probe_entry* g_e;
static unsigned long g_per, g_bursts, g_pause_ms;
static pthread_barrier_t g_barrier;
static uint64_t g_cpu[64], g_wall[64];

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void* worker(void* arg) {
  unsigned long t = (unsigned long)(uintptr_t)arg, b, i;
  for (b = 0; b < g_bursts; b++) {
    uint64_t c0, w0;
    pthread_barrier_wait(&g_barrier);
    c0 = cpu_ns();
    w0 = graphsignal_now_ns();
    for (i = 0; i < g_per; i++) graphsignal_record(g_e, i);
    g_cpu[t] += cpu_ns() - c0;
    g_wall[t] += graphsignal_now_ns() - w0;
    pthread_barrier_wait(&g_barrier);
    if (t == 0 && g_pause_ms) {
      struct timespec ts = {(time_t)(g_pause_ms / 1000), (long)(g_pause_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  unsigned long n, t;
  pthread_t th[64];
  uint64_t cpu = 0, wall = 0;
  double calls;
  if (argc < 5) return 2;
  n = strtoul(argv[1], NULL, 10);
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  g_per = strtoul(argv[2], NULL, 10);
  g_bursts = strtoul(argv[3], NULL, 10);
  g_pause_ms = strtoul(argv[4], NULL, 10);
  g_e = graphsignal_probe_register("bench_probe_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
  pthread_barrier_init(&g_barrier, NULL, (unsigned)n);
  for (t = 0; t < n; t++) pthread_create(&th[t], NULL, worker, (void*)(uintptr_t)t);
  for (t = 0; t < n; t++) pthread_join(th[t], NULL);
  for (t = 0; t < n; t++) {
    cpu += g_cpu[t];
    wall += g_wall[t];
  }
  calls = (double)n * (double)g_per * (double)g_bursts;
  printf("%lu %.0f %.3f %.3f %llu %d\n", n, calls, (double)cpu / calls, (double)wall / calls,
         g_e && g_e->ring ? (unsigned long long)g_e->ring->dropped : 0ull, graphsignal_probe_type_of(g_e) != 0);
  return 0;
}
