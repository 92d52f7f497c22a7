/* rank_writer N: one rank of a job: a CUPTI-kind ring (as the injection
 * library makes, through probe.h's functions) with N kernel records under
 * 4 names, and a probe histogram with N values. Prints "PID cupti yes|no
 * probe yes|no": whether each ring exists. */
#include <graphsignal/probe.h>

int main(int argc, char** argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000ul, i;
  char name[256];
  size_t size;
  uint32_t ids[4] = {0, 0, 0, 0};
  graphsignal_ring_header* ring = NULL;
  graphsignal_probe_entry* h;
  if (graphsignal_ring_name(name, sizeof name, "cupti"))
    ring = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_CUPTI, graphsignal_ring_env_capacity(),
                                 GRAPHSIGNAL_RING_DEFAULT_STRINGS, &size);
  if (ring) {
    for (i = 0; i < 4; i++) {
      char k[64];
      snprintf(k, sizeof k, "_Z11rank_kernelILi%luEEvv", i);
      graphsignal_ring_put_name(ring, &ids[i], GRAPHSIGNAL_NAME_PLAIN, k, strlen(k));
    }
    for (i = 0; i < n; i++) graphsignal_ring_write(ring, GRAPHSIGNAL_REC_KERNEL, 0, 0, ids[i & 3], 100, 0);
    graphsignal_ring_close(ring);
  }
  h = graphsignal_probe_register("rank_step_nanoseconds", GRAPHSIGNAL_HISTOGRAM, NULL, NULL, 0);
  for (i = 0; i < n; i++) graphsignal_record(h, 1000 + i);
  printf("%ld cupti %s probe %s\n", (long)getpid(), ring ? "yes" : "no", graphsignal_probe_type_of(h) ? "yes" : "no");
  return 0;
}
