/* counter_writer SERIES RATE SECONDS THREADS [DELAY]: registers SERIES counters
 * (one name, tag shard=0..SERIES-1) through the probe header and adds 1 to
 * them round robin at RATE records/s in total (0: as fast as possible) for
 * SECONDS, from THREADS threads, after sleeping DELAY seconds (the sidecar
 * comes up meanwhile: its start is not what is measured), or, where DELAY is
 * a path (it has a '/'), once that file exists (at most 30 s: a test creates
 * it when the sidecar drains the ring). Prints "written dropped seconds": records
 * offered, and the probe ring's own `dropped` count (records that did not
 * fit because the drain fell behind). */
#include <graphsignal/probe.h>
#include <pthread.h>

static graphsignal_probe_entry** g_e;
static unsigned long g_series, g_threads;
static double g_rate, g_seconds;
static unsigned long long g_written[64];

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void* worker(void* arg) {
  unsigned long t = (unsigned long)(uintptr_t)arg;
  unsigned long long i = 0;
  double per = g_rate / (double)g_threads;
  uint64_t t0 = mono_ns(), end = t0 + (uint64_t)(g_seconds * 1e9), now = t0;
  for (;;) {
    if ((i & 255) == 0) {
      now = mono_ns();
      if (now >= end) break;
      if (per > 0) {
        uint64_t due = t0 + (uint64_t)((double)i * 1e9 / per);
        if (due > now) {
          struct timespec ts = {(time_t)((due - now) / 1000000000ull), (long)((due - now) % 1000000000ull)};
          nanosleep(&ts, NULL);
        }
      }
    }
    graphsignal_add(g_e[(i * g_threads + t) % g_series], 1);
    i++;
  }
  g_written[t] = i;
  return NULL;
}

int main(int argc, char** argv) {
  const char* keys[1] = {"shard"};
  char value[32];
  const char* values[1] = {value};
  pthread_t th[64];
  unsigned long i;
  unsigned long long written = 0, dropped = 0;
  uint64_t t0;
  if (argc < 5) return 2;
  g_series = strtoul(argv[1], NULL, 10);
  g_rate = atof(argv[2]);
  g_seconds = atof(argv[3]);
  g_threads = strtoul(argv[4], NULL, 10);
  if (g_series < 1) g_series = 1;
  if (g_threads < 1) g_threads = 1;
  if (g_threads > 64) g_threads = 64;
  g_e = (graphsignal_probe_entry**)calloc(g_series, sizeof *g_e);
  if (!g_e) return 2;
  for (i = 0; i < g_series; i++) {
    snprintf(value, sizeof value, "%lu", i);
    g_e[i] = graphsignal_probe_register("bench_events_total", GRAPHSIGNAL_COUNTER, keys, values, 1);
    if (!g_e[i]) return 3;
  }
  if (argc > 5 && strchr(argv[5], '/')) {
    struct timespec tick = {0, 20000000};
    for (i = 0; i < 1500 && access(argv[5], F_OK) != 0; i++) nanosleep(&tick, NULL);
  } else if (argc > 5 && atof(argv[5]) > 0) {
    double d = atof(argv[5]);
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
  }
  t0 = mono_ns();
  for (i = 0; i < g_threads; i++) pthread_create(&th[i], NULL, worker, (void*)(uintptr_t)i);
  for (i = 0; i < g_threads; i++) {
    pthread_join(th[i], NULL);
    written += g_written[i];
  }
  if (g_e[0]->ring) dropped = __atomic_load_n(&g_e[0]->ring->dropped, __ATOMIC_RELAXED);
  printf("%llu %llu %.3f\n", written, dropped, (double)(mono_ns() - t0) / 1e9);
  return 0;
}
