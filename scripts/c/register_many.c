/* register_many N: registers N counters (tagged, distinct), adds to each
 * once, registers the first 100 again (they must come back as the same
 * entries), and prints "registered N seconds S" (S: the registration time). */
#include <graphsignal/probe.h>

int main(int argc, char** argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000ul, i;
  graphsignal_probe_entry** e = (graphsignal_probe_entry**)calloc(n ? n : 1, sizeof *e);
  const char* keys[1] = {"shard"};
  char value[32];
  const char* values[1] = {value};
  uint64_t t0, t1;
  if (!e) return 2;
  t0 = graphsignal_now_ns();
  for (i = 0; i < n; i++) {
    snprintf(value, sizeof value, "%lu", i);
    e[i] = graphsignal_probe_register("many_events_total", GRAPHSIGNAL_COUNTER, keys, values, 1);
    if (!e[i]) return 3;
  }
  t1 = graphsignal_now_ns();
  for (i = 0; i < n; i++) graphsignal_add(e[i], i + 1);
  for (i = 0; i < n && i < 100; i++) {
    snprintf(value, sizeof value, "%lu", i);
    if (graphsignal_probe_register("many_events_total", GRAPHSIGNAL_COUNTER, keys, values, 1) != e[i]) return 4;
  }
  for (i = 1; i < n; i++)
    if (e[i] == e[i - 1] && graphsignal_probe_type_of(e[i])) return 5; /* distinct instruments, distinct entries */
  printf("registered %lu seconds %.4f\n", n, (double)(t1 - t0) / 1e9);
  free(e);
  return 0;
}
