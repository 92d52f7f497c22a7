/* ring_writer TOTAL RATE THREADS: writes TOTAL kernel records (64 kernel
 * names, as the CUPTI library would) into this process's ring
 * gs-<GRAPHSIGNAL_RUN_ID>-<pid>-cupti, at RATE records/s in total (0: as
 * fast as possible), from THREADS threads. Prints "written dropped seconds". */
#include <graphsignal/probe.h>
#include <pthread.h>

static graphsignal_ring_header* g_ring;
static uint32_t g_ids[64];
static unsigned long long g_per, g_ok[64];
static double g_rate;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void* worker(void* arg) {
  unsigned long t = (unsigned long)arg;
  unsigned long long i, ok = 0;
  uint64_t t0 = mono_ns();
  for (i = 0; i < g_per; i++) {
    if (g_rate > 0 && (i & 255) == 0) {
      uint64_t due = t0 + (uint64_t)((double)i * 1e9 / g_rate);
      uint64_t now = mono_ns();
      if (due > now) {
        struct timespec ts = {(time_t)((due - now) / 1000000000ull), (long)((due - now) % 1000000000ull)};
        nanosleep(&ts, NULL);
      }
    }
    ok += (unsigned long long)graphsignal_ring_write(g_ring, GRAPHSIGNAL_REC_KERNEL, 0, 0, g_ids[(i * 7 + t) & 63],
                                                     1000 + (i & 1023), 0);
  }
  g_ok[t] = ok;
  return NULL;
}

int main(int argc, char** argv) {
  char name[256], kname[64];
  size_t size;
  unsigned long n, t;
  unsigned long long total, ok = 0;
  pthread_t th[64];
  uint64_t t0;
  int i;
  if (argc < 4 || !graphsignal_ring_name(name, sizeof name, "cupti")) return 2;
  total = strtoull(argv[1], NULL, 10);
  n = strtoul(argv[3], NULL, 10);
  if (n < 1) n = 1;
  if (n > 64) n = 64;
  g_per = total / n;
  g_rate = atof(argv[2]) / (double)n;
  g_ring = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_CUPTI, graphsignal_ring_env_capacity(),
                                 GRAPHSIGNAL_RING_DEFAULT_STRINGS, &size);
  if (!g_ring) return 1;
  for (i = 0; i < 64; i++) {
    g_ids[i] = graphsignal_ring_new_name_id(g_ring);
    snprintf(kname, sizeof kname, "_Z16benchmark_kernelILi%dEEvPf", i);
    graphsignal_ring_send_name(g_ring, g_ids[i], GRAPHSIGNAL_NAME_PLAIN, kname, strlen(kname));
  }
  t0 = mono_ns();
  for (t = 0; t < n; t++) pthread_create(&th[t], NULL, worker, (void*)t);
  for (t = 0; t < n; t++) pthread_join(th[t], NULL);
  for (t = 0; t < n; t++) ok += g_ok[t];
  graphsignal_ring_close(g_ring);
  printf("%llu %llu %.3f\n", ok, (unsigned long long)g_ring->dropped, (double)(mono_ns() - t0) / 1e9);
  return 0;
}
