/* hostile_writer MODE N: a workload whose ring says odd things (it uses
 * only the ring functions every probe.h version has, so it also runs
 * against older sidecars for before/after figures):
 *   names N    N NAME records with distinct ids, all pointing at the same 4 bytes
 *   unknown N  N counter records with distinct ids that were never named
 * Written in chunks of 50,000 with a pause, so that a sidecar that keeps up
 * loses nothing; then waits 2 s for it and prints "done". */
#include <graphsignal/probe.h>

int main(int argc, char** argv) {
  char name[256];
  size_t size;
  unsigned long n, i;
  uint32_t first;
  graphsignal_ring_header* h;
  struct timespec pause = {0, 30000000L}, end = {2, 0};
  int names;
  if (argc < 3 || !graphsignal_ring_name(name, sizeof name, "probe")) return 2;
  names = strcmp(argv[1], "names") == 0;
  n = strtoul(argv[2], NULL, 10);
  h = graphsignal_ring_open(name, GRAPHSIGNAL_KIND_PROBE, 1u << 18, 1u << 20, &size);
  if (!h) return 3;
  first = graphsignal_ring_new_name_id(h);
  graphsignal_ring_send_name(h, first, GRAPHSIGNAL_NAME_PLAIN, "abcd", 4);
  for (i = 0; i < n; i++) {
    if (names)
      graphsignal_ring_write(h, GRAPHSIGNAL_REC_NAME, GRAPHSIGNAL_NAME_PLAIN, 0, (uint32_t)(first + 1 + i), 0, 4);
    else
      graphsignal_ring_write(h, GRAPHSIGNAL_REC_COUNTER, 0, 0, (uint32_t)(1000000 + i), 1, 0);
    if (i % 50000 == 49999) nanosleep(&pause, NULL);
  }
  nanosleep(&end, NULL);
  printf("done %llu dropped\n", (unsigned long long)h->dropped);
  return 0;
}
