/* ring_stress NAME THREADS PER_THREAD CAPACITY [RATE [RETRY]]
 * THREADS threads write PER_THREAD REC_TEST records each into one ring
 * (value = i, extra = thread, device = thread), as fast as they can, or at
 * RATE records/s in total when given (0: as fast). RETRY=1: a record the
 * full ring refuses is written again until it is taken (each refusal is
 * still counted in the ring's dropped). Prints one line: written dropped. */
#include <graphsignal/probe.h>
#include <pthread.h>
#include <sched.h>

static graphsignal_ring_header* g_ring;
static unsigned long long g_per;
static double g_rate_per_thread;
static int g_retry;
static unsigned long long g_written[64];

static void sleep_until(uint64_t t_ns) {
  struct timespec ts;
  uint64_t now;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  if (t_ns > now) {
    uint64_t d = t_ns - now;
    ts.tv_sec = (time_t)(d / 1000000000ull);
    ts.tv_nsec = (long)(d % 1000000000ull);
    nanosleep(&ts, NULL);
  }
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void* worker(void* arg) {
  unsigned long t = (unsigned long)arg;
  unsigned long long i, ok = 0;
  int took;
  uint64_t t0 = mono_ns();
  for (i = 0; i < g_per; i++) {
    if (g_rate_per_thread > 0 && (i & 1023) == 0)
      sleep_until(t0 + (uint64_t)((double)i * 1e9 / g_rate_per_thread));
    while (!(took = graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_TEST, 0, (uint16_t)t, 0, i, t)) && g_retry)
      sched_yield();
    ok += (unsigned long long)took;
  }
  g_written[t] = ok;
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t th[64];
  unsigned long n, t;
  unsigned long long written = 0;
  size_t size = 0;
  if (argc < 5) return 2;
  n = strtoul(argv[2], NULL, 10);
  if (n > 64) n = 64;
  g_per = strtoull(argv[3], NULL, 10);
  g_rate_per_thread = argc > 5 ? atof(argv[5]) / (double)n : 0;
  g_retry = argc > 6 && atoi(argv[6]) == 1;
  g_ring = graphsignal_ring_open(argv[1], GRAPHSIGNAL_KIND_TEST, strtoull(argv[4], NULL, 10), 4096, &size);
  if (!g_ring) {
    perror("ring");
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  for (t = 0; t < n; t++) pthread_create(&th[t], NULL, worker, (void*)t);
  for (t = 0; t < n; t++) pthread_join(th[t], NULL);
  for (t = 0; t < n; t++) written += g_written[t];
  graphsignal_ring_close(g_ring);
  printf("%llu %llu\n", written, (unsigned long long)__atomic_load_n(&g_ring->dropped, __ATOMIC_RELAXED));
  return 0;
}
