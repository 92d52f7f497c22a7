/* Records known values through every probe type; compiled as C and as C++
 * with only -I include. Usage: probe_exact [fork]
 *  - histogram "exact_hist_nanoseconds" {stage=prefill}: 8 threads x 125000
 *    records, thread t records t * 1000003 + i for i in [0, 125000)
 *  - counter "exact_items_total": 8 threads x 1250000 adds of 1 (10 million)
 *  - profile "exact_ops_nanoseconds": frames op_001..op_300, frame k gets
 *    k * 1000 twice
 *  - gauge "exact_queue_depth": set 1.5, then 2.25
 * With "fork": a forked child records 7 into "exact_child_nanoseconds"
 * (registered by the parent before the fork). */
#include <graphsignal/probe.h>
#include <sys/wait.h>

static graphsignal_probe_entry *g_hist, *g_count;

static void* worker(void* arg) {
  uint64_t t = (uint64_t)(uintptr_t)arg, i;
  for (i = 0; i < 125000; i++) graphsignal_record(g_hist, t * 1000003u + i);
  for (i = 0; i < 1250000; i++) graphsignal_add(g_count, 1);
  return NULL;
}

int main(int argc, char** argv) {
  const char* keys[] = {"stage"};
  const char* values[] = {"prefill"};
  pthread_t th[8];
  uintptr_t t;
  int k;
  char frame[32];
  graphsignal_probe_entry *ops, *gauge, *child, *again;
  g_hist = graphsignal_probe_register("exact_hist_nanoseconds", GRAPHSIGNAL_HISTOGRAM, keys, values, 1);
  g_count = graphsignal_probe_register("exact_items_total", GRAPHSIGNAL_COUNTER, NULL, NULL, 0);
  ops = graphsignal_probe_register("exact_ops_nanoseconds", GRAPHSIGNAL_PROFILE, NULL, NULL, 0);
  gauge = graphsignal_probe_register("exact_queue_depth", GRAPHSIGNAL_GAUGE, NULL, NULL, 0);
  child = graphsignal_probe_register("exact_child_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
  again = graphsignal_probe_register("exact_hist_nanoseconds", GRAPHSIGNAL_HISTOGRAM, keys, values, 1);
  printf("idempotent %d\n", again == g_hist);
  printf("active %d\n", graphsignal_probe_type_of(g_hist) == GRAPHSIGNAL_HISTOGRAM);
  graphsignal_record(NULL, 1); /* NULL entries are safe */
  graphsignal_add(NULL, 1);
  graphsignal_set(NULL, 1.0);
  graphsignal_profile_add_by_name(NULL, "x", 1);
  for (t = 0; t < 8; t++) pthread_create(&th[t], NULL, worker, (void*)t);
  for (t = 0; t < 8; t++) pthread_join(th[t], NULL);
  for (k = 1; k <= 300; k++) {
    snprintf(frame, sizeof frame, "op_%03d", k);
    graphsignal_profile_add_by_name(ops, frame, (uint64_t)k * 1000u);
  }
  for (k = 1; k <= 300; k++) {
    char copy[32]; /* a different buffer with the same name: same frame */
    snprintf(copy, sizeof copy, "op_%03d", k);
    graphsignal_profile_add_by_name(ops, copy, (uint64_t)k * 1000u);
  }
  graphsignal_set(gauge, 1.5);
  graphsignal_set(gauge, 2.25);
  if (argc > 1 && strcmp(argv[1], "fork") == 0) {
    pid_t pid = fork();
    int st = 0;
    if (pid == 0) {
      graphsignal_record(child, 7);
      graphsignal_profile_add_by_name(ops, "op_child", 5);
      _exit(0);
    }
    waitpid(pid, &st, 0);
    printf("child %ld\n", (long)pid);
  }
  printf("done\n");
  return 0;
}
